// The trace model. A GPT-style decoder (pre-LayerNorm, multi-head attention without fused kernels,
// a 4x MLP with GELU, tied embedding / LM head) trained as PyTorch does it in eager mode with bf16
// weights and activations, fp32 master weights and AdamW state (Megatron-style mixed precision):
//
// - Once: every parameter tensor's bf16 weight and fp32 master copy, in registration order.
// - Each step draws a sequence length s (uniform in [seq_min, seq_max], a multiple of 8), so every
//   activation size changes from step to step: T = batch * s tokens.
// - Forward, per layer: LayerNorm output and its fp32 mean/rstd, the fused QKV projection split into
//   contiguous q, k, v; attention scores [batch, heads, s, s] -> softmax probabilities (scores freed);
//   context, transposed back; output projection and residual add; second LayerNorm; MLP up-projection
//   and GELU output (both saved); down-projection and residual add. Saved tensors stay until that
//   layer's backward. Then the final LayerNorm, bf16 logits [T, vocab], their fp32 copy and fp32
//   log-probabilities for the loss (the copies are freed as soon as the next one exists).
// - Backward, in reverse layer order: each gradient is allocated, then its inputs and the saved
//   activations it consumed are freed, in the order autograd releases them. Parameter gradients
//   (bf16) are allocated at first touch in each step, because zero_grad(set_to_none=True), PyTorch's
//   default, frees them after every step.
// - Optimizer (AdamW, foreach): fp32 exp_avg / exp_avg_sq per parameter made at the first step and
//   kept; each step a list of fp32 copies of all gradients and a list of denominators (all allocated,
//   then all freed), then zero_grad frees the gradients.
#include "trace.h"

#include <algorithm>

namespace uvmpool::bench {
namespace {

using Id = std::uint32_t;

class Builder {
 public:
  Id alloc(std::uint64_t bytes) {
    const Id id = trace_.allocations++;
    trace_.events.push_back({true, id, bytes});
    sizes_.push_back(bytes);
    live_ += bytes;
    trace_.allocated += bytes;
    trace_.peak_live = std::max(trace_.peak_live, live_);
    return id;
  }
  void free(Id id) {
    trace_.events.push_back({false, id, 0});
    live_ -= sizes_[id];
  }
  template <typename... Ids>
  void free(Id first, Ids... rest) {
    free(first);
    (free(rest), ...);
  }
  Trace take() { return std::move(trace_); }

 private:
  Trace trace_;
  std::vector<std::uint64_t> sizes_;
  std::uint64_t live_ = 0;
};

// splitmix64: the same numbers on every platform (std:: distributions are not specified exactly).
struct Random {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

constexpr Id kNone = ~Id{0};

struct Param {
  std::uint64_t elements;
  Id grad = kNone, exp_avg = kNone, exp_avg_sq = kNone;
};

// Per layer: ln1 w,b, qkv w,b, proj w,b, ln2 w,b, fc1 w,b, fc2 w,b (indices into the layer's block).
enum { kLn1W, kLn1B, kQkvW, kQkvB, kProjW, kProjB, kLn2W, kLn2B, kFc1W, kFc1B, kFc2W, kFc2B, kPerLayer };

struct Saved {
  Id x, ln1, ln1_mean, ln1_rstd, q, k, v, probs, ctx_t, x1, ln2, ln2_mean, ln2_rstd, fc1, gelu;
};

}  // namespace

Trace transformer_trace(const ModelShape& m) {
  Builder b;
  Random random{m.seed};
  const std::uint64_t H = m.hidden, V = m.vocab, L = m.layers, heads = m.heads;
  constexpr std::uint64_t bf16 = 2, fp32 = 4, i64 = 8;

  // Parameters: 0 = embedding (tied LM head), 1 + l * kPerLayer + k, then the final LayerNorm.
  std::vector<Param> params{{V * H}};
  for (std::uint64_t l = 0; l < L; ++l)
    for (std::uint64_t n : {H, H, 3 * H * H, 3 * H, H * H, H, H, H, 4 * H * H, 4 * H, 4 * H * H, H})
      params.push_back({n});
  params.push_back({H});
  params.push_back({H});
  const std::size_t final_ln = params.size() - 2;
  for (const Param& p : params) b.alloc(p.elements * bf16), b.alloc(p.elements * fp32);  // weight, master
  auto layer_param = [&](std::uint64_t l, int k) -> Param& { return params[1 + l * kPerLayer + k]; };
  auto touch_grad = [&](Param& p) {
    if (p.grad == kNone) p.grad = b.alloc(p.elements * bf16);
  };

  const int span = std::max(0, (m.seq_max - m.seq_min) / 8);
  for (int step = 0; step < m.steps; ++step) {
    const std::uint64_t s = m.seq_min + 8 * (random.next() % (span + 1));
    const std::uint64_t T = m.batch * s, TH = T * H * bf16, att = m.batch * heads * s * s * bf16;
    const Id ids = b.alloc(T * i64), labels = b.alloc(T * i64);
    Id x = b.alloc(TH);  // embedding output: the residual stream

    std::vector<Saved> saved(L);
    for (std::uint64_t l = 0; l < L; ++l) {
      Saved& S = saved[l];
      S.x = x;
      S.ln1 = b.alloc(TH), S.ln1_mean = b.alloc(T * fp32), S.ln1_rstd = b.alloc(T * fp32);
      const Id qkv = b.alloc(3 * TH);
      S.q = b.alloc(TH), S.k = b.alloc(TH), S.v = b.alloc(TH);
      b.free(qkv);
      const Id scores = b.alloc(att);
      S.probs = b.alloc(att);
      b.free(scores);
      const Id ctx = b.alloc(TH);
      S.ctx_t = b.alloc(TH);
      b.free(ctx);
      const Id proj = b.alloc(TH);
      S.x1 = b.alloc(TH);
      b.free(proj);
      S.ln2 = b.alloc(TH), S.ln2_mean = b.alloc(T * fp32), S.ln2_rstd = b.alloc(T * fp32);
      S.fc1 = b.alloc(4 * TH), S.gelu = b.alloc(4 * TH);
      const Id fc2 = b.alloc(TH);
      x = b.alloc(TH);
      b.free(fc2);
    }
    const Id lnf = b.alloc(TH), lnf_mean = b.alloc(T * fp32), lnf_rstd = b.alloc(T * fp32);
    const Id logits = b.alloc(T * V * bf16), logits32 = b.alloc(T * V * fp32);
    b.free(logits);
    const Id logp = b.alloc(T * V * fp32), loss = b.alloc(fp32);
    b.free(logits32);

    // Backward.
    const Id g_logits32 = b.alloc(T * V * fp32);
    b.free(logp, loss);
    const Id g_logits = b.alloc(T * V * bf16);
    b.free(g_logits32);
    touch_grad(params[0]);
    const Id g_lnf = b.alloc(TH);
    b.free(g_logits);
    Id g_x = b.alloc(TH);
    touch_grad(params[final_ln]), touch_grad(params[final_ln + 1]);
    b.free(g_lnf, lnf, lnf_mean, lnf_rstd, x);
    for (std::uint64_t l = L; l-- > 0;) {
      const Saved& S = saved[l];
      auto grads = [&](int w) { touch_grad(layer_param(l, w)), touch_grad(layer_param(l, w + 1)); };
      const Id g_gelu = b.alloc(4 * TH);
      grads(kFc2W);
      b.free(S.gelu);
      const Id g_fc1 = b.alloc(4 * TH);
      b.free(g_gelu, S.fc1);
      const Id g_ln2 = b.alloc(TH);
      grads(kFc1W);
      b.free(g_fc1);
      Id g_tmp = b.alloc(TH);
      grads(kLn2W);
      b.free(g_ln2, S.ln2, S.ln2_mean, S.ln2_rstd);
      Id g_next = b.alloc(TH);  // residual: incoming gradient + LayerNorm's
      b.free(g_tmp, g_x, S.x1);
      g_x = g_next;
      const Id g_ctx_t = b.alloc(TH);
      grads(kProjW);
      const Id g_ctx = b.alloc(TH);
      b.free(g_ctx_t, S.ctx_t);
      const Id g_probs = b.alloc(att), g_v = b.alloc(TH);
      b.free(g_ctx, S.v);
      const Id g_scores = b.alloc(att);
      b.free(g_probs, S.probs);
      const Id g_q = b.alloc(TH), g_k = b.alloc(TH);
      b.free(g_scores, S.q, S.k);
      const Id g_qkv = b.alloc(3 * TH);
      b.free(g_q, g_k, g_v);
      const Id g_ln1 = b.alloc(TH);
      grads(kQkvW);
      b.free(g_qkv, S.ln1);
      g_tmp = b.alloc(TH);
      grads(kLn1W);
      b.free(g_ln1, S.ln1_mean, S.ln1_rstd);
      g_next = b.alloc(TH);
      b.free(g_tmp, g_x, S.x);
      g_x = g_next;
    }
    b.free(g_x, ids, labels);  // the embedding's gradient accumulates into params[0].grad

    // Optimizer step, then zero_grad(set_to_none=True).
    for (Param& p : params)
      if (p.exp_avg == kNone) p.exp_avg = b.alloc(p.elements * fp32), p.exp_avg_sq = b.alloc(p.elements * fp32);
    std::vector<Id> grads32, denoms;
    for (const Param& p : params) grads32.push_back(b.alloc(p.elements * fp32));
    for (const Param& p : params) denoms.push_back(b.alloc(p.elements * fp32));
    for (Id id : denoms) b.free(id);
    for (Id id : grads32) b.free(id);
    for (Param& p : params) b.free(p.grad), p.grad = kNone;
  }
  return b.take();
}

}  // namespace uvmpool::bench
