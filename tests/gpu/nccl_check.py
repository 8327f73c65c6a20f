"""NCCL under uvmpool on two GPUs (issue 20 item 3): all-reduce bus bandwidth on pool memory against
the driver's own memory, from 1 MiB to 1 GiB, through torch.distributed (one process a GPU, torchrun),
NCCL's own cuMemCreate as uvmpool saw it, the transport NCCL chose, and peer queries.

  python3 nccl_check.py --lib B/lib/libuvmpool.so        (runs native, then preloaded; compares)

Bus bandwidth as nccl-tests defines it for all-reduce: bytes x 2(n-1)/n / time, n = 2 ranks; each
size is timed over enough iterations for about 0.2 s after 5 warm-up ones, median of 3 such rounds.
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
    rows = []
    for size in SIZES:
        x = torch.zeros(size // 4, dtype=torch.float32, device="cuda")  # sums stay 0, never inf
        for _ in range(5):
            dist.all_reduce(x)
        # The same count on every rank (a count each rank derived from its own timing would leave
        # one rank waiting in an all-reduce the other never makes).
        iters = max(5, min(500, 5 * (256 * MIB) // size))
        rounds = []
        for _ in range(3):
            dist.barrier(device_ids=[local])
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(x)
            torch.cuda.synchronize()
            rounds.append((time.perf_counter() - t0) / iters)
        t = statistics.median(rounds)
        y = torch.full((16,), float(rank + 1), device="cuda")
        dist.all_reduce(y)
        ok = bool((y == n * (n + 1) / 2).all())
        rows.append({"bytes": size, "us": t * 1e6, "busbw_gbs": size * 2 * (n - 1) / n / t / 1e9, "sum_ok": ok})
        del x
    report = uvmpool_report()
    dev = device_figures(report, local)
    proc = (report or {}).get("process", {})
    mine = {"rank": rank, "rows": rows, "uvmpool": report is not None,
            "peer": [torch.cuda.can_device_access_peer(local, o) for o in range(torch.cuda.device_count()) if o != local],
            "cuMemCreate_calls": proc.get("hook_calls", {}).get("cuMemCreate"),
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
    env = dict(env, **MULTICAST_OFF, NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,P2P")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           os.path.abspath(__file__), "--worker", out]
    _, code, _, text = run_child(cmd, env, timeout, label, echo=False)
    lines = text.splitlines()
    transport = sorted({l.split("NCCL INFO ", 1)[1][:90] for l in lines if " via " in l and "Channel 00" in l})[:4]
    print("  transport: " + ("; ".join(transport) or "(no 'via' line)"), flush=True)
    print(f"== {label}: exit {code}", flush=True)
    if code != 0 or not os.path.exists(out):
        print("\n".join([l for l in lines if "NCCL INFO" not in l][-15:]), flush=True)
        return None
    with open(out) as f:
        return json.load(f)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        return worker(sys.argv[2])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib")
    p.add_argument("--timeout", type=int, default=240)
    args = p.parse_args()
    lib = lib_path(args.lib)
    failures = []
    native = run("native", base_env(), args.timeout)
    pool = run("uvmpool preloaded", uvmpool_env(lib), args.timeout)
    if native is None or pool is None:
        failures.append("a run failed" + (" (native)" if native is None else "") + (" (uvmpool)" if pool is None else ""))
    else:
        if not all(r["uvmpool"] for r in pool):
            failures.append("uvmpool was not loaded in every rank")
        print("| size | native bus GB/s | uvmpool bus GB/s | uvmpool / native |")
        print("| --- | --- | --- | --- |")
        worst = None
        for a, b in zip(native[0]["rows"], pool[0]["rows"]):
            ratio = b["busbw_gbs"] / a["busbw_gbs"]
            worst = ratio if worst is None else min(worst, ratio)
            print(f"| {a['bytes'] // MIB} MiB | {a['busbw_gbs']:.1f} | {b['busbw_gbs']:.1f} | {ratio:.3f} |", flush=True)
            if not (a["sum_ok"] and b["sum_ok"]):
                failures.append(f"wrong sum at {a['bytes'] // MIB} MiB")
        print(f"UVMPOOL_NCCL_ROW all-reduce bus bandwidth uvmpool / native: worst {worst:.3f} over 1 MiB..1 GiB "
              f"(target >= 0.98)", flush=True)
        if worst < 0.98:
            failures.append(f"all-reduce bandwidth {worst:.3f}x native")
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
