// uvmpool-bench-tiering: kernel-sequence replays of programs that do not fit, modeled on the
// simulated driver (docs/benchmarks.md). Each replay launches the simulator's uvmpool_touch kernel
// over the tensors each operation of the program touches, through tiering as the launch hooks do
// (Tiering::before_launch / after_launch), with the mover driven between launches (Mover::poll, as
// its thread would), and times steady-state steps on the virtual clock:
//
// - training: a GPT-style step at 2.6x the device budget, shaped as GPT-2-medium's at save_on_cpu's
//   memory (weights, gradients and AdamW state fit; most activations do not): forward over layers
//   (weights read, the layer's input read, its activation written), backward in reverse (weights,
//   saved activation, the activation gradient ping-pong, weight gradient written), then AdamW per
//   layer (weights, gradients, state);
// - decoding: batch-1 token steps over weights 1.5x the budget, each layer's weights read once a
//   token, and a small KV cache per layer;
// - batched: the same steps at a large batch, each layer's weights read 32 times (a GEMM reads a
//   weight tile once per tile of the batch): where reading in place loses to moving, so the thrash
//   guard's trial turns the guard off (docs/tiering.md "The thrash guard is measured");
// - layered (not in the default list): decoding with GPT-2-XL's four weights a layer (attention's
//   3:1, the MLP's 4:4), each read by a launch of its own: sizes that carved slots (UVMPOOL_CARVE_MAX)
//   do not divide, so weights share slots and straddle their ends.
//
// Each is run: with everything fitting (the compute time at HBM speed), with today's first-come
// placement (UVMPOOL_TIERING=remote: what spilled is read in place on every touch), and with the
// tiering policy and mover (auto): copies held with the epochs on the launching thread
// (UVMPOOL_TIERING_EPOCHS=launch), copies overlapped, and held with holds placed ahead (the mover's
// own thread's way, driven here between operations). Reported: time / floor, where the floor
// is the larger of the fitting run's time and the bytes that cannot fit crossing PCIe each way at
// copy speed; auto against first-come; for training, a modeled save_on_cpu (activations out after the
// forward and back before the backward, on the compute stream).
//
// Every figure is MODELED: the simulator's cost model with the H200 constants it was calibrated with
// (docs/simulator.md; printed in the header). Activations are kept across steps (a caching
// allocator's steady state), and each tensor is its own allocation.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.h"
#include "config/options.h"
#include "driver/real_driver.h"
#include "pool/pool.h"
#include "sim/sim_control.h"
#include "tiering/tiering.h"

using namespace uvmpool;
using namespace uvmpool::bench;

namespace {

constexpr std::uint64_t kMiB = 1 << 20;
constexpr int kTrialSteps = 12;  // steps the epochs-measured run replays beyond --steps, for its trials
std::uint64_t g_queue_depth_ops = 0;  // --queue-depth
std::size_t g_holds_ahead = 8;             // --holds-ahead
bool g_prepare_at_hold = false;            // --prepare
bool g_commit_beside = true;               // --commit
bool g_mover_thread = true;                // --ordered-mover
bool g_place_at_launch = true;             // --ordered-place

// One operation: the tensors its kernel touches, each with passes and whether it writes.
struct Touch {
  std::size_t tensor;
  std::uint32_t passes;
  bool write;
};
struct Workload {
  std::string name;
  std::vector<std::uint64_t> tensors;         // bytes of each tensor, in allocation order
  std::vector<std::vector<Touch>> step;       // the operations of one step
  std::uint64_t activation_bytes = 0;         // training: what save_on_cpu offloads
  // Tensors allocated (cuMemAllocAsync) right before the operation that first touches them in a step
  // and freed (cuMemFreeAsync) right after the one that last does, as PyTorch with
  // PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync does: the program's frees reach the pool.
  std::vector<bool> transient;
  bool frees(std::size_t tensor) const { return tensor < transient.size() && transient[tensor]; }
  std::uint64_t need() const {
    std::uint64_t n = 0;
    for (std::uint64_t b : tensors) n += b;
    return n;
  }
};

Workload training(std::uint64_t unit, bool freeing = false) {
  // Per layer, as GPT-2-medium's proportions at save_on_cpu's memory: weights 1 unit (bf16),
  // gradients 1, AdamW master weights and moments 4 (fp32), saved activations 22.
  constexpr int kLayers = 24;
  Workload w{freeing ? "freeing" : "training", {}, {}, 0, {}};
  std::vector<std::size_t> weight, grad, state, act;
  const auto add = [&](std::uint64_t bytes) {
    w.tensors.push_back(bytes);
    return w.tensors.size() - 1;
  };
  for (int l = 0; l < kLayers; ++l) {
    weight.push_back(add(unit));
    grad.push_back(add(unit));
    state.push_back(add(4 * unit));
  }
  const std::size_t d0 = add(22 * unit), d1 = add(22 * unit);  // activation gradients, ping-pong
  const std::size_t input = add(22 * unit);
  for (int l = 0; l < kLayers; ++l) {
    act.push_back(add(22 * unit));
    w.activation_bytes += 22 * unit;
  }
  for (int l = 0; l < kLayers; ++l)
    w.step.push_back({{weight[l], 16, false}, {l == 0 ? input : act[l - 1], 4, false}, {act[l], 1, true}});
  for (int l = kLayers - 1; l >= 0; --l) {
    const std::size_t in = l % 2 == 0 ? d0 : d1, out = l % 2 == 0 ? d1 : d0;
    w.step.push_back({{weight[l], 16, false}, {act[l], 4, false}, {in, 2, false}, {out, 1, true}, {grad[l], 1, true}});
  }
  for (int l = 0; l < kLayers; ++l) w.step.push_back({{weight[l], 1, true}, {grad[l], 1, false}, {state[l], 2, true}});
  // Freeing: the activations, their gradients and the weight gradients (zero_grad(set_to_none=True))
  // live from their first write to their last read in the step.
  w.transient.assign(w.tensors.size(), false);
  if (freeing) {
    for (std::size_t t : act) w.transient[t] = true;
    for (std::size_t t : grad) w.transient[t] = true;
    w.transient[d0] = w.transient[d1] = true;
  }
  return w;
}

Workload decoding(std::uint64_t unit, std::uint32_t passes = 1) {
  constexpr int kLayers = 24;
  Workload w{passes == 1 ? "decoding" : "batched", {}, {}, 0, {}};
  std::vector<std::size_t> weight, kv;
  for (int l = 0; l < kLayers; ++l) {
    w.tensors.push_back(16 * unit);  // 1.5x a 256-unit budget over 24 layers
    weight.push_back(w.tensors.size() - 1);
    w.tensors.push_back(unit / 2);
    kv.push_back(w.tensors.size() - 1);
  }
  for (int l = 0; l < kLayers; ++l) w.step.push_back({{weight[l], passes, false}, {kv[l], 1, true}});
  return w;
}

Workload layered(std::uint64_t unit) {
  constexpr int kLayers = 24;
  constexpr std::uint64_t kParts[] = {3, 1, 4, 4};  // twelfths of a layer's 16 units, as GPT-2-XL's
  Workload w{"layered", {}, {}, 0, {}};
  const auto add = [&](std::uint64_t bytes) {
    w.tensors.push_back(bytes);
    return w.tensors.size() - 1;
  };
  for (int l = 0; l < kLayers; ++l) {
    std::vector<std::size_t> weights;
    for (std::uint64_t part : kParts) weights.push_back(add(16 * unit * part / 12 / 65536 * 65536));
    const std::size_t kv = add(unit / 2);
    w.step.push_back({{weights[0], 1, false}, {kv, 1, true}});
    for (std::size_t k = 1; k < weights.size(); ++k) w.step.push_back({{weights[k], 1, false}});
  }
  return w;
}

// Bytes a step brings into the device under Belady on demand: every touch served from device memory
// (all of an operation's tensors on the device together), a missing tensor brought in when its
// operation comes, and room made by sending out the tensor used farthest ahead; moves free and
// instant. A bound for placements that read nothing in place, not for the policy, which may (its
// thrash guard): what any such schedule must carry, against the floor's bytes that cannot fit.
// In steady state: the last of three steps. Each byte sent out comes back, so it is the same each way.
std::uint64_t belady_on_demand(const Workload& w, std::uint64_t budget) {
  constexpr int kSteps = 3;
  std::vector<const std::vector<Touch>*> ops;
  for (int s = 0; s < kSteps; ++s)
    for (const std::vector<Touch>& op : w.step) ops.push_back(&op);
  constexpr std::size_t kNever = ~std::size_t{0};
  const auto next_use = [&](std::size_t tensor, std::size_t after) {
    for (std::size_t j = after + 1; j < ops.size(); ++j)
      for (const Touch& x : *ops[j])
        if (x.tensor == tensor) return j;
    return kNever;
  };
  std::vector<bool> resident(w.tensors.size(), false);
  std::uint64_t used = 0, brought = 0;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const auto in_op = [&](std::size_t t) {
      return std::any_of(ops[i]->begin(), ops[i]->end(), [t](const Touch& x) { return x.tensor == t; });
    };
    for (const Touch& x : *ops[i]) {
      if (resident[x.tensor]) continue;
      const std::uint64_t bytes = w.tensors[x.tensor];
      while (used + bytes > budget) {
        std::size_t victim = w.tensors.size(), farthest = 0;
        for (std::size_t t = 0; t < w.tensors.size(); ++t) {
          if (!resident[t] || in_op(t)) continue;
          const std::size_t n = next_use(t, i);
          if (victim == w.tensors.size() || n > farthest) {
            victim = t;
            farthest = n;
          }
        }
        if (victim == w.tensors.size()) return 0;  // one operation does not fit: no such schedule
        resident[victim] = false;
        used -= w.tensors[victim];
      }
      resident[x.tensor] = true;
      used += bytes;
      if (i >= ops.size() - w.step.size()) brought += bytes;
    }
  }
  return brought;
}

struct Run {
  double step_seconds = 0;
  tiering::MoverStats mover;
  tiering::PolicyStats policy;
  // Over the timed steps, counted when the device carried them (so right under run-ahead, where the
  // program launches up to a step before the device runs it): bytes moved by the mover's copies,
  // promoted and demoted, and the bytes kernels read (host to device) and wrote (device to host) in
  // host memory in place: the simulator's PCIe bytes less the committed moves' (a copy whose move did
  // not commit is counted in place: it crossed the link and moved nothing).
  std::uint64_t promoted = 0, demoted = 0;
  // Of those, the bytes of live allocations (the pool's moved_live_*): a carved slot moves whole, its
  // free space and what was freed in it with it.
  std::uint64_t live_promoted = 0, live_demoted = 0;
  // Of all moved, freed memory's whose copy was left out (DeviceStats::moved_uncopied_bytes).
  std::uint64_t uncopied = 0;
  // Moves the pool refused at their prepare over the timed steps (DeviceStats::moves_failed): each is a
  // placement tried for nothing, most of them promotions tried again while demotions stand.
  std::uint64_t pool_refusals = 0;
  // Stream-ordered allocations over the timed steps that got their point's last place back, and that
  // did not (DeviceStats::repeat_places_*; src/pool/repeat_places.h).
  std::uint64_t places_kept = 0, places_missed = 0;
  std::array<std::uint64_t, 2> in_place{};  // UVMPOOL_SIM_HOST_TO_DEVICE, UVMPOOL_SIM_DEVICE_TO_HOST
  // The remaps' driver calls over the timed steps (kRemapCalls; the simulator's counts): what much of a
  // hold is made of, each mapping a move changes costing about 42 us (H200: unmap, map, access).
  std::array<unsigned long long, 3> remap_calls{};
  // The mover's time at each step of its epochs over the timed steps, on the simulator's clock of the
  // thread that ran them (MoverConfig::step_clock): modeled microseconds, indexed by MoverStep.
  std::array<std::uint64_t, tiering::kMoverSteps> mover_us{};
};

constexpr const char* kRemapCalls[] = {"cuMemUnmap", "cuMemMap", "cuMemSetAccess"};

std::array<unsigned long long, 3> remap_calls_now() {
  using CallCount = unsigned long long (*)(const char*);
  static const auto call_count = reinterpret_cast<CallCount>(driver::real_symbol("uvmpool_sim_call_count"));
  std::array<unsigned long long, 3> n{};
  for (std::size_t i = 0; i < n.size() && call_count != nullptr; ++i) n[i] = call_count(kRemapCalls[i]);
  return n;
}

// The PCIe bytes the simulated device's link carried so far, each way (sim_control.h).
std::array<std::uint64_t, 2> link_bytes_now() {
  using LinkBytes = unsigned long long (*)(int, int);
  static const auto link_bytes = reinterpret_cast<LinkBytes>(driver::real_symbol("uvmpool_sim_link_bytes"));
  std::array<std::uint64_t, 2> n{};
  for (int d = 0; d < 2 && link_bytes != nullptr; ++d) n[static_cast<std::size_t>(d)] = link_bytes(0, d);
  return n;
}

// One replay: `budget` bytes of device memory, tiering `mode` (auto: with the policy), copies
// overlapped or held. Times the last `timed` of `steps` steps.
Run replay(const Workload& w, std::uint64_t budget, tiering::Mode mode, bool overlap, int steps, int timed,
           const tiering::PolicyConfig& policy, std::uint64_t batch, std::size_t holds_ahead = 1) {
  pool::PoolConfig config = pool::PoolConfig::from_options(config::options());
  config.device_limit = {budget, 0, false};
  config.headroom = 0;
  config.spill = true;
  config.host_limit = {w.need() * 2 + (256 * kMiB), 0, false};
  auto pool = std::make_unique<pool::Pool>(drv(), config);
  CUmodule module = nullptr;
  CUfunction touch = nullptr;
  check(drv().cuModuleLoadData(&module, UVMPOOL_SIM_MODULE_IMAGE), "cuModuleLoadData");
  check(drv().cuModuleGetFunction(&touch, module, "uvmpool_touch"), "cuModuleGetFunction");
  CUstream stream = nullptr;
  check(drv().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  CUcontext context = nullptr;
  check(drv().cuCtxGetCurrent(&context), "cuCtxGetCurrent");
  tiering::StreamRegistry streams;
  streams.created(stream, context, true);
  tiering::MoverConfig mover;
  mover.thread = false;
  mover.overlap = overlap;
  mover.max_batch_bytes = batch;
  mover.holds_ahead = holds_ahead;
  mover.prepare_at_hold = g_prepare_at_hold;
  mover.commit_beside_copies = g_commit_beside;
  mover.step_clock = [] {
    using Now = std::uint64_t (*)();
    static const auto now = reinterpret_cast<Now>(driver::real_symbol("uvmpool_sim_now_ns"));
    return static_cast<std::int64_t>(now());
  };
  // One hold at a time with held copies: the epochs run on the launching thread, as
  // UVMPOOL_TIERING_EPOCHS=launch runs them (Tiering::after_launch); overlapped copies are polled below.
  mover.on_launch = !overlap && holds_ahead <= 1;
  mover.launches_per_epoch = std::max<std::size_t>(policy.lookahead / 8, 1);  // as Tiering configures it
  if (overlap && g_place_at_launch) {  // as UVMPOOL_TIERING_EPOCHS=launch places ordered epochs
    mover.on_launch = true;
    mover.launches_per_epoch = 1;
  }
  auto t = std::make_unique<tiering::Tiering>(drv(), *pool, mode, streams, mover, policy);

  std::vector<CUdeviceptr> tensors(w.tensors.size(), 0);
  for (std::size_t i = 0; i < w.tensors.size(); ++i)
    if (!w.frees(i)) check(pool->allocate(&tensors[i], w.tensors[i]), "allocate");
  // A freed tensor's operations in the step: allocated before the first, freed after the last.
  std::vector<std::size_t> first_op(w.tensors.size(), w.step.size()), last_op(w.tensors.size(), 0);
  for (std::size_t k = 0; k < w.step.size(); ++k)
    for (const Touch& x : w.step[k]) {
      first_op[x.tensor] = std::min(first_op[x.tensor], k);
      last_op[x.tensor] = k;
    }
  // Overlapped copies (ordered epochs): a thread of the mover's, as in the product, so that an epoch
  // commits when its copies end rather than when the program next looks (the program's clock runs far
  // behind the device's in virtual time while it queues a step). It places what is queued, then waits
  // for the oldest epoch's copies (the simulator moves its clock to their end, where a polling thread's
  // clock would crawl at 440 ns a query), and commits.
  std::atomic<bool> stop_mover{false};
  std::thread mover_thread;
  if (mode == tiering::Mode::Auto && overlap && g_mover_thread) {
    mover_thread = std::thread([&] {
      drv().cuCtxSetCurrent(context);
      tiering::Mover& m = t->mover();
      while (!stop_mover.load(std::memory_order_relaxed)) {
        // Placed while each placement adds an epoch (requests waiting for the room standing demotions
        // make go back to the queue, and an epoch may be put off).
        for (std::size_t before = m.standing_holds(); m.queued() && m.place_epoch() == CUDA_SUCCESS &&
                                                      m.standing_holds() > before;
             before = m.standing_holds()) {
        }
        if (m.standing_holds() > 0) {
          m.complete_placed(true);
        } else {
          std::this_thread::sleep_for(std::chrono::microseconds(20));
        }
      }
    });
  }
  Run run;
  std::uint64_t queued = 0;
  double started = 0;
  std::array<std::uint64_t, 2> link_before{};
  tiering::MoverStats moved_before;
  pool::DeviceStats pool_before;
  for (int s = 0; s < steps; ++s) {
    if (s == steps - timed) {
      check(drv().cuStreamSynchronize(stream), "cuStreamSynchronize");
      started = modeled_now();
      link_before = link_bytes_now();
      moved_before = t->mover().stats();
      pool_before = pool->stats(0);
      run.remap_calls = remap_calls_now();
    }
    for (std::size_t k = 0; k < w.step.size(); ++k) {
      const std::vector<Touch>& op = w.step[k];
      for (std::size_t i = 0; i < w.tensors.size(); ++i)
        if (w.frees(i) && first_op[i] == k) check(pool->allocate_async(&tensors[i], w.tensors[i], stream), "allocate_async");
      for (const Touch& x : op) {
        CUdeviceptr p = tensors[x.tensor];
        std::uint64_t bytes = w.tensors[x.tensor];
        std::uint32_t passes = x.passes, write = x.write ? 1 : 0;
        void* params[] = {&p, &bytes, &passes, &write};
        tiering::LaunchSeen seen;
        t->before_launch(touch, stream, params, nullptr, &seen);
        {
          // As the launch hook does (src/hooks/shown.h): ordered behind the moves it touches and queued
          // inside the submission gate, which an ordered epoch closes while it publishes and fences.
          const tiering::HostWaitGate::Pass queued(streams.submissions());
          t->order_behind_moves(seen, stream);
          check(drv().cuLaunchKernel(touch, 1, 1, 1, 128, 1, 1, 0, stream, params, nullptr), "cuLaunchKernel");
        }
        t->after_launch(seen, stream);
      }
      for (std::size_t i = 0; i < w.tensors.size(); ++i)
        if (w.frees(i) && last_op[i] == k) {
          // A free of memory a standing hold moves waits for its commit (pool.h), which the mover's
          // thread makes; here this thread is the mover's too, so it ends the holds first.
          if (mode == tiering::Mode::Auto && !overlap)
            while (t->mover().standing_holds() > 0) t->mover().complete_placed(true);
          CUresult r = CUDA_SUCCESS;
          pool->deallocate_async(tensors[i], stream, &r);
          check(r, "deallocate_async");
          tensors[i] = 0;
        }
      // What the policy asked for after this operation, as the mover's thread would take it up.
      if (mode == tiering::Mode::Auto && holds_ahead > 1 && !overlap && !t->mover().on_launch()) {
        // As the mover's thread does (Mover::pipeline_step): end the holds the work reached, place one more.
        // Not while the launching thread has the epochs (UVMPOOL_TIERING_EPOCHS=measure chose it):
        // after_launch runs them then.
        tiering::Mover& m = t->mover();
        while (m.standing_holds() > 0 && m.complete_placed(false) == CUDA_SUCCESS) {
        }
        m.place_epoch();
      } else if (mode == tiering::Mode::Auto && overlap && !mover_thread.joinable()) {
        t->mover().poll();
      }
      if (g_queue_depth_ops != 0 && ++queued % g_queue_depth_ops == 0) {
        while (t->mover().standing_holds() > 0) t->mover().complete_placed(true);
        check(drv().cuStreamSynchronize(stream), "sync");
      }
    }
    // The loss, read each step. A program's synchronize waits at the host-wait gate while holds stand,
    // and the mover's thread ends them; here this thread is the mover's too.
    while (t->mover().standing_holds() > 0) t->mover().complete_placed(true);
    check(drv().cuStreamSynchronize(stream), "cuStreamSynchronize");
  }
  run.step_seconds = (modeled_now() - started) / timed;
  stop_mover = true;
  if (mover_thread.joinable()) mover_thread.join();
  run.mover = t->mover().stats();
  run.policy = t->policy_stats();
  for (std::size_t i = 0; i < run.mover_us.size(); ++i) run.mover_us[i] = run.mover.step_us[i] - moved_before.step_us[i];
  run.promoted = run.mover.promoted_bytes - moved_before.promoted_bytes;
  run.demoted = run.mover.demoted_bytes - moved_before.demoted_bytes;
  const pool::DeviceStats pool_after = pool->stats(0);
  run.live_promoted = pool_after.moved_live_to_device_bytes - pool_before.moved_live_to_device_bytes;
  run.live_demoted = pool_after.moved_live_to_host_bytes - pool_before.moved_live_to_host_bytes;
  run.uncopied = pool_after.moved_uncopied_bytes - pool_before.moved_uncopied_bytes;
  run.pool_refusals = pool_after.moves_failed - pool_before.moves_failed;
  run.places_kept = pool_after.repeat_places_kept - pool_before.repeat_places_kept;
  run.places_missed = pool_after.repeat_places_missed - pool_before.repeat_places_missed;
  const std::array<std::uint64_t, 2> link = link_bytes_now();
  const std::array<std::uint64_t, 2> copied{run.promoted, run.demoted};
  for (std::size_t d = 0; d < 2; ++d) {
    const std::uint64_t carried = link[d] - link_before[d];
    run.in_place[d] = carried > copied[d] ? carried - copied[d] : 0;
  }
  const std::array<unsigned long long, 3> calls = remap_calls_now();
  for (std::size_t i = 0; i < calls.size(); ++i) run.remap_calls[i] = calls[i] - run.remap_calls[i];
  t->mover().run_until_idle();
  t.reset();
  for (CUdeviceptr p : tensors) {
    if (p == 0) continue;  // freed in the step
    CUresult r = CUDA_SUCCESS;
    pool->deallocate(p, &r);
  }
  streams.destroying(stream);
  drv().cuStreamDestroy_v2(stream);
  drv().cuModuleUnload(module);
  return run;
}

unsigned long long violations() {
  using Fn = unsigned long long (*)();
  auto f = reinterpret_cast<Fn>(driver::real_symbol("uvmpool_sim_violations"));
  return f != nullptr ? f() : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options("uvmpool-bench-tiering", "Kernel-sequence replays that do not fit: tiering against first-come placement (modeled).");
  options.add("unit", "2M", "the replay's size unit: the training budget is 256 units, decoding weights 384");
  options.add("steps", "16", "steps replayed; the last --timed are timed (the thrash guard's trial takes about 10 after the period is learned)");
  options.add("timed", "3", "steps timed");
  options.add("lookahead", "32", "tiering policy: launches looked ahead");
  options.add("in-flight", "256M", "tiering policy: promotion bytes in flight");
  options.add("batch", "128M", "mover: bytes per epoch");
  options.add("unlearned-after", std::to_string(tiering::kUnlearnedStepLaunches),
              "tiering: launches with no period held before its warning (src/tiering/unlearned_step.h)");
  options.add("workloads", "training,decoding,batched", "which replays (also: layered, freeing)");
  options.add("holds-ahead", "8", "mover: holds standing at once in the holds-ahead row");
  options.add("prepare", "placement", "mover with holds ahead: make target pieces at placement or at the hold");
  options.add("commit", "beside", "held copies: commit each move beside the later copies, or after them all "
                                  "(UVMPOOL_TIERING_COMMIT)");
  options.add("runs", "all", "which tiering runs besides first-come: all, or some of held,overlap,ahead,guard,measure");
  options.add("queue-depth", "0", "operations the program runs ahead of the GPU before it waits (0: a whole step)");
  options.add("ordered-mover", "thread",
              "overlap run: the mover's epochs on a thread of their own that waits for each epoch's copies (thread), or polled by the program between operations (poll)");
  options.add("ordered-place", "launch",
              "overlap run: ordered epochs placed by the launching thread as the policy asks (launch, as UVMPOOL_TIERING_EPOCHS=launch), or only by the mover (thread)");
  options.parse(&argc, argv);
  const Device dev = open_device();
  print_header("uvmpool-bench-tiering", dev);
  if (!dev.simulated) {
    std::printf("This benchmark replays the simulator's kernels: it runs on the simulated driver only.\n");
    return 0;
  }
  const config::Options& o = config::options();
  std::printf("MODELED on the simulator (docs/simulator.md): HBM read/write %.0f/%.0f GB/s, copy engine %.1f GB/s, "
              "kernels reading/writing host memory in place %.1f/%.1f GB/s, launch %.1f us (H200 constants)\n",
              o.sim_hbm_read_gbps, o.sim_hbm_write_gbps, o.sim_copy_gbps, o.sim_host_read_gbps, o.sim_host_write_gbps,
              static_cast<double>(o.sim_launch_ns.ns) / 1000.0);
  const std::uint64_t unit = options.size("unit");
  const int steps = static_cast<int>(options.integer("steps"));
  const int timed = static_cast<int>(std::min<std::int64_t>(options.integer("timed"), steps));
  tiering::PolicyConfig policy;
  policy.lookahead = static_cast<std::size_t>(options.integer("lookahead"));
  policy.in_flight_bytes = options.size("in-flight");
  policy.unlearned_after = static_cast<std::uint64_t>(options.integer("unlearned-after"));
  const std::uint64_t batch = options.size("batch");
  g_queue_depth_ops = static_cast<std::uint64_t>(options.integer("queue-depth"));
  g_prepare_at_hold = options.text("prepare") == "hold";
  g_commit_beside = options.text("commit") != "after";
  g_mover_thread = options.text("ordered-mover") != "poll";
  g_place_at_launch = options.text("ordered-place") != "thread";
  g_holds_ahead = static_cast<std::size_t>(std::max<std::int64_t>(options.integer("holds-ahead"), 2));
  const double copy_rate = o.sim_copy_gbps * 1e9;

  std::vector<Workload> workloads;
  const std::string which = options.text("workloads");
  const std::string runs = options.text("runs");
  if (which.find("training") != std::string::npos) workloads.push_back(training(unit));
  if (which.find("freeing") != std::string::npos) workloads.push_back(training(unit, true));
  if (which.find("decoding") != std::string::npos) workloads.push_back(decoding(unit));
  if (which.find("batched") != std::string::npos) workloads.push_back(decoding(unit, 32));
  if (which.find("layered") != std::string::npos) workloads.push_back(layered(unit));
  bool ok = true;
  for (const Workload& w : workloads) {
    const std::uint64_t budget = 256 * unit;
    const Run fits = replay(w, w.need() + 64 * unit, tiering::Mode::Remote, false, steps, timed, policy, batch);
    const Run first_come = replay(w, budget, tiering::Mode::Remote, false, steps, timed, policy, batch);
    const auto wanted = [&](const char* run) { return runs == "all" || runs.find(run) != std::string::npos; };
    const Run held = wanted("held") ? replay(w, budget, tiering::Mode::Auto, false, steps, timed, policy, batch) : Run{};
    const Run overlap =
        wanted("overlap") ? replay(w, budget, tiering::Mode::Auto, true, steps, timed, policy, batch, g_holds_ahead) : Run{};
    const Run ahead =
        wanted("ahead") ? replay(w, budget, tiering::Mode::Auto, false, steps, timed, policy, batch, g_holds_ahead) : Run{};
    tiering::PolicyConfig guard_on = policy;  // the thrash guard as it was before its trial
    guard_on.guard.setting = tiering::TrialSetting::First;
    const Run kept =
        wanted("guard") ? replay(w, budget, tiering::Mode::Auto, false, steps, timed, guard_on, batch, g_holds_ahead) : Run{};
    // UVMPOOL_TIERING_EPOCHS=measure, the default: holds ahead until the policy's trial has timed the
    // period both ways (after the thrash guard's), then the faster. Steps enough for both trials
    // before the timed ones (each takes about five periods once moves come).
    tiering::PolicyConfig measured_policy = policy;
    measured_policy.epochs.setting = tiering::TrialSetting::Measure;
    const Run measured = wanted("measure") ? replay(w, budget, tiering::Mode::Auto, false, steps + kTrialSteps, timed,
                                                    measured_policy, batch, g_holds_ahead)
                                           : Run{};
    const double pcie = static_cast<double>(w.need() - budget) / copy_rate;  // each way, in parallel
    const double floor = std::max(fits.step_seconds, pcie);
    std::printf("\n%s: %s needed, device budget %s (%.2fx); floor %s a step (fits: %s, PCIe each way: %s)\n",
                w.name.c_str(), format_size(w.need()).c_str(), format_size(budget).c_str(),
                static_cast<double>(w.need()) / static_cast<double>(budget), format_seconds(floor).c_str(),
                format_seconds(fits.step_seconds).c_str(), format_seconds(pcie).c_str());
    std::printf("  %-30s %12s %10s %12s %14s %14s %22s\n", "run", "per step", "/ floor", "vs first-come", "promoted/step",
                "demoted/step", "in place/step, in/out");
    const auto row = [&](const char* name, const Run& r) {
      if (r.step_seconds == 0) return;  // not run (--runs)
      const auto per_step = [&](std::uint64_t bytes) {
        return format_size(static_cast<std::uint64_t>(static_cast<double>(bytes) / timed));
      };
      const std::string in_place = per_step(r.in_place[0]) + " / " + per_step(r.in_place[1]);
      std::printf("  %-30s %12s %10s %12s %14s %14s %22s\n", name, format_seconds(r.step_seconds).c_str(),
                  fixed(r.step_seconds / floor, 2).c_str(), fixed(first_come.step_seconds / r.step_seconds, 2).c_str(),
                  per_step(r.promoted).c_str(), per_step(r.demoted).c_str(), in_place.c_str());
    };
    row("first-come (tiering remote)", first_come);
    row("tiering auto, epochs on launch", held);
    row("tiering auto, overlap (ordered)", overlap);
    const std::string ahead_name = "tiering auto, " + std::to_string(g_holds_ahead) + " holds ahead";
    row(ahead_name.c_str(), ahead);
    row((ahead_name + ", guard on").c_str(), kept);
    row("tiering auto, epochs measured", measured);
    if (w.activation_bytes != 0) {
      const double save_on_cpu = fits.step_seconds + 2.0 * static_cast<double>(w.activation_bytes) / copy_rate;
      std::printf("  %-30s %12s %10s %12s   (modeled: the fitting step + activations out and back on its stream)\n",
                  "save_on_cpu", format_seconds(save_on_cpu).c_str(), fixed(save_on_cpu / floor, 2).c_str(),
                  fixed(first_come.step_seconds / save_on_cpu, 2).c_str());
    }
    if (held.step_seconds != 0)
      std::printf("  policy (epochs on launch): learned %llu dropped %llu retaken %llu, period %llu launches, %llu promotions, %llu demotions, %llu kept in place; "
                "mover: %llu epochs, %llu moves, %llu failed\n",
                static_cast<unsigned long long>(held.policy.periods_learned), static_cast<unsigned long long>(held.policy.periods_dropped),
                static_cast<unsigned long long>(held.policy.periods_retaken),
                static_cast<unsigned long long>(held.policy.period), static_cast<unsigned long long>(held.policy.promotions),
                static_cast<unsigned long long>(held.policy.demotions), static_cast<unsigned long long>(held.policy.kept_in_place),
                static_cast<unsigned long long>(held.mover.epochs), static_cast<unsigned long long>(held.mover.moves),
                static_cast<unsigned long long>(held.mover.moves_failed));
    const auto policy_line = [&](const char* name, const Run& r) {
      if (r.step_seconds == 0) return;  // not run (--runs)
      std::printf("  policy (%s): period %llu launches, %llu promotions, %llu demotions, %llu kept in place, "
                "thrash guard %s after %llu trials (period on %s, off %s); "
                "put off %llu times for the in-flight budget, %llu for room; "
                "mover: %llu epochs, %llu moves, %llu failed, %llu requested, %llu refused\n", name,
                static_cast<unsigned long long>(r.policy.period), static_cast<unsigned long long>(r.policy.promotions),
                static_cast<unsigned long long>(r.policy.demotions), static_cast<unsigned long long>(r.policy.kept_in_place),
                r.policy.guard.second != 0 ? "off" : "on", static_cast<unsigned long long>(r.policy.guard.trials),
                format_seconds(static_cast<double>(r.policy.guard.first_ns) * 1e-9).c_str(),
                format_seconds(static_cast<double>(r.policy.guard.second_ns) * 1e-9).c_str(),
                static_cast<unsigned long long>(r.policy.waited_in_flight),
                static_cast<unsigned long long>(r.policy.waited_room),
                static_cast<unsigned long long>(r.mover.epochs), static_cast<unsigned long long>(r.mover.moves),
                static_cast<unsigned long long>(r.mover.moves_failed), static_cast<unsigned long long>(r.mover.requested),
                static_cast<unsigned long long>(r.mover.refused));
    };
    policy_line("overlap (ordered)", overlap);
    policy_line(ahead_name.c_str(), ahead);
    if (measured.step_seconds != 0) {
      const tiering::PeriodTrialStats& e = measured.policy.epochs;
      std::printf("  epochs measured: %son %s after %llu trials (period on the mover's thread %s, on the launching thread %s; "
                  "thrash guard %s after %llu, its last trial on %s, off %s)\n", e.timing != 0 ? "still timing, now " : "",
                  e.second != 0 ? "the launching thread" : "the mover's thread", static_cast<unsigned long long>(e.trials),
                  format_seconds(static_cast<double>(e.first_ns) * 1e-9).c_str(),
                  format_seconds(static_cast<double>(e.second_ns) * 1e-9).c_str(),
                  measured.policy.guard.second != 0 ? "off" : "on", static_cast<unsigned long long>(measured.policy.guard.trials),
                  format_seconds(static_cast<double>(measured.policy.guard.first_ns) * 1e-9).c_str(),
                  format_seconds(static_cast<double>(measured.policy.guard.second_ns) * 1e-9).c_str());
    }
    const auto calls = [&](const char* name, const Run& r) {
      if (r.step_seconds == 0) return;  // not run (--runs)
      std::printf("  remaps a step (%s):", name);
      for (std::size_t i = 0; i < r.remap_calls.size(); ++i)
        std::printf(" %s %.1f", kRemapCalls[i], static_cast<double>(r.remap_calls[i]) / timed);
      std::printf("\n");
    };
    const auto mover_time = [&](const char* name, const Run& r) {
      if (r.step_seconds == 0) return;  // not run (--runs)
      std::printf("  mover a step, modeled (%s):", name);
      for (const tiering::MoverStep step : {tiering::MoverStep::Preparing, tiering::MoverStep::Draining,
                                            tiering::MoverStep::Copying, tiering::MoverStep::Committing})
        std::printf(" %s %s", tiering::step_key(step),
                    format_seconds(static_cast<double>(r.mover_us[static_cast<std::size_t>(step)]) * 1e-6 / timed).c_str());
      std::printf("\n");
    };
    // What share of the bytes moved were live allocations' (carved slots move whole: their free
    // space and what was freed in them cross the link and are remapped for nothing).
    const auto live_share = [&](const char* name, const Run& r) {
      if (r.step_seconds == 0 || r.promoted + r.demoted == 0) return;  // not run, or nothing moved
      const auto share = [](std::uint64_t live, std::uint64_t all) {
        return all == 0 ? std::string("-") : fixed(100.0 * static_cast<double>(live) / static_cast<double>(all), 1) + "%";
      };
      std::printf("  moved bytes that were live allocations' (%s): promoted %s, demoted %s; freed, not copied %s; moves the pool refused a step: %.1f\n",
                  name, share(r.live_promoted, r.promoted).c_str(), share(r.live_demoted, r.demoted).c_str(),
                  share(r.uncopied, r.promoted + r.demoted).c_str(), static_cast<double>(r.pool_refusals) / timed);
      if (r.places_kept + r.places_missed != 0)
        std::printf("  stream-ordered allocations a step (%s): %.1f at their point's last place, %.1f placed elsewhere\n", name,
                    static_cast<double>(r.places_kept) / timed, static_cast<double>(r.places_missed) / timed);
    };
    live_share("epochs on launch", held);
    live_share("epochs measured", measured);
    mover_time("epochs on launch", held);
    mover_time("epochs measured", measured);
    calls("epochs on launch", held);
    calls("overlap (ordered)", overlap);
    calls(ahead_name.c_str(), ahead);
    // Belady's bound carries every tensor's contents between its uses: not a bound for a replay whose
    // frees end some.
    const bool frees_some = std::find(w.transient.begin(), w.transient.end(), true) != w.transient.end();
    if (const std::uint64_t belady = frees_some ? 0 : belady_on_demand(w, budget); belady != 0) {
      const double seconds = static_cast<double>(belady) / copy_rate;
      std::printf("  Belady on demand (every touch from device memory, moves free): %s each way a step, %s at copy "
                  "speed = %s of the floor\n",
                  format_size(belady).c_str(), format_seconds(seconds).c_str(), fixed(seconds / floor, 2).c_str());
      // Those bytes moved by remapping, as the mover does: each demoted byte's host mapping is given
      // access and each promoted one's unmapped, both per byte, one call after another in the driver
      // (H200: threads do not overlap them). Per-mapping costs and waits beside copies left out, so a
      // lower bound on the remaps alone, beside the copy-speed floor.
      const double remap_per_byte = (static_cast<double>(o.sim_set_access_host_ns_per_gib.ns) +
                                     static_cast<double>(o.sim_unmap_host_ns_per_gib.ns)) * 1e-9 / static_cast<double>(1ull << 30);
      const double remaps = static_cast<double>(belady) * remap_per_byte;
      std::printf("  those bytes remapped through host memory (access %s + unmap %s a GiB, per byte only): %s a step = "
                  "%s of the floor\n",
                  format_seconds(static_cast<double>(o.sim_set_access_host_ns_per_gib.ns) * 1e-9).c_str(),
                  format_seconds(static_cast<double>(o.sim_unmap_host_ns_per_gib.ns) * 1e-9).c_str(),
                  format_seconds(remaps).c_str(), fixed(remaps / floor, 2).c_str());
    }
    std::printf("  target: auto at most 1.25 of the floor\n");
  }
  const unsigned long long v = violations();
  std::printf("\nrace detector violations: %llu\n", v);
  if (v != 0) ok = false;
  return ok ? 0 : 1;
}
