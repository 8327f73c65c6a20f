"""Scoreboard rows 4a and 4b: a training step of a GPT-2-medium-shaped model (transformers' GPT2LMHeadModel
from a config, random weights, batch 8 x 1024 tokens, bf16 autocast, AdamW), four ways, each a child:

  native       PyTorch alone: the step time, the peak need (max_memory_reserved) and the context overhead;
  uvmpool      LD_PRELOAD=libuvmpool.so with no limit: it fits, so the figure is uvmpool's overhead
               (row 4a, target at most 1.02x native);
  save_on_cpu  PyTorch alone with torch.autograd.graph.save_on_cpu(pin_memory=True) around the forward:
               activations go to pinned host memory and come back for the backward;
  uvmpool-cap  uvmpool with UVMPOOL_DEVICE_LIMIT = save_on_cpu's peak reserved memory + the context
               overhead: the same bytes for tensors as save_on_cpu had; what does not fit spills
               (row 4b, target at least 2x faster than save_on_cpu).

Step time: the median of the timed steps after warm-up steps. The capped uvmpool runs warm up longer
(--learn-steps): tiering learns the step's launch sequence over the first steps and moves memory ahead of
it from then on, so their first steps are slower than the steady ones a training job spends its time in;
their mean is reported beside the row. Bytes over PCIe per step: NVML's PCIe
throughput counters integrated over the timed steps (scoreboard_common.PcieMeter), both directions.
The losses of the first step must be equal across the runs (same model, same data, same kernels).

  python3 score_train.py --lib build/lib/libuvmpool.so [--warmup 2] [--learn-steps 10] [--steps 4] [--timeout 240]
"""
import argparse, os, statistics, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scoreboard_common import (GIB, MIB, PcieMeter, Phases, base_env, child_result, context_overhead_bytes, device_figures,
                               fmt_bytes, lib_path, run_mode, score, uvmpool_env, uvmpool_report)

# GPT-2 medium: 24 layers of width 1024, 16 heads, GPT-2's vocabulary and context.
SHAPE = dict(n_layer=24, n_embd=1024, n_head=16, vocab_size=50257, n_positions=1024)


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", help="libuvmpool.so (default $UVMPOOL_LIB, else build/lib/libuvmpool.so)")
    p.add_argument("--child", choices=["native", "uvmpool", "save_on_cpu", "uvmpool-cap", "uvmpool-cap-nocache"])
    p.add_argument("--nocache", action="store_true",
                   help="also run uvmpool-cap with PYTORCH_NO_CUDA_MEMORY_CACHING=1 (about 45 s more)")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=4, help="timed steps")
    p.add_argument("--learn-steps", type=int, default=10,
                   help="warm-up steps of the capped uvmpool runs, in place of --warmup: the steps tiering learns "
                        "the step in (row 4b's steady state came after about 8 on an H200, docs/gpu-results.md)")
    p.add_argument("--timeout", type=int, default=240, help="seconds each child may take")
    p.add_argument("--pcie-gbs", type=float, default=51.3,
                   help="zero-copy read bandwidth for the ceiling (GB/s; uvmpool-bench-spill measures it)")
    return p.parse_args(argv)


# ---------------------------------------------------------------------------------------------- child
def child(args):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(1234)
    cfg = GPT2Config(**SHAPE)
    with torch.device("cuda"):  # made on the GPU: fast, and the same weights in every child
        model = GPT2LMHeadModel(cfg)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    gen = torch.Generator().manual_seed(5678)
    data = torch.randint(0, SHAPE["vocab_size"], (args.warmup + args.steps, args.batch, args.seq), generator=gen)
    offload = args.child == "save_on_cpu"

    phases = Phases(torch)

    def step(tokens):
        phases.start()
        tokens = tokens.to("cuda", non_blocking=False)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            if offload:
                with torch.autograd.graph.save_on_cpu(pin_memory=True):
                    loss = model(input_ids=tokens, labels=tokens).loss
            else:
                loss = model(input_ids=tokens, labels=tokens).loss
        phases.mark("forward")
        loss.backward()
        phases.mark("backward")
        opt.step()
        opt.zero_grad(set_to_none=True)
        phases.mark("optimizer")
        return loss.item()  # waits for the step

    losses, times, warmup_times = [], [], []
    for i in range(args.warmup):
        t0 = time.perf_counter()
        losses.append(step(data[i]))
        warmup_times.append(time.perf_counter() - t0)  # the loss's .item() waited for the step
    torch.cuda.synchronize()
    meter = PcieMeter()
    with meter:
        for i in range(args.warmup, args.warmup + args.steps):
            t0 = time.perf_counter()
            losses.append(step(data[i]))
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
            print(f"step {i + 1}: loss {losses[-1]:.4f}, {times[-1] * 1e3:.1f} ms", flush=True)
            phases.print(i + 1)
    pcie = meter.total()
    report = uvmpool_report()
    dev = device_figures(report)
    child_result({
        "child": args.child, "losses": losses, "step_s": statistics.median(times), "times": times,
        "warmup_times": warmup_times,
        "params": sum(p.numel() for p in model.parameters()),
        "max_allocated": torch.cuda.max_memory_allocated(), "max_reserved": torch.cuda.max_memory_reserved(),
        "context_overhead": context_overhead_bytes(torch) if report is None else None,
        "pcie_per_step": None if pcie is None else pcie / len(times),
        "pcie_error": None if meter.ok else meter.error,
        "uvmpool": report is not None,
        "peak_live_device": dev.get("peak_live_device_bytes"), "peak_live_host": dev.get("peak_live_host_bytes"),
        "spilled_allocations": dev.get("spilled_allocations"),
    })


# --------------------------------------------------------------------------------------------- driver
def main():
    args = parse(sys.argv[1:])
    if args.child:
        return child(args)
    lib = lib_path(args.lib)
    me = [sys.executable, os.path.abspath(__file__), "--batch", str(args.batch), "--seq", str(args.seq),
          "--warmup", str(args.warmup), "--steps", str(args.steps)]

    def run(mode, env):
        cmd = me
        if mode.startswith("uvmpool-cap"):  # warmed up for longer: tiering learns the step meanwhile
            cmd = [a if i == 0 or me[i - 1] != "--warmup" else str(args.learn_steps) for i, a in enumerate(me)]
        return run_mode(cmd, mode, env, args.timeout)

    native, err_native = run("native", base_env())
    fits, err_fits = run("uvmpool", uvmpool_env(lib))
    soc, err_soc = run("save_on_cpu", base_env())
    capped, err_capped, limit = None, "needs the native and save_on_cpu runs", None
    if native and soc:
        limit = soc["max_reserved"] + native["context_overhead"]
        capped, err_capped = run("uvmpool-cap", uvmpool_env(lib, limit))
    # On request, the same with PyTorch's caching allocator off: uvmpool then places every tensor
    # itself. A figure beside the row, not the row: users run PyTorch unchanged.
    nocache, err_nocache = None, None
    if native and soc and args.nocache:
        nocache, err_nocache = run("uvmpool-cap-nocache", uvmpool_env(lib, limit, PYTORCH_NO_CUDA_MEMORY_CACHING=1))

    print(f"\n{'run':<20} {'step ms':>9} {'peak reserved':>14} {'PCIe/step':>11}  first loss")
    for name, r in (("native", native), ("uvmpool", fits), ("save_on_cpu", soc), ("uvmpool-cap", capped),
                    ("uvmpool-cap-nocache", nocache)):
        if r:
            print(f"{name:<20} {r['step_s'] * 1e3:9.1f} {fmt_bytes(r['max_reserved']):>14} "
                  f"{fmt_bytes(r['pcie_per_step']):>11}  {r['losses'][0]!r}")
        else:
            print(f"{name:<20} FAILED")
    problems = [e for e in (err_native, err_fits, err_soc, err_capped if native and soc else None) if e]
    if native:
        for name, r in (("uvmpool", fits), ("save_on_cpu", soc), ("uvmpool-cap", capped)):
            if r and abs(r["losses"][0] - native["losses"][0]) > 1e-3 * abs(native["losses"][0]):
                problems.append(f"{name}: first loss {r['losses'][0]} differs from native {native['losses'][0]}")
    for p in problems:
        print("PROBLEM:", p)

    shape = f"GPT-2-medium shape ({native['params'] / 1e6:.0f}M parameters), " if native else "GPT-2-medium shape, "
    shape += f"batch {args.batch} x {args.seq}, bf16 autocast, AdamW"
    # 4a: it fits; the same kernels on the same kind of memory, so the ceiling is 1.00.
    if native and fits:
        ratio = fits["step_s"] / native["step_s"]
        score("4a", f"training step when it fits: {shape}", f"{fits['step_s'] * 1e3:.1f} ms/step",
              f"native {native['step_s'] * 1e3:.1f} ms/step (peak reserved {fmt_bytes(native['max_reserved'])})",
              ratio, "uvmpool / native step time", "<= 1.02", ratio <= 1.02,
              "1.00: the same kernels on the same HBM; the difference is allocation calls, which the pool serves from cache")
    else:
        score("4a", f"training step when it fits: {shape}", err_fits or "-", err_native or "-", None,
              "uvmpool / native step time", "<= 1.02", False, "-")
    # 4b: the device memory of save_on_cpu. What does not fit (peak need - cap) must leave the GPU and
    # come back every step: at the PCIe rate per direction, overlapped with compute at best.
    if native and soc and capped:
        ratio = soc["step_s"] / capped["step_s"]
        learning = capped.get("warmup_times") or []
        learned = (f"steady, after {len(learning)} steps of learning at {statistics.mean(learning) * 1e3:.0f} ms/step "
                   f"on average" if learning else "")
        excess = max(0, native["max_reserved"] - soc["max_reserved"])
        floor_s = max(native["step_s"], excess / (args.pcie_gbs * 1e9))
        host = capped.get("peak_live_host") or 0
        score("4b", f"training step at save_on_cpu's device memory ({fmt_bytes(limit)} limit, "
                    f"{soc['max_reserved'] / native['max_reserved']:.2f} of the peak need): {shape}",
              f"{capped['step_s'] * 1e3:.0f} ms/step, {fmt_bytes(capped['pcie_per_step'])} over PCIe per step "
              f"({fmt_bytes(host)} spilled at the peak" + (f"; {learned}" if learned else "") + ")" +
              (f"; with PyTorch's cache off {nocache['step_s'] * 1e3:.0f} ms/step, "
               f"{fmt_bytes(nocache['pcie_per_step'])} over PCIe" if nocache else
               f"; with PyTorch's cache off: {err_nocache}" if err_nocache else ""),
              f"save_on_cpu {soc['step_s'] * 1e3:.0f} ms/step, {fmt_bytes(soc['pcie_per_step'])} over PCIe per step "
              f"(native {native['step_s'] * 1e3:.0f} ms)",
              ratio, "save_on_cpu / uvmpool step time", ">= 2", ratio >= 2,
              f"PCIe: the {fmt_bytes(excess)} that do not fit cross each way every step, at best overlapped with "
              f"compute: >= {floor_s * 1e3:.0f} ms/step at {args.pcie_gbs:g} GB/s")
    else:
        score("4b", f"training step at save_on_cpu's device memory: {shape}", err_capped or "-",
              err_soc or "-", None, "save_on_cpu / uvmpool step time", ">= 2", False, "-")
    return 1 if problems or not (native and fits and soc and capped) else 0


if __name__ == "__main__":
    sys.exit(main())
