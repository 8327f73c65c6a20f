"""Two-GPU runs of the scoreboard's GPT-2-medium training step under torch.distributed (NCCL, one
process a GPU, DistributedDataParallel), issue 20 items 1, 2 and 5:

  fits        torchrun --nproc-per-node 2, native, then uvmpool preloaded and as the drop-in driver:
              step time (target <= 1.02x native DDP) and the losses of every rank over 20 steps (must
              equal native's bit for bit, or where native run twice differs from itself, lie within
              that spread);
  overcommit  uvmpool preloaded with each rank's UVMPOOL_DEVICE_LIMIT at a third of its peak need
              (peak reserved + the context, measured by the native run), beside PyTorch's
              save_on_cpu given the same device memory (set_per_process_memory_fraction): step time,
              PCIe bytes per step (NVML, per GPU), what uvmpool spilled; losses must equal the
              uncapped run's over the steps both ran; once with tiering remote, once auto;
  kill        two ranks started by hand under uvmpool; rank 1 kills itself (SIGKILL) in the middle of a
              step. Rank 0 must leave with NCCL's error within the collective timeout, not hang, and
              its statistics segment must be gone afterwards (uvmpool-stat removes an ended process's).

  python3 ddp_train.py --lib B/lib/libuvmpool.so [--dropin B/dropin] [--parts fits,overcommit,kill]
  (worker: python3 ddp_train.py --worker ... under torchrun or started by --parts kill)

Every process keeps NVLink multicast off (NCCL_NVLS_ENABLE=0 and the like): the machines lent here
require it. Deterministic: CUBLAS_WORKSPACE_CONFIG=:4096:8, deterministic kernels and eager attention
(--no-deterministic: the fused kernels), fixed seeds, the same data per rank.
Last line: UVMPOOL_DDP ok|FAIL <what failed>.
"""
import argparse, re, datetime, json, os, signal, statistics, subprocess, sys, tempfile, time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
# NVLink multicast can take the host's shared GPUs out of service: off, in every child too.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
os.environ.update(MULTICAST_OFF)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scoreboard_common import PcieMeter, base_env, device_figures, fmt_bytes, uvmpool_env, uvmpool_report

SHAPE = dict(n_layer=24, n_embd=1024, n_head=16, vocab_size=50257, n_positions=1024)  # as score_train.py
RESULT = "UVMPOOL_DDP_RESULT "
# What tiering did in a rank (docs/observability.md): moves, bytes each way, holds, launches that read
# host memory in place, the period learned and the thrash guard's decisions.
TIERING_FIGURES = ("launches_read", "launches_in_place", "tiering_moves", "tiering_promoted_bytes", "tiering_demoted_bytes",
                   "tiering_epochs", "tiering_host_waits", "tiering_holds_given_up", "tiering_holds_extended", "tiering_queue_waits", "tiering_holds_broken", "tiering_moves_failed",
                   "tiering_period", "tiering_kept_in_place", "tiering_guard_trials", "tiering_guard_off", "tiering_epochs_trials", "tiering_epochs_on_launch",
                   # what the mover does at the moment the figures are read (a hung rank: what it waits for)
                   "tiering_mover_step", "tiering_mover_step_seconds", "tiering_holds_standing", "tiering_gate_closed",
                   "tiering_gate_waiting")


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", help="libuvmpool.so")
    p.add_argument("--dropin", help="folder holding uvmpool's drop-in libcuda.so.1 (default: lib/../dropin)")
    p.add_argument("--parts", default="fits,overcommit,kill")
    p.add_argument("--worker", action="store_true")
    p.add_argument("--mode", default="plain", choices=["plain", "save_on_cpu"])
    p.add_argument("--memory-fraction", type=float, default=0.0, help="worker: PyTorch's cap (0: none)")
    p.add_argument("--kill-at", type=int, default=-1, help="worker: rank 1 kills itself in this step")
    p.add_argument("--out", help="worker: rank 0 writes the gathered results here")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=20, help="steps when it fits (all count for the losses)")
    p.add_argument("--capped-steps", type=int, default=6, help="steps when overcommitted")
    p.add_argument("--capped-modes", default="remote,auto", help="UVMPOOL_TIERING modes run overcommitted")
    p.add_argument("--save-on-cpu", action=argparse.BooleanOptionalAction, default=True,
                   help="run save_on_cpu on the same memory beside the overcommitted runs")
    p.add_argument("--nccl-timeout", type=int, default=60, help="seconds (the kill part's collective timeout)")
    p.add_argument("--collective-timeout", type=int, default=600,
                   help="seconds (the other parts' collective timeout: PyTorch's own default for NCCL, so a stall "
                        "shows as a slow step, not as a failed run)")
    p.add_argument("--timeout", type=int, default=300, help="seconds each run may take")
    p.add_argument("--deterministic", action=argparse.BooleanOptionalAction, default=True,
                   help="deterministic kernels and attention written out (default): native DDP then repeats its "
                        "losses bit for bit, so uvmpool's must equal them")
    return p.parse_args(argv)


# ---------------------------------------------------------------------------------------------- worker
def worker(args):
    import faulthandler
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # a run past its time: every thread's stack
    import torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from transformers import GPT2Config, GPT2LMHeadModel

    rank, local, world = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local),
                            timeout=datetime.timedelta(seconds=args.nccl_timeout))
    if args.memory_fraction > 0:
        torch.cuda.set_per_process_memory_fraction(args.memory_fraction, local)
    torch.manual_seed(1234)
    if args.deterministic:
        # Two H200s showed native DDP differing from itself from step 2 on (fused attention's backward
        # and the embedding's accumulate in no fixed order); a 2-rank all-reduce adds two values, the
        # same either way. With every kernel deterministic the losses repeat bit for bit.
        torch.use_deterministic_algorithms(True, warn_only=True)  # a warning, not a failed run, names any exception
    with torch.device("cuda", local):
        model = GPT2LMHeadModel(GPT2Config(**SHAPE, **({"attn_implementation": "eager"} if args.deterministic else {})))
    model.train()
    ddp = DDP(model, device_ids=[local])
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4, weight_decay=0.1)
    total = args.warmup + args.steps
    gen = torch.Generator().manual_seed(5678 + rank)
    data = torch.randint(0, SHAPE["vocab_size"], (total, args.batch, args.seq), generator=gen)

    def step(i, tokens):
        tokens = tokens.to("cuda", non_blocking=False)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            if args.mode == "save_on_cpu":
                with torch.autograd.graph.save_on_cpu(pin_memory=True):
                    loss = ddp(input_ids=tokens, labels=tokens).loss
            else:
                loss = ddp(input_ids=tokens, labels=tokens).loss
        if i == args.kill_at and rank == 1:
            torch.cuda.synchronize()
            print(f"rank 1: killing itself in step {i + 1}, between forward and backward", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        loss.backward()  # the gradient all-reduce: rank 0 waits here for a rank that is gone
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    losses, times = [], []
    meter = PcieMeter(local)
    for i in range(total):
        if i == args.warmup:
            torch.cuda.synchronize()
            meter.__enter__()
        t0 = time.perf_counter()
        losses.append(step(i, data[i]))
        torch.cuda.synchronize()
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)
        if rank == 0:
            print(f"step {i + 1}: loss {losses[-1]:.6f}, {(time.perf_counter() - t0) * 1e3:.1f} ms", flush=True)
    meter.__exit__(None, None, None)
    pcie = meter.total()
    free, dev_total = torch.cuda.mem_get_info()
    report = uvmpool_report()
    dev = device_figures(report, local)
    proc = (report or {}).get("process", {})
    mine = {
        "rank": rank, "losses": losses, "times": times, "step_s": statistics.median(times) if times else None,
        "max_reserved": torch.cuda.max_memory_reserved(), "max_allocated": torch.cuda.max_memory_allocated(),
        "context_overhead": max(0, dev_total - free - torch.cuda.memory_reserved()) if report is None else None,
        "device_total": dev_total,
        "pcie_per_step": None if pcie is None or not times else pcie / len(times),
        "uvmpool": report is not None,
        "peak_live_device": dev.get("peak_live_device_bytes"), "peak_live_host": dev.get("peak_live_host_bytes"),
        "spilled_allocations": dev.get("spilled_allocations"), "budget": dev.get("budget"),
        "external_device_bytes": dev.get("external_device_bytes"),
        "cuMemCreate_calls": proc.get("hook_calls", {}).get("cuMemCreate"),
        "tiering": {k: proc.get(k) for k in TIERING_FIGURES},
    }
    gathered = [None] * world
    dist.all_gather_object(gathered, mine)
    if rank == 0 and args.out:
        with open(args.out, "w") as f:
            json.dump(gathered, f)
    dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------- driver
def launch(args, label, env, extra, steps):
    """torchrun --nproc-per-node 2 of this file's worker; returns (per-rank results or None, why)."""
    out = os.path.join(tempfile.mkdtemp(), "result.json")
    # --tee 3: each worker line comes prefixed with its rank ("[default0]:..."), so a failure can name
    # each rank's first error rather than torchrun's last line.
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "--tee", "3",
           os.path.abspath(__file__), "--worker", "--out", out, "--batch", str(args.batch), "--seq", str(args.seq),
           "--warmup", str(args.warmup), "--steps", str(steps), "--nccl-timeout", str(args.collective_timeout),
           "--deterministic" if args.deterministic else "--no-deterministic"] + extra
    env = dict(env, **MULTICAST_OFF)
    code, text = run_diagnosed(cmd, env, args.timeout, f"{label} {' '.join(extra)}".strip())
    lines = text.splitlines()
    # What uvmpool warned of in each rank (holds given up, moves that failed), the first 30.
    warned = [l[:240] for l in lines if re.search(r"\[uvmpool\] (warning|error)", l)]
    if warned:
        print(f"{len(warned)} uvmpool warnings, the first {min(30, len(warned))}:\n" + "\n".join(warned[:30]), flush=True)
    if code != 0 or not os.path.exists(out):
        # How far it got, step by step (rank 0's lines), before the error.
        print("\n".join(l[:200] for l in lines if re.match(r"\[(?:default|rank)0\]:step ", l)), flush=True)
        return None, f"exit {code}: " + first_errors(lines)
    with open(out) as f:
        ranks = json.load(f)
    if env.get("LD_PRELOAD") or env.get("LD_LIBRARY_PATH", "").endswith("dropin"):
        if not all(r["uvmpool"] for r in ranks):
            return None, "uvmpool was not loaded in every rank"
    return ranks, None


def run_diagnosed(cmd, env, timeout, label):
    """run_child's (exit status or 'timeout', output), but a run past its time is looked at before it is
    killed: each worker's uvmpool figures (uvmpool-stat, when preloaded) and every Python thread's stack
    (SIGUSR1, faulthandler), so a hang says where it waits."""
    print(f"== {label}: " + " ".join(f"{k}={env[k]}" for k in ("LD_PRELOAD", "UVMPOOL_DEVICE_LIMIT", "UVMPOOL_TIERING")
                                      if k in env), flush=True)
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        code = p.returncode
    except subprocess.TimeoutExpired:
        code = "timeout"
        workers = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split()
        stat = os.path.join(os.path.dirname(env.get("LD_PRELOAD", "")), "..", "bin", "uvmpool-stat")
        for pid in workers:
            if env.get("LD_PRELOAD") and os.path.exists(stat):
                r = subprocess.run([stat, pid], capture_output=True, text=True, timeout=30)
                print(f"uvmpool-stat {pid} at the timeout:\n{r.stdout}{r.stderr}", flush=True)
            try:
                os.kill(int(pid), signal.SIGUSR1)
            except OSError:
                pass
        time.sleep(3)  # the stacks are written
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        stacks = [l for l in out.splitlines() if re.search(r'(Thread 0x|Current thread|  File ")', l)]
        print(f"Python stacks at the timeout ({len(stacks)} lines):\n" + "\n".join(l[:200] for l in stacks[:120]), flush=True)
    sys.stdout.write("\n".join(out.splitlines()[-25:]) + "\n")
    print(f"== {label}: exit {code}, {time.perf_counter() - t0:.1f} s", flush=True)
    return code, out


def first_errors(lines):
    """Each rank's first error line (torchrun --tee prefixes worker lines with [defaultN]: or
    [rankN]:), else the last line."""
    found = {}
    for line in lines:
        m = re.match(r"\[(?:default|rank)(\d+)\]:(.*)", line)
        if m and m.group(1) not in found and re.search(r"Error|error|Traceback|CUDA|out of memory", m.group(2)) \
                and "Traceback" not in m.group(2):
            found[m.group(1)] = m.group(2).strip()[:220]
    if not found:
        return (lines or [""])[-1][:200]
    return "; ".join(f"rank {r}: {e}" for r, e in sorted(found.items()))


def losses_spread(a, b, n=None):
    """The largest difference between two runs' losses, over every rank and the first n steps (0.0: bit
    for bit the same; inf: a rank or a step missing)."""
    worst = 0.0
    for ra, rb in zip(a, b):
        la, lb = ra["losses"][:n], rb["losses"][:n]
        if len(la) != len(lb):
            return float("inf")
        worst = max([worst] + [abs(x - y) for x, y in zip(la, lb)])
    return worst if len(a) == len(b) else float("inf")


def losses_check(ranks, reference, tolerance, n=None):
    """(passed, words): the losses equal the reference's bit for bit when native DDP repeats its own
    bit for bit (tolerance 0), else lie within native's own spread between two runs."""
    spread = losses_spread(ranks, reference, n)
    if spread == 0.0:
        return True, "identical"
    return spread <= tolerance, f"{'within' if spread <= tolerance else 'OUTSIDE'} native's own spread " \
                                f"(largest difference {spread:.3g}, native against itself {tolerance:.3g})"


def max_step(ranks):  # a DDP step is as slow as its slowest rank
    return max(r["step_s"] for r in ranks)


def part_fits(args, lib, dropin, failures, summary):
    native, why = launch(args, "native DDP", base_env(), [], args.steps)
    if native is None:
        failures.append(f"native DDP: {why}")
        return None
    summary["native"] = native
    # Whether native DDP repeats its own losses bit for bit here: the bar uvmpool's runs are held to. On
    # two H200s (2026-11-24) it did not, so uvmpool's losses are held to native's own spread.
    again, why = launch(args, "native DDP again", base_env(), [], args.steps)
    tolerance = losses_spread(again, native) if again is not None else 0.0
    summary["native_spread"] = tolerance
    if again is not None:
        print(f"UVMPOOL_DDP_ROW fits native again: step {max_step(again) * 1e3:.1f} ms; losses over {args.steps} steps "
              f"{'identical to' if tolerance == 0.0 else f'up to {tolerance:.3g} from'} the first native run", flush=True)
    for label, env in (("uvmpool preloaded", uvmpool_env(lib)),
                       ("uvmpool drop-in", dict(base_env(), LD_LIBRARY_PATH=dropin, UVMPOOL_LOG_LEVEL="error"))):
        ranks, why = launch(args, label, env, [], args.steps)
        if ranks is None:
            failures.append(f"{label}: {why}")
            continue
        ratio = max_step(ranks) / max_step(native)
        same, words = losses_check(ranks, native, tolerance)
        summary[label] = ranks
        print(f"UVMPOOL_DDP_ROW fits {label}: step {max_step(ranks) * 1e3:.1f} ms vs native "
              f"{max_step(native) * 1e3:.1f} ms = {ratio:.3f}x (target <= 1.02); losses over {args.steps} steps "
              f"{words}; NCCL cuMemCreate calls "
              f"{[r['cuMemCreate_calls'] for r in ranks]}, their device bytes "
              f"{[fmt_bytes(r['external_device_bytes']) for r in ranks]}", flush=True)
        if not same:
            failures.append(f"{label}: losses differ from native")
        if ratio > 1.02:
            failures.append(f"{label}: {ratio:.3f}x native step time")
    return native


def part_overcommit(args, lib, native, failures, summary):
    need = max(r["max_reserved"] + r["context_overhead"] for r in native)
    limit = need // 3
    steps = args.capped_steps
    print(f"peak need per rank {fmt_bytes(need)} (reserved + context); limit a third: {fmt_bytes(limit)}", flush=True)
    tolerance = summary.get("native_spread", 0.0)
    best = None  # the faster of the uvmpool runs, for the comparison with save_on_cpu
    # Spilled memory read in place (remote), and moved ahead of the launches (auto, docs/tiering.md).
    for mode in args.capped_modes.split(","):
        # At warn, a hold given up or a move that failed is printed (by each rank, prefixed with it).
        ranks, why = launch(args, f"uvmpool at a third, tiering {mode}",
                            uvmpool_env(lib, limit, UVMPOOL_TIERING=mode, UVMPOOL_LOG_LEVEL="warn"), [], steps)
        if ranks is None:
            failures.append(f"overcommitted, tiering {mode}: {why}")
            continue
        summary[f"capped_{mode}"] = ranks
        if best is None or max_step(ranks) < max_step(best):
            best = ranks
        same, words = losses_check(ranks, native, tolerance, args.warmup + steps)
        print(f"UVMPOOL_DDP_ROW overcommit uvmpool, tiering {mode}: step {max_step(ranks):.3f} s "
              f"({max_step(ranks) / max_step(native):.1f}x native {max_step(native) * 1e3:.0f} ms); PCIe per step per rank "
              f"{[fmt_bytes(r['pcie_per_step']) for r in ranks]}; peak live device/host per rank "
              f"{[(fmt_bytes(r['peak_live_device']), fmt_bytes(r['peak_live_host'])) for r in ranks]}; spilled "
              f"allocations {[r['spilled_allocations'] for r in ranks]}; losses over {args.warmup + steps} steps "
              f"against uncapped: {words}", flush=True)
        for r in ranks:
            t = r.get("tiering") or {}
            print(f"UVMPOOL_DDP_ROW overcommit tiering {mode} rank {r['rank']}: " + ", ".join(
                f"{k} {fmt_bytes(v) if k.endswith('_bytes') and v is not None else v}" for k, v in t.items()), flush=True)
        if not same:
            failures.append(f"overcommitted, tiering {mode}: losses differ from uncapped")
    ranks = best
    if not args.save_on_cpu:
        return
    # save_on_cpu with the same bytes for tensors: PyTorch's cap is the limit less the context.
    context = max(r["context_overhead"] for r in native)
    total = native[0]["device_total"]  # cudaMemGetInfo's total, which the fraction is of
    fraction = max(0.01, (limit - context) / total)
    soc, why = launch(args, "save_on_cpu, same memory", base_env(),
                      ["--mode", "save_on_cpu", "--memory-fraction", f"{fraction:.6f}"], steps)
    if soc is None:
        print(f"UVMPOOL_DDP_ROW overcommit save_on_cpu at {fmt_bytes(limit - context)} for tensors: did not run ({why})",
              flush=True)
    else:
        summary["save_on_cpu"] = soc
        print(f"UVMPOOL_DDP_ROW overcommit save_on_cpu at {fmt_bytes(limit - context)} for tensors: step "
              f"{max_step(soc):.3f} s; PCIe per step per rank {[fmt_bytes(r['pcie_per_step']) for r in soc]}; "
              f"uvmpool / save_on_cpu = {max_step(ranks) / max_step(soc) if ranks else float('nan'):.2f}", flush=True)


def part_kill(args, lib, failures, summary):
    """Rank 1 dies mid-step; rank 0 must leave with NCCL's error, its segment must go."""
    env = dict(uvmpool_env(lib), **MULTICAST_OFF, MASTER_ADDR="127.0.0.1", MASTER_PORT="29517", WORLD_SIZE="2",
               TORCH_NCCL_ASYNC_ERROR_HANDLING="3")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--batch", str(args.batch), "--seq", str(args.seq),
           "--warmup", "1", "--steps", "4", "--kill-at", "2", "--nccl-timeout", str(args.nccl_timeout)]
    procs = []
    for r in (0, 1):
        procs.append(subprocess.Popen(cmd, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)), stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    t0 = time.perf_counter()
    outs, codes = [], []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=args.nccl_timeout + 120)
            codes.append(p.returncode)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            codes.append("hang")
        outs.append(out)
    wall = time.perf_counter() - t0
    survivor = procs[0].pid
    tail = [l for l in outs[0].splitlines() if l.strip()][-6:]
    print("rank 0's last lines:\n  " + "\n  ".join(l[:220] for l in tail), flush=True)
    nccl_error = any(k in outs[0] for k in ("NCCL", "Watchdog", "DistBackendError", "ProcessGroupNCCL"))
    segment = f"/dev/shm/uvmpool-{os.geteuid()}/uvmpool-{os.geteuid()}-{survivor}"
    left = [segment] if os.path.exists(segment) else []
    # An abort (the NCCL watchdog's way out) runs no exit handlers: the segment is stale, and
    # uvmpool-stat removes the segments of ended processes.
    stat = os.path.join(os.path.dirname(lib), "..", "bin", "uvmpool-stat")
    cleaned = None
    if left and os.path.exists(stat):
        s = subprocess.run([stat], env=dict(base_env()), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        cleaned = [l for l in s.stdout.splitlines() if "removed" in l]
    still = [segment] if os.path.exists(segment) else []
    summary["kill"] = {"codes": codes, "wall_s": wall, "nccl_error": nccl_error, "segment_left_at_exit": left,
                       "uvmpool_stat": cleaned, "segment_after_stat": still}
    print(f"UVMPOOL_DDP_ROW kill: rank 0 exit {codes[0]} after {wall:.1f} s (collective timeout {args.nccl_timeout} s), "
          f"rank 1 exit {codes[1]}; NCCL's error in rank 0's output: {nccl_error}; rank 0's segment at its exit: "
          f"{'left (stale)' if left else 'removed'}{'; uvmpool-stat: ' + str(cleaned) if cleaned is not None else ''}; "
          f"after: {'still there' if still else 'gone'}", flush=True)
    if codes[0] in (0, "hang") or not nccl_error:
        failures.append(f"kill: rank 0 exit {codes[0]}, NCCL error seen: {nccl_error}")
    if still:
        failures.append("kill: rank 0's statistics segment was not cleaned up")


def main():
    args = parse(sys.argv[1:])
    if args.worker:
        return worker(args)
    from scoreboard_common import lib_path
    lib = lib_path(args.lib)
    dropin = os.path.abspath(args.dropin or os.path.join(os.path.dirname(lib), "..", "dropin"))
    parts = args.parts.split(",")
    failures, summary = [], {}
    if "fits" in parts:
        native = part_fits(args, lib, dropin, failures, summary)
    elif "overcommit" in parts:  # only its need, and the uncapped losses: one native run
        native, why = launch(args, "native DDP", base_env(), [], args.steps)
        if native is None:
            failures.append(f"native DDP: {why}")
    else:
        native = None
    if "overcommit" in parts and native:
        part_overcommit(args, lib, native, failures, summary)
    if "kill" in parts:
        part_kill(args, lib, failures, summary)
    print(RESULT + json.dumps(summary), flush=True)
    print("UVMPOOL_DDP " + ("ok" if not failures else "FAIL " + "; ".join(failures)), flush=True)
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
