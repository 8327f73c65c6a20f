"""Launch routes of real programs under uvmpool (issue 19, item 2): for each case, a fresh process under
LD_PRELOAD=libuvmpool.so with a device limit small enough that the case's tensors spill, so the launch
hooks read every launch. Reports which launch hooks were reached and how often, and what reading the
arguments found (launches read or unread, pool pointers, pointers into host memory, launches that
read host memory in place). A case whose tensors lie in host memory but whose launches show no host
pointer would mean the reading misses the tensors.

  python3 launch_routes.py --lib build/lib/libuvmpool.so [--cases eager,gemm,...] [--out DIR]

Last line: UVMPOOL_LAUNCH_ROUTES ok|FAIL <cases>
"""
import argparse, json, os, subprocess, sys, tempfile

# Each case fills the device budget first (so what it makes next spills), then runs its kernels.
PRELUDE = r"""
import os, sys
FILL = int(os.environ["CASE_FILL_BYTES"])
"""
CASES = {
    "eager": PRELUDE + r"""
import torch
filler = torch.empty(FILL, dtype=torch.uint8, device="cuda")
x = torch.randn(1 << 22, device="cuda"); y = x * 2 + 1; z = torch.sin(y)
torch.cuda.synchronize(); print("sum", float(z.sum()))
""",
    "gemm": PRELUDE + r"""
import torch
filler = torch.empty(FILL, dtype=torch.uint8, device="cuda")
a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16); b = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
c = a @ b; torch.cuda.synchronize(); print("sum", float(c.float().sum()))
""",
    "sdpa": PRELUDE + r"""
import torch, torch.nn.functional as F
filler = torch.empty(FILL, dtype=torch.uint8, device="cuda")
q = torch.randn(4, 16, 1024, 64, device="cuda", dtype=torch.bfloat16)
o = F.scaled_dot_product_attention(q, q, q, is_causal=True); torch.cuda.synchronize(); print("sum", float(o.float().sum()))
""",
    "compile": PRELUDE + r"""
import torch
filler = torch.empty(FILL, dtype=torch.uint8, device="cuda")
f = torch.compile(lambda t: torch.sin(t) * 2 + torch.cos(t))
x = torch.randn(1 << 22, device="cuda"); y = f(x); torch.cuda.synchronize(); print("sum", float(y.sum()))
""",
    "graph": PRELUDE + r"""
import torch
filler = torch.empty(FILL, dtype=torch.uint8, device="cuda")
x = torch.randn(1 << 22, device="cuda"); s = torch.cuda.Stream()
with torch.cuda.stream(s):
    y = x * 2  # warm up
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    y = x * 2 + 1
for _ in range(10): g.replay()
torch.cuda.synchronize(); print("sum", float(y.sum()))
""",
    "cupy": PRELUDE + r"""
import cupy
filler = cupy.empty(FILL, dtype=cupy.uint8)
x = cupy.arange(1 << 22, dtype=cupy.float32); y = x * 2 + 1
cupy.cuda.Device().synchronize(); print("sum", float(y.sum()))
""",
    "jax": PRELUDE + r"""
# JAX's own pool sizes itself from cuMemGetInfo and would refuse the filler: the platform allocator
# asks the driver (uvmpool) for every buffer instead.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
os.environ.setdefault("XLA_PYTHON_CLIENT_ALLOCATOR", "platform")
import jax, jax.numpy as jnp
filler = jnp.zeros(FILL, dtype=jnp.uint8).block_until_ready()
x = jnp.arange(1 << 22, dtype=jnp.float32); y = (x * 2 + 1).block_until_ready(); print("sum", float(y.sum()))
""",
}


def run_case(name, lib, limit, fill, out):
    stats = os.path.join(out, f"launch-{name}.json")
    env = dict(os.environ, LD_PRELOAD=os.path.abspath(lib), UVMPOOL_DEVICE_LIMIT=limit, UVMPOOL_STATS_FILE=stats,
               CASE_FILL_BYTES=str(fill))
    r = subprocess.run([sys.executable, "-c", CASES[name]], env=env, capture_output=True, text=True, timeout=300)
    if r.returncode != 0 or not os.path.exists(stats):
        return {"case": name, "ok": False, "error": (r.stdout + r.stderr)[-800:]}
    d = json.load(open(stats))
    p = d["process"]
    hooks = {k: v for k, v in p["hook_calls"].items() if v and (k.startswith("cuLaunch") or k.endswith("Unload"))}
    host_bytes = sum(dev.get("live_host_bytes", 0) if isinstance(dev, dict) else 0 for dev in d.get("devices", []))
    row = {"case": name, "hooks": hooks, "launches_read": p["launches_read"], "launches_unread": p["launches_unread"],
           "launch_pointers": p["launch_pointers"], "launch_host_pointers": p["launch_host_pointers"],
           "launches_in_place": p["launches_in_place"], "param_layouts_asked": p["param_layouts_asked"],
           "spilled_allocations": sum(dev.get("spilled_allocations", 0) for dev in d.get("devices", []) if isinstance(dev, dict))}
    # A case that spilled must show launches given host memory (a graph replay makes no launch call:
    # its kernels are seen while capturing only).
    row["ok"] = sum(hooks.values()) > 0 and p["launches_read"] > 0 and p["launch_pointers"] > 0 and \
        (p["launch_host_pointers"] > 0 or row["spilled_allocations"] == 0)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--limit", default="4G", help="UVMPOOL_DEVICE_LIMIT")
    ap.add_argument("--fill", type=int, default=4 << 30,
                    help="bytes each case allocates first: the whole budget, so that everything after it spills")
    ap.add_argument("--out", default=tempfile.mkdtemp(prefix="launch-routes-"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rows = []
    for name in a.cases.split(","):
        try:
            row = run_case(name, a.lib, a.limit, a.fill, a.out)
        except subprocess.TimeoutExpired:
            row = {"case": name, "ok": False, "error": "timed out"}
        rows.append(row)
        print("UVMPOOL_LAUNCH_ROUTE " + json.dumps(row), flush=True)
    bad = [r["case"] for r in rows if not r["ok"]]
    print(f"UVMPOOL_LAUNCH_ROUTES {'ok' if not bad else 'FAIL'} " + (",".join(bad) if bad else a.cases))
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
