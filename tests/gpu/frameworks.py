"""Runs a small real workload of one framework and prints what uvmpool saw (a UVMPOOL_PROBE line).
usage: python3 frameworks.py torch-default|torch-expandable|torch-async|cupy|jax"""
import ctypes, os, sys

mode = sys.argv[1]
if mode == "torch-expandable":
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
elif mode == "torch-async":
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

FIELDS = ["struct_size", "allocations", "frees", "bytes_allocated", "resolved_via_dlsym",
          "resolved_via_getproc", "calls_via_export", "pool_allocations", "driver_allocations",
          "pool_held_bytes", "pool_live_bytes", "pool_peak_held_bytes", "pool_peak_live_bytes"]

class Stats(ctypes.Structure):
    _fields_ = [(f, ctypes.c_ulonglong) for f in FIELDS]

def probe():
    s = Stats(struct_size=ctypes.sizeof(Stats))
    loaded = 0
    for lib in (None, "libcuda.so.1"):
        try:
            fn = getattr(ctypes.CDLL(lib, mode=os.RTLD_NOLOAD | os.RTLD_LOCAL) if lib else ctypes.CDLL(None),
                         "uvmpool_get_stats")
        except (OSError, AttributeError):
            continue
        loaded = int(fn(ctypes.byref(s)) == 0)
        break
    print(f"UVMPOOL_PROBE program={mode} loaded={loaded} allocations={s.allocations} frees={s.frees} "
          f"bytes={s.bytes_allocated} getproc={s.resolved_via_getproc} dlsym={s.resolved_via_dlsym} "
          f"export={s.calls_via_export} pool={s.pool_allocations} driver={s.driver_allocations} "
          f"peak_held={s.pool_peak_held_bytes} peak_live={s.pool_peak_live_bytes}", flush=True)

if mode.startswith("torch"):
    import torch
    torch.manual_seed(0)
    keep = [torch.empty(size, device="cuda") for size in (1, 1000, 1 << 20, 1 << 24)]
    x = torch.randn(2048, 2048, device="cuda")
    y = (x @ x).relu().sum()
    ref = (x.cpu().double() @ x.cpu().double()).relu().sum()
    assert abs(y.item() - ref.item()) <= 1e-3 * abs(ref.item()), (y.item(), ref.item())
    del keep
    torch.cuda.synchronize()
    print(f"{mode}: ok, allocator {torch.cuda.get_allocator_backend()}, "
          f"peak {torch.cuda.max_memory_allocated() >> 20} MiB")
elif mode == "cupy":
    import cupy
    x = cupy.arange(1 << 24, dtype=cupy.float32)
    m = cupy.random.default_rng(0).standard_normal((1024, 1024), dtype=cupy.float32)
    assert float((x * 2).sum()) == float(2 * x.sum())
    p = m @ m
    assert abs(float(p[3, 5]) - float((cupy.asnumpy(m)[3] * cupy.asnumpy(m)[:, 5]).sum())) < 1e-2
    print("cupy: ok")
elif mode == "jax":
    import jax, jax.numpy as jnp
    x = jax.random.normal(jax.random.PRNGKey(0), (2048, 2048))
    y = float((x @ x).sum())
    assert y == y, "nan"
    assert jax.devices()[0].platform == "gpu", jax.devices()
    print(f"jax: ok on {jax.devices()[0]}")
else:
    sys.exit(f"unknown mode {mode}")
probe()
