"""CUDA graphs under uvmpool on a real GPU (issue 16): a PyTorch forward pass of L bf16 layers
(h = gelu(h @ W)) whose weights and activations need more than UVMPOOL_DEVICE_LIMIT, captured with
torch.cuda.graph and replayed, in fresh processes: natively, and under LD_PRELOAD=libuvmpool.so with
UVMPOOL_TIERING=remote and auto. Two shapes:
  layers  one graph per layer, replayed in order (the policy sees a sequence of graph launches)
  whole   one graph for the whole pass (one launch that needs everything)
Checks that every run's outputs (a checksum of each step's output, as hex) equal the remote run's bit
for bit, and that under uvmpool the captures were recorded and every graph launch was read
(launches_captured > 0, graph_launches_read > 0, graph_launches_unread == 0). Reports each run's
median step time of the last half and the tiering figures.

  python3 graph_replay.py --lib build/lib/libuvmpool.so [--limit 2G] [--steps 12] [--shapes layers,whole]

Last line: UVMPOOL_GRAPH_REPLAY ok|FAIL <runs>
"""
import argparse, json, os, subprocess, sys

CHILD = r"""
import json, os, statistics, time, ctypes
import torch
torch.manual_seed(0)
L, W, B, shape = int(os.environ["GR_LAYERS"]), int(os.environ["GR_WIDTH"]), int(os.environ["GR_BATCH"]), os.environ["GR_SHAPE"]
weights = [torch.randn(W, W, device="cuda", dtype=torch.bfloat16) / W ** 0.5 for _ in range(L)]
inputs = [torch.randn(B, W, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
static_in = inputs[0].clone()

def layer(h, w):
    return torch.nn.functional.gelu(h @ w)

def warm_up(fn):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)

graphs, out = [], None
if shape == "layers":
    h = static_in
    for w in weights:
        warm_up(lambda: layer(h, w))
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            nxt = layer(h, w)
        graphs.append(g)
        h = nxt
    out = h
else:
    def forward():
        h = static_in
        for w in weights:
            h = layer(h, w)
        return h
    warm_up(forward)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = forward()
    graphs.append(g)
sums, times = [], []
for step in range(int(os.environ["GR_STEPS"])):
    static_in.copy_(inputs[step % 2])
    torch.cuda.synchronize(); t0 = time.perf_counter()
    for g in graphs:
        g.replay()
    torch.cuda.synchronize(); times.append(time.perf_counter() - t0)
    sums.append(float.hex(out.float().sum().item()))
res = {"sums": sums, "steps_s": times, "last_half_s": statistics.median(times[len(times) // 2:])}
try:
    get = ctypes.CDLL(None).uvmpool_stats_json
    get.restype = ctypes.c_ulonglong
    get.argtypes = [ctypes.c_char_p, ctypes.c_ulonglong]
    buf = ctypes.create_string_buffer(get(None, 0) + 4096)
    get(buf, len(buf))
    p = json.loads(buf.value.decode())["process"]
    res["tiering"] = {k: p.get(k) for k in ("launches_captured", "graph_launches_read", "graph_launches_unread",
                                            "launches_read", "launches_in_place", "tiering_moves",
                                            "tiering_promoted_bytes", "tiering_demoted_bytes", "tiering_epochs",
                                            "tiering_moves_failed", "tiering_period", "tiering_kept_in_place",
                                            "tiering_parts_promoted", "tiering_guard_trials", "tiering_guard_off",
                                            "tiering_holds_given_up")}
except (AttributeError, OSError, KeyError, ValueError):
    pass
print("RESULT " + json.dumps(res))
"""


def run(name, shape, env_extra, lib, args):
    env = dict(os.environ)
    env.update({"GR_LAYERS": str(args.layers), "GR_WIDTH": str(args.width), "GR_BATCH": str(args.batch),
                "GR_STEPS": str(args.steps), "GR_SHAPE": shape})
    env.update(env_extra)
    if lib:
        env["LD_PRELOAD"] = lib
    p = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=args.timeout)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    print(f"{shape} {name}: exit {p.returncode}\n{p.stderr[-3000:]}", flush=True)
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--limit", default="2G")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--width", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--timeout", type=int, default=240)
    ap.add_argument("--shapes", default="layers,whole")
    ap.add_argument("--runs", default="native,remote,auto")
    # Runs of your own beside the named ones: NAME:VAR=VALUE,VAR=VALUE (UVMPOOL_* settings added to
    # auto's), repeatable; list NAME in --runs too.
    ap.add_argument("--setting", action="append", default=[])
    args = ap.parse_args()
    lib = os.path.abspath(args.lib)
    limited = {"UVMPOOL_DEVICE_LIMIT": args.limit}
    settings = {"native": ({}, None), "remote": ({**limited, "UVMPOOL_TIERING": "remote"}, lib),
                "auto": ({**limited, "UVMPOOL_TIERING": "auto"}, lib),
                # one epoch at a time, and the thrash guard fixed on as before its trial (docs/tiering.md)
                "auto_held": ({**limited, "UVMPOOL_TIERING": "auto", "UVMPOOL_TIERING_HOLDS_AHEAD": "1"}, lib),
                "auto_guard_on": ({**limited, "UVMPOOL_TIERING": "auto", "UVMPOOL_TIERING_THRASH_GUARD": "on"}, lib)}
    for spec in args.setting:
        name, _, assignments = spec.partition(":")
        extra = dict(a.split("=", 1) for a in assignments.split(",") if a)
        if not name or name in settings or not all(k.startswith("UVMPOOL_") for k in extra):
            sys.exit(f"graph_replay: --setting wants NAME:UVMPOOL_VAR=VALUE,... with a new NAME, not '{spec}'")
        settings[name] = ({**limited, "UVMPOOL_TIERING": "auto", **extra}, lib)
    ok, done = True, []
    for shape in args.shapes.split(","):
        wanted = ["remote"] + [n for n in args.runs.split(",") if n in settings and n != "remote"]
        runs = {n: run(n, shape, settings[n][0], settings[n][1], args) for n in wanted}
        ref = runs["remote"]["sums"] if runs["remote"] else None
        for name, r in runs.items():
            if r is None:
                ok = False
                print(f"{shape} {name}: no result", flush=True)
                continue
            done.append(f"{shape}/{name}")
            same = ref is not None and r["sums"] == ref
            t = r.get("tiering") or {}
            seen = name == "native" or (t.get("launches_captured", 0) > 0 and t.get("graph_launches_read", 0) > 0
                                        and t.get("graph_launches_unread", 1) == 0)
            ok = ok and seen and (same or name == "native")
            print(f"{shape} {name}: median step of the last half {r['last_half_s'] * 1e3:.1f} ms; outputs "
                  f"{'equal to remote' if same else 'DIFFER from remote'}; graphs {'seen' if seen else 'NOT SEEN'}; "
                  f"tiering {json.dumps(r.get('tiering'))}", flush=True)
            print(f"  {shape} {name} steps (ms): " + " ".join(f"{x * 1e3:.0f}" for x in r["steps_s"]), flush=True)
    print("UVMPOOL_GRAPH_REPLAY", "ok" if ok else "FAIL", ",".join(done))


if __name__ == "__main__":
    main()
