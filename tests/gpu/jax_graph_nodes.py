"""Which graph calls JAX's command buffers make, and how uvmpool reads their launches (measured on a GPU).

A jitted loop (fori_loop of a 2048x2048 matmul, tanh and add) run 20 times under uvmpool preloaded; prints
the result's sum (compare with a run without uvmpool), every graph and launch hook uvmpool counted, and
its graph-launch figures. XLA builds command buffers only when told to; with them and memory spilled:
  XLA_PYTHON_CLIENT_PREALLOCATE=false \\
  XLA_FLAGS="--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,WHILE,CONDITIONAL --xla_gpu_graph_min_graph_size=1" \\
  UVMPOOL_DEVICE_LIMIT=40M UVMPOOL_DEVICE_HEADROOM=0 UVMPOOL_REPORT_HOST=1 \\
  LD_PRELOAD=.carry/build/lib/libuvmpool.so python3 tests/gpu/jax_graph_nodes.py
(UVMPOOL_REPORT_HOST: JAX's allocator sizes itself from cuMemGetInfo, and fails at the device limit
otherwise.) Results: docs/gpu-results.md, forty-ninth session."""
import ctypes, json
import jax, jax.numpy as jnp

uvmpool = ctypes.CDLL(None)  # the preloaded library's symbols, if any
loaded = hasattr(uvmpool, "uvmpool_hook_calls")
if loaded:
    uvmpool.uvmpool_hook_calls.restype = ctypes.c_ulonglong
    uvmpool.uvmpool_hook_calls.argtypes = [ctypes.c_char_p]
    uvmpool.uvmpool_stats_json.restype = ctypes.c_ulonglong
    uvmpool.uvmpool_stats_json.argtypes = [ctypes.c_char_p, ctypes.c_ulonglong]
HOOKS = ["cuGraphCreate", "cuGraphAddKernelNode", "cuGraphAddMemcpyNode", "cuGraphAddMemsetNode", "cuGraphAddNode",
         "cuGraphKernelNodeSetParams", "cuGraphExecKernelNodeSetParams", "cuGraphExecMemcpyNodeSetParams",
         "cuGraphExecMemsetNodeSetParams", "cuGraphExecNodeSetParams", "cuGraphNodeSetParams",
         "cuStreamBeginCapture", "cuStreamBeginCaptureToGraph", "cuGraphInstantiate", "cuGraphInstantiateWithFlags",
         "cuGraphInstantiateWithParams", "cuGraphExecUpdate", "cuGraphLaunch", "cuLaunchKernel", "cuLaunchKernelEx"]
FIGURES = ["graph_launches_read", "graph_launches_unread", "launches_captured", "launches_read", "launches_in_place"]


@jax.jit
def step(x, w):
    return jax.lax.fori_loop(0, 8, lambda i, x: jnp.tanh(x @ w) + 0.5 * x, x)


def figure(stats, key):
    """The first value named `key` anywhere in uvmpool's statistics."""
    if isinstance(stats, dict):
        if key in stats:
            return stats[key]
        for v in stats.values():
            found = figure(v, key)
            if found is not None:
                return found
    return None


x = jnp.ones((2048, 2048), jnp.float32)
w = jnp.ones((2048, 2048), jnp.float32) * 1e-3
for _ in range(20):
    x = step(x, w)
print("jax", jax.__version__, "sum", float(jnp.sum(x)))
if not loaded:
    raise SystemExit("uvmpool not loaded: the sum only")
print("hooks:", ", ".join(f"{n} {v}" for n in HOOKS if (v := uvmpool.uvmpool_hook_calls(n.encode()))))
size = uvmpool.uvmpool_stats_json(None, 0) + 4096
text = ctypes.create_string_buffer(size)
uvmpool.uvmpool_stats_json(text, size)
stats = json.loads(text.value.decode())
print("figures:", ", ".join(f"{k} {figure(stats, k)}" for k in FIGURES))
