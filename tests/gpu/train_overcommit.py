"""Trains a small GPT-like transformer (plain torch, random weights from a fixed seed, fixed data) for
20 steps of AdamW, deterministically, and prints the losses and the peak memory.

  python3 train_overcommit.py [--batch B] [--seq T] ...     one run (a child of --compare)
  python3 train_overcommit.py --compare [--lib libuvmpool.so]

--compare runs three children: (a) without uvmpool, the reference, which measures the peak need
(torch.cuda.max_memory_reserved); (b) under LD_PRELOAD=libuvmpool.so with UVMPOOL_DEVICE_LIMIT =
need / 2.5, so that the program needs 2-3x the device it is given and spills the rest to pinned host
memory; (c) the same with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (PyTorch's own cuMemCreate).
The losses must be bit-for-bit equal. Last line: UVMPOOL_TRAIN_OVERCOMMIT ok|FAIL ...
The library comes from --lib, else $UVMPOOL_LIB, else build/lib/libuvmpool.so beside this repository.
The default size (batch 20 x 512 tokens, 8 layers of width 768, vocabulary 8192, fp32) needs about
10-12 GiB at its peak; --batch scales it.
"""
import argparse, ctypes, json, math, os, subprocess, sys, time

# Before torch is imported: cuBLAS reads it when it makes its handle.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

FIELDS = ["struct_size", "allocations", "frees", "bytes_allocated", "resolved_via_dlsym",
          "resolved_via_getproc", "calls_via_export", "pool_allocations", "driver_allocations",
          "pool_held_bytes", "pool_live_bytes", "pool_peak_held_bytes", "pool_peak_live_bytes",
          "pool_live_host_bytes", "pool_host_held_bytes", "pool_peak_host_held_bytes",
          "pool_spilled_allocations", "pool_out_of_memory"]
MIB = 1 << 20
RESULT = "UVMPOOL_TRAIN_RESULT "


class Stats(ctypes.Structure):
    _fields_ = [(f, ctypes.c_ulonglong) for f in FIELDS]


def uvmpool_stats():
    """uvmpool's public stats, found with dlsym in the process (None when uvmpool is not loaded)."""
    try:
        get = ctypes.CDLL(None).uvmpool_get_stats
    except AttributeError:
        try:
            get = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD).uvmpool_get_stats  # drop-in
        except (OSError, AttributeError):
            return None
    s = Stats(struct_size=ctypes.sizeof(Stats))
    if get(ctypes.byref(s)) != 0:
        return None
    return {f: getattr(s, f) for f in FIELDS[1:]}


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--compare", action="store_true", help="run the three children and compare them")
    p.add_argument("--lib", default=os.environ.get("UVMPOOL_LIB"), help="libuvmpool.so for --compare")
    p.add_argument("--ratio", type=float, default=2.5, help="need / device limit for --compare (default 2.5)")
    p.add_argument("--timeout", type=int, default=240, help="seconds each child may take")
    p.add_argument("--label", default="run", help="name printed with the result")
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu (to try the script without a GPU)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=20)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--width", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--vocab", type=int, default=8192)
    return p.parse_args(argv)


def model_args(args):
    return ["--device", args.device, "--steps", str(args.steps), "--batch", str(args.batch), "--seq", str(args.seq),
            "--layers", str(args.layers), "--width", str(args.width), "--heads", str(args.heads),
            "--vocab", str(args.vocab)]


# ---------------------------------------------------------------------------------------------- child
def train(args):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"

    class Block(nn.Module):
        def __init__(self, d, h):
            super().__init__()
            self.h = h
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x, causal):
            B, T, D = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(D, dim=2)
            q, k, v = (t.view(B, T, self.h, D // self.h).transpose(1, 2) for t in (q, k, v))
            # Attention written out (no fused kernel): every op has a deterministic CUDA implementation.
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D // self.h))
            att = att.masked_fill(~causal[:T, :T], float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).reshape(B, T, D)
            x = x + self.proj(y)
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self, vocab, seq, d, layers, h):
            super().__init__()
            # Token embedding as a matrix applied to one-hot rows: its backward is a matmul, so no
            # scatter-add (whose determinism depends on the PyTorch version) is involved.
            self.wte = nn.Parameter(torch.randn(vocab, d) * 0.02)
            self.wpe = nn.Parameter(torch.randn(seq, d) * 0.01)
            self.blocks = nn.ModuleList(Block(d, h) for _ in range(layers))
            self.ln_f = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)
            self.register_buffer("causal", torch.ones(seq, seq, dtype=torch.bool).tril(), persistent=False)
            self.register_buffer("vocab_ids", torch.arange(vocab), persistent=False)

        def forward(self, tokens, targets):
            x = (tokens.unsqueeze(-1) == self.vocab_ids).to(self.wte.dtype) @ self.wte + self.wpe[: tokens.shape[1]]
            for block in self.blocks:
                x = block(x, self.causal)
            logp = self.head(self.ln_f(x)).log_softmax(dim=-1)
            # Cross entropy through a one-hot mask (elementwise and reductions only).
            return -(logp * (targets.unsqueeze(-1) == self.vocab_ids)).sum(dim=-1).mean()

    torch.manual_seed(1234)
    model = GPT(args.vocab, args.seq, args.width, args.layers, args.heads)  # made on the CPU: same weights everywhere
    gen = torch.Generator().manual_seed(5678)
    data = torch.randint(0, args.vocab, (args.steps, args.batch, args.seq + 1), generator=gen)
    model = model.to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, foreach=True)
    params = sum(p.numel() for p in model.parameters())

    def sync():
        if cuda:
            torch.cuda.synchronize()

    losses, step_s, samples = [], [], []
    for step in range(args.steps):
        batch = data[step].to(dev)
        sync()
        t0 = time.perf_counter()
        loss = model(batch[:, :-1], batch[:, 1:])
        loss.backward()
        s = uvmpool_stats()  # gradients and every cached block live: the most memory this step holds
        if s is not None:
            samples.append(s)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())  # waits for the step
        sync()
        step_s.append(time.perf_counter() - t0)
        print(f"step {step + 1:2d} loss {losses[-1]!r} ({step_s[-1] * 1e3:.1f} ms)", flush=True)

    end = uvmpool_stats()
    at_peak = max(samples, key=lambda s: s["pool_live_bytes"]) if samples else None
    result = {
        "label": args.label, "params": params, "losses": [repr(l) for l in losses],
        "step_ms_first": step_s[0] * 1e3,
        "step_ms": sum(step_s[1:]) / max(1, len(step_s) - 1) * 1e3,
        "max_allocated_mib": torch.cuda.max_memory_allocated() / MIB if cuda else 0.0,
        "max_reserved_mib": torch.cuda.max_memory_reserved() / MIB if cuda else 0.0,
        "mem_total_mib": torch.cuda.mem_get_info()[1] / MIB if cuda else 0.0,
        "allocator": torch.cuda.get_allocator_backend() if cuda else "cpu",
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "uvmpool": end is not None, "stats_end": end, "stats_at_peak": at_peak,
    }
    print(f"{args.label}: {params / 1e6:.1f}M parameters, peak {result['max_allocated_mib']:.0f} MiB allocated, "
          f"{result['max_reserved_mib']:.0f} MiB reserved, cuMemGetInfo total {result['mem_total_mib']:.0f} MiB, "
          f"step {result['step_ms']:.1f} ms (first {result['step_ms_first']:.1f} ms)", flush=True)
    if at_peak is not None:
        print(f"{args.label}: uvmpool at the peak: {(at_peak['pool_live_bytes'] - at_peak['pool_live_host_bytes']) / MIB:.0f} MiB "
              f"live on the device, {at_peak['pool_live_host_bytes'] / MIB:.0f} MiB in host memory, "
              f"{at_peak['pool_spilled_allocations']} allocations spilled, {at_peak['pool_host_held_bytes'] / MIB:.0f} MiB "
              f"of pinned host memory held, {at_peak['pool_out_of_memory']} allocations refused", flush=True)
    print(RESULT + json.dumps(result), flush=True)


# --------------------------------------------------------------------------------------------- driver
def run_child(args, label, env):
    cmd = [sys.executable, os.path.abspath(__file__), "--label", label] + model_args(args)
    print(f"== {label}: {' '.join(f'{k}={env[k]}' for k in ('LD_PRELOAD', 'UVMPOOL_DEVICE_LIMIT', 'PYTORCH_CUDA_ALLOC_CONF') if k in env)}",
          flush=True)
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=args.timeout)
        out, code = p.stdout, p.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        code = f"timeout after {args.timeout} s"
    wall = time.perf_counter() - t0
    sys.stdout.write(out)
    result = None
    for line in out.splitlines():
        if line.startswith(RESULT):
            result = json.loads(line[len(RESULT):])
    if code != 0 or result is None:
        tail = out.strip().splitlines()[-1:] or [""]
        print(f"== {label}: FAILED (exit {code}): {tail[0][:200]}", flush=True)
        return None
    result["wall_s"] = wall
    return result


def compare(args):
    lib = args.lib or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "lib", "libuvmpool.so")
    lib = os.path.abspath(lib)
    if not os.path.isfile(lib):
        print(f"UVMPOOL_TRAIN_OVERCOMMIT FAIL no libuvmpool.so at {lib} (use --lib or UVMPOOL_LIB)")
        return 1
    base = {k: v for k, v in os.environ.items()
            if k not in ("LD_PRELOAD", "PYTORCH_CUDA_ALLOC_CONF") and not k.startswith("UVMPOOL_")}
    ref = run_child(args, "reference", dict(base))
    if ref is None:
        print("UVMPOOL_TRAIN_OVERCOMMIT FAIL the reference run (without uvmpool) failed")
        return 1
    need = ref["max_reserved_mib"]
    limit = max(1, int(round(need / args.ratio)))
    spill_env = dict(base, LD_PRELOAD=lib, UVMPOOL_DEVICE_LIMIT=f"{limit}M")
    runs = [ref,
            run_child(args, "uvmpool", dict(spill_env)),
            run_child(args, "uvmpool+expandable", dict(spill_env, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"))]

    problems = []
    ref_losses = [float(l) for l in ref["losses"]]
    print(f"\nneed {need:.0f} MiB (peak reserved without uvmpool; {ref['max_allocated_mib']:.0f} MiB allocated), "
          f"device limit {limit} MiB: {need / limit:.2f}x the limit")
    print(f"{'run':<20} {'step ms':>9} {'first ms':>9} {'wall s':>7} {'total MiB':>9} {'max |loss diff|':>16}  "
          f"tier split at the peak")
    for label, r in zip(("reference", "uvmpool", "uvmpool+expandable"), runs):
        if r is None:
            problems.append(f"{label} failed")
            print(f"{label:<20} FAILED")
            continue
        losses = [float(l) for l in r["losses"]]
        diff = max(abs(a - b) for a, b in zip(losses, ref_losses)) if len(losses) == len(ref_losses) else float("inf")
        if r["losses"] != ref["losses"]:
            problems.append(f"{label} losses differ (max {diff:.3g})")
        split = "-"
        p = r.get("stats_at_peak")
        if label != "reference":
            if not r["uvmpool"] or p is None:
                problems.append(f"{label}: uvmpool not loaded")
            else:
                dev_mib = (p["pool_live_bytes"] - p["pool_live_host_bytes"]) / MIB
                split = (f"device {dev_mib:.0f} MiB, host {p['pool_live_host_bytes'] / MIB:.0f} MiB live in the pool "
                         f"(host held {p['pool_host_held_bytes'] / MIB:.0f} MiB, {p['pool_spilled_allocations']} spilled, "
                         f"{p['allocations']} allocations)")
                r["device_mib"], r["host_mib"] = dev_mib, p["pool_live_host_bytes"] / MIB
                r["host_held_mib"] = p["pool_host_held_bytes"] / MIB
        print(f"{label:<20} {r['step_ms']:9.1f} {r['step_ms_first']:9.1f} {r['wall_s']:7.1f} {r['mem_total_mib']:9.0f} "
              f"{diff:16.3g}  {split}")
    spill = runs[1]
    if spill is not None and spill.get("host_mib", 0) == 0 and spill.get("uvmpool"):
        problems.append("uvmpool run did not spill (no live host bytes)")
    print("\nlosses (reference):", ", ".join(ref["losses"]))

    def ms(r):
        return f"{r['step_ms']:.1f}" if r else "-"
    figures = (f"need_mib={need:.0f} limit_mib={limit} ratio={need / limit:.2f} steps={len(ref_losses)} "
               f"step_ms={ms(runs[0])}/{ms(runs[1])}/{ms(runs[2])} "
               f"spill_host_mib={spill.get('host_mib', 0) if spill else 0:.0f} "
               f"expandable_host_held_mib={runs[2].get('host_held_mib', 0) if runs[2] else 0:.0f} "
               f"final_loss={ref['losses'][-1]}")
    if problems:
        print(f"UVMPOOL_TRAIN_OVERCOMMIT FAIL {figures} problems: {'; '.join(problems)}")
        return 1
    print(f"UVMPOOL_TRAIN_OVERCOMMIT ok {figures} losses identical in all three")
    return 0


def main():
    args = parse(sys.argv[1:])
    if args.compare:
        sys.exit(compare(args))
    train(args)


if __name__ == "__main__":
    main()
