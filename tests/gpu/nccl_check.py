"""NCCL under uvmpool on two GPUs (issue 20 item 3): all-reduce bus bandwidth on pool memory against
the driver's own memory, from 1 MiB to 1 GiB, through torch.distributed (one process a GPU, torchrun),
NCCL's own cuMemCreate as uvmpool saw it, the transport NCCL chose, and peer queries.

  python3 nccl_check.py --lib B/lib/libuvmpool.so        (runs native, then preloaded; compares)

Bus bandwidth as nccl-tests defines it for all-reduce: bytes x 2(n-1)/n / time, n = 2 ranks; each
size is timed over enough iterations for about 0.2 s after 5 warm-up ones, median of 3 such rounds.
Native and uvmpool take turns, --repeat times each (one pass each moved by several per cent between
calls), and each size's figure is a route's best pass; every pass is printed. Beside the time per
all-reduce, the host's time to enqueue one (the loop before its synchronize): when uvmpool's hooks
cost, that grows; when the GPU's work differs, only the total does. --tiering-off adds a uvmpool run
with UVMPOOL_TIERING=off (no launch hooks), to tell the two apart. The uvmpool run also prints the
driver calls it hooked per all-reduce, and NCCL's buffer-registration lines.
Target: pool / native >= 0.98 at every size. Last line: UVMPOOL_NCCL ok|FAIL <what failed>.
"""
import argparse, json, os, statistics, sys, tempfile, time

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
os.environ.update(MULTICAST_OFF)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scoreboard_common import MIB, base_env, device_figures, lib_path, run_child, uvmpool_env, uvmpool_report

SIZES = [MIB << k for k in range(0, 11)]  # 1 MiB .. 1 GiB


def worker(out):
    import torch, torch.distributed as dist
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    n = dist.get_world_size()
    rows, calls = [], 0
    for size in SIZES:
        x = torch.zeros(size // 4, dtype=torch.float32, device="cuda")  # sums stay 0, never inf
        for _ in range(5):
            dist.all_reduce(x)
        # The same count on every rank (a count each rank derived from its own timing would leave
        # one rank waiting in an all-reduce the other never makes).
        iters = max(5, min(500, 5 * (256 * MIB) // size))
        rounds, enqueue = [], []
        for _ in range(3):
            dist.barrier(device_ids=[local])
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(x)
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            rounds.append((time.perf_counter() - t0) / iters)
            enqueue.append((t1 - t0) / iters)
        calls += 5 + 3 * iters + 1
        t = statistics.median(rounds)
        y = torch.full((16,), float(rank + 1), device="cuda")
        dist.all_reduce(y)
        ok = bool((y == n * (n + 1) / 2).all())
        rows.append({"bytes": size, "us": t * 1e6, "host_us": statistics.median(enqueue) * 1e6,
                     "busbw_gbs": size * 2 * (n - 1) / n / t / 1e9, "sum_ok": ok})
        del x
    report = uvmpool_report()
    dev = device_figures(report, local)
    proc = (report or {}).get("process", {})
    mine = {"rank": rank, "rows": rows, "uvmpool": report is not None,
            "peer": [torch.cuda.can_device_access_peer(local, o) for o in range(torch.cuda.device_count()) if o != local],
            "cuMemCreate_calls": proc.get("hook_calls", {}).get("cuMemCreate"),
            "hook_calls": proc.get("hook_calls", {}), "all_reduces": calls,
            "external_device_bytes": dev.get("external_device_bytes"),
            "external_host_bytes": dev.get("external_host_bytes"), "out_of_memory": dev.get("out_of_memory")}
    gathered = [None] * n
    dist.all_gather_object(gathered, mine)
    if rank == 0:
        with open(out, "w") as f:
            json.dump(gathered, f)
    dist.destroy_process_group()


def run(label, env, timeout):
    out = os.path.join(tempfile.mkdtemp(), "nccl.json")
    env = dict(env, **MULTICAST_OFF, NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,P2P,REG")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           os.path.abspath(__file__), "--worker", out]
    _, code, _, text = run_child(cmd, env, timeout, label, echo=False)
    lines = text.splitlines()
    transport = sorted({l.split("NCCL INFO ", 1)[1][:90] for l in lines if " via " in l and "Channel 00" in l})[:4]
    print("  transport: " + ("; ".join(transport) or "(no 'via' line)"), flush=True)
    reg = [l.split("NCCL INFO ", 1)[1][:120] for l in lines if "NCCL INFO" in l and "reg" in l.lower()]
    print(f"  registration lines: {len(reg)}" + ("".join("\n    " + l for l in reg[:4])), flush=True)
    print(f"== {label}: exit {code}", flush=True)
    if code != 0 or not os.path.exists(out):
        print("\n".join([l for l in lines if "NCCL INFO" not in l][-15:]), flush=True)
        return None
    with open(out) as f:
        return json.load(f)


def best_of(runs):
    """Per size, each rank's row from the pass where rank 0 was fastest at that size (None: no pass)."""
    if not runs:
        return None
    best = json.loads(json.dumps(runs[0]))
    for run_ in runs[1:]:
        for i, row in enumerate(run_[0]["rows"]):
            if row["busbw_gbs"] > best[0]["rows"][i]["busbw_gbs"]:
                for rank, r in enumerate(run_):
                    best[rank]["rows"][i] = r["rows"][i]
    return best


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        return worker(sys.argv[2])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib")
    p.add_argument("--timeout", type=int, default=240)
    p.add_argument("--repeat", type=int, default=2, help="passes of each route, taking turns")
    p.add_argument("--tiering-off", action="store_true", help="also a uvmpool run with UVMPOOL_TIERING=off")
    args = p.parse_args()
    lib = lib_path(args.lib)
    failures = []
    routes = [("native", base_env()), ("uvmpool", uvmpool_env(lib))]
    if args.tiering_off:
        routes.append(("uvmpool tiering off", dict(uvmpool_env(lib), UVMPOOL_TIERING="off")))
    passes = {label: [] for label, _ in routes}
    for k in range(args.repeat):
        for label, env in routes:
            got = run(f"{label}, pass {k + 1}", env, args.timeout)
            if got is not None:
                passes[label].append(got)
    native = best_of(passes["native"])
    pool = best_of(passes["uvmpool"])
    if native is None or pool is None:
        failures.append("a run failed" + (" (native)" if native is None else "") + (" (uvmpool)" if pool is None else ""))
    else:
        if not all(r["uvmpool"] for r in pool):
            failures.append("uvmpool was not loaded in every rank")
        labels = [label for label, _ in routes]
        print("Every pass, rank 0 (bus GB/s; host us to enqueue one all-reduce / us per all-reduce):")
        print("| size | " + " | ".join(f"{l} {k + 1}" for l in labels for k in range(len(passes[l]))) + " |")
        print("| --- |" + " --- |" * sum(len(passes[l]) for l in labels))
        for i, size in enumerate(SIZES):
            cells = [f"{r[0]['rows'][i]['busbw_gbs']:.1f} ({r[0]['rows'][i]['host_us']:.1f}/{r[0]['rows'][i]['us']:.1f})"
                     for l in labels for r in passes[l]]
            print(f"| {size // MIB} MiB | " + " | ".join(cells) + " |", flush=True)
        print("Best pass of each route:")
        print("| size | native bus GB/s | uvmpool bus GB/s | uvmpool / native |")
        print("| --- | --- | --- | --- |")
        worst = None
        for a, b in zip(native[0]["rows"], pool[0]["rows"]):
            ratio = b["busbw_gbs"] / a["busbw_gbs"]
            worst = ratio if worst is None else min(worst, ratio)
            print(f"| {a['bytes'] // MIB} MiB | {a['busbw_gbs']:.1f} | {b['busbw_gbs']:.1f} | {ratio:.3f} |", flush=True)
            if not (a["sum_ok"] and b["sum_ok"]):
                failures.append(f"wrong sum at {a['bytes'] // MIB} MiB")
        print(f"UVMPOOL_NCCL_ROW all-reduce bus bandwidth uvmpool / native: worst {worst:.3f} over 1 MiB..1 GiB, "
              f"best of {args.repeat} passes each (target >= 0.98)", flush=True)
        if worst < 0.98:
            failures.append(f"all-reduce bandwidth {worst:.3f}x native")
        hooked = pool[0].get("hook_calls") or {}
        per_op = sorted(((v / max(1, pool[0]["all_reduces"]), k) for k, v in hooked.items() if v), reverse=True)
        print("UVMPOOL_NCCL_ROW hooked driver calls per all-reduce, rank 0: " +
              (", ".join(f"{k} {v:.2f}" for v, k in per_op[:8]) or "none"), flush=True)
        peers_native = [r["peer"] for r in native]
        peers_pool = [r["peer"] for r in pool]
        print(f"UVMPOOL_NCCL_ROW NCCL's cuMemCreate under uvmpool per rank: calls {[r['cuMemCreate_calls'] for r in pool]}, "
              f"device bytes {[r['external_device_bytes'] for r in pool]}, host bytes "
              f"{[r['external_host_bytes'] for r in pool]}, refusals {[r['out_of_memory'] for r in pool]}; "
              f"can_device_access_peer native {peers_native} uvmpool {peers_pool}", flush=True)
        if peers_native != peers_pool:
            failures.append("peer queries differ")
        if any(r["external_host_bytes"] for r in pool) or any(r["out_of_memory"] for r in pool):
            failures.append("NCCL memory placed in host memory or refused")
    print("UVMPOOL_NCCL " + ("ok" if not failures else "FAIL " + "; ".join(failures)), flush=True)
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
