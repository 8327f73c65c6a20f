"""Tiering on a real GPU (issue 16): a PyTorch training loop that needs 11.7 GiB (1.46 times the
default 8 GiB limit), run in fresh processes: natively (no uvmpool, everything fits), and under
LD_PRELOAD=libuvmpool.so with UVMPOOL_DEVICE_LIMIT at the limit, with UVMPOOL_TIERING=remote (today: spilled memory read in
place), auto with copies held, auto with copies overlapped, and auto with 8 holds ahead. Checks that every uvmpool run's
losses equal the remote run's bit for bit (moves must not change a byte) and reports each run's
median step time (from the third step, and of the last third: the policy learns the step in the
first few), every step's time, and the tiering figures (moves, bytes each way, epochs, failed moves).

  python3 tiering_train.py --lib build/lib/libuvmpool.so [--limit 8G] [--steps 12] [--out DIR] [--runs remote,auto_ahead]

Last line: UVMPOOL_TIERING_TRAIN ok|FAIL <runs>
"""
import argparse, json, os, subprocess, sys, tempfile

CHILD = r"""
import json, os, statistics, sys, time, ctypes
import torch
torch.manual_seed(0)
L, W, B = int(os.environ["TT_LAYERS"]), int(os.environ["TT_WIDTH"]), int(os.environ["TT_BATCH"])
layers = [torch.nn.Linear(W, W, bias=False, device="cuda", dtype=torch.bfloat16) for _ in range(L)]
params = [p for l in layers for p in l.parameters()]
opt = torch.optim.AdamW(params, lr=1e-4, foreach=True)
x = torch.randn(B, W, device="cuda", dtype=torch.bfloat16)
losses, times = [], []
for step in range(int(os.environ["TT_STEPS"])):
    torch.cuda.synchronize(); t0 = time.perf_counter()
    h = x
    for l in layers:
        h = torch.nn.functional.gelu(l(h))
    loss = h.float().pow(2).mean()
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    losses.append(loss.item()); times.append(time.perf_counter() - t0)
out = {"losses": [float.hex(v) for v in losses], "step_s": statistics.median(times[2:]) if len(times) > 3 else times[-1],
       "steps_s": times, "last_third_s": statistics.median(times[-max(1, len(times) // 3):])}
try:
    get = ctypes.CDLL(None).uvmpool_stats_json
    get.restype = ctypes.c_ulonglong
    get.argtypes = [ctypes.c_char_p, ctypes.c_ulonglong]
    buf = ctypes.create_string_buffer(get(None, 0) + 4096)  # the figures may grow between the two calls
    if get(buf, len(buf)) >= len(buf):
        raise ValueError("uvmpool's figures outgrew the buffer")
    p = json.loads(buf.value.decode())["process"]
    out["tiering"] = {k: p.get(k) for k in ("launches_read", "launches_in_place", "tiering_moves", "tiering_promoted_bytes",
                                            "tiering_demoted_bytes", "tiering_epochs", "tiering_moves_failed",
                                            "tiering_launches_ordered", "tiering_period", "tiering_periods_learned",
                                            "tiering_periods_dropped", "tiering_kept_in_place",
                                            "tiering_guard_trials", "tiering_guard_off", "tiering_epochs_trials", "tiering_epochs_on_launch",
                                            "tiering_holds_given_up", "tiering_host_waits")}
except (AttributeError, OSError, KeyError, ValueError):
    pass
print("RESULT " + json.dumps(out))
"""


def run(name, env_extra, lib, args):
    env = dict(os.environ)
    env.update({"TT_LAYERS": str(args.layers), "TT_WIDTH": str(args.width), "TT_BATCH": str(args.batch),
                "TT_STEPS": str(args.steps)})
    env.update(env_extra)
    if lib:
        env["LD_PRELOAD"] = lib
    p = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=args.timeout)
    result = None
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[7:])
    if result is None:
        print(f"{name}: exit {p.returncode}\n{p.stderr[-3000:]}", flush=True)
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--limit", default="8G")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--width", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=8192)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--timeout", type=int, default=240)
    ap.add_argument("--out", default=tempfile.gettempdir())
    ap.add_argument("--runs", default="native,remote,auto_held,auto_overlap,auto_ahead",
                    help="which runs (remote is the reference the others' losses are compared with)")
    args = ap.parse_args()
    lib = os.path.abspath(args.lib)
    limited = {"UVMPOOL_DEVICE_LIMIT": args.limit}
    settings = {
        "native": ({}, None),
        "remote": ({**limited, "UVMPOOL_TIERING": "remote"}, lib),
        "auto_held": ({**limited, "UVMPOOL_TIERING": "auto", "UVMPOOL_TIERING_COPY": "held"}, lib),
        "auto_overlap": ({**limited, "UVMPOOL_TIERING": "auto", "UVMPOOL_TIERING_COPY": "overlap"}, lib),
        # ordered epochs placed by the launching thread as the policy asks (docs/tiering.md)
        "auto_overlap_launch": ({**limited, "UVMPOOL_TIERING": "auto", "UVMPOOL_TIERING_COPY": "overlap",
                                 "UVMPOOL_TIERING_EPOCHS": "launch"}, lib),
        # ordered epochs, each prepared when the device reaches its fence, 64 standing (docs/tiering.md)
        "auto_overlap_hold": ({**limited, "UVMPOOL_TIERING": "auto", "UVMPOOL_TIERING_COPY": "overlap",
                               "UVMPOOL_TIERING_PREPARE": "hold", "UVMPOOL_TIERING_HOLDS_AHEAD": "64"}, lib),
        # one hold at a time: the mover places it and waits for its drain before the pool's lock
        "auto_one_hold": ({**limited, "UVMPOOL_TIERING": "auto", "UVMPOOL_TIERING_HOLDS_AHEAD": "1"}, lib),
        # holds placed ahead in the program's stream order (docs/tiering.md)
        "auto_ahead": ({**limited, "UVMPOOL_TIERING": "auto", "UVMPOOL_TIERING_HOLDS_AHEAD": "8"}, lib),
        # the thrash guard fixed on, as before its trial (docs/tiering.md "The thrash guard is measured")
        "auto_ahead_guard_on": ({**limited, "UVMPOOL_TIERING": "auto", "UVMPOOL_TIERING_HOLDS_AHEAD": "8",
                                 "UVMPOOL_TIERING_THRASH_GUARD": "on"}, lib),
    }
    wanted = ["remote"] + [n for n in args.runs.split(",") if n in settings and n != "remote"]
    runs = {n: run(n, settings[n][0], settings[n][1], args) for n in wanted}
    ok = all(r is not None for r in runs.values())
    ref = runs["remote"]["losses"] if runs["remote"] else None
    for name, r in runs.items():
        if r is None:
            print(f"{name}: no result")
            continue
        same = ref is not None and r["losses"] == ref
        if name != "native" and not same:
            ok = False
        print(f"{name}: median step {r['step_s'] * 1e3:.1f} ms, of the last third {r['last_third_s'] * 1e3:.1f} ms; losses {'equal to remote' if same else 'DIFFER from remote'}"
              f" (last {float.fromhex(r['losses'][-1]):.6g}); tiering {json.dumps(r.get('tiering'))}", flush=True)
        print(f"  {name} steps (ms): " + " ".join(f"{t * 1e3:.0f}" for t in r["steps_s"]), flush=True)
    with open(os.path.join(args.out, "tiering_train.json"), "w") as f:
        json.dump(runs, f, indent=1)
    print("UVMPOOL_TIERING_TRAIN", "ok" if ok else "FAIL", ",".join(k for k, v in runs.items() if v))


if __name__ == "__main__":
    main()
