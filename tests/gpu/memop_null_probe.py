# What driver 580 does with memory-operation calls given a null array (each in a child process: a
# crash there is an answer). Prints one line per case.
import ctypes, multiprocessing as mp

def case(name):
    cu = ctypes.CDLL("libcuda.so.1")
    def ok(r, what):
        if r != 0: raise SystemExit(f"{what} -> {r}")
    ok(cu.cuInit(0), "init")
    dev = ctypes.c_int(); ok(cu.cuDeviceGet(ctypes.byref(dev), 0), "dev")
    ctx = ctypes.c_void_p(); ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "retain")
    ok(cu.cuCtxSetCurrent(ctx), "set")
    if name == "stream count 1, null":
        r = cu.cuStreamBatchMemOp_v2(None, 1, None, 0)
    elif name == "stream count 0, null":
        r = cu.cuStreamBatchMemOp_v2(None, 0, None, 0)
    elif name == "stream count 0, array":
        arr = (ctypes.c_uint64 * 6)()
        r = cu.cuStreamBatchMemOp_v2(None, 0, arr, 0)
    else:
        graph = ctypes.c_void_p(); ok(cu.cuGraphCreate(ctypes.byref(graph), 0), "graph")
        class P(ctypes.Structure):
            _fields_ = [("ctx", ctypes.c_void_p), ("count", ctypes.c_uint), ("arr", ctypes.c_void_p), ("flags", ctypes.c_uint)]
        node = ctypes.c_void_p()
        count = 1 if "count 1" in name else 0
        p = P(ctx, count, None, 0)
        r = cu.cuGraphAddBatchMemOpNode(ctypes.byref(node), graph, None, ctypes.c_size_t(0), ctypes.byref(p))
    sync = cu.cuCtxSynchronize()
    print(f"{name}: returned {r}, then synchronize {sync}", flush=True)

if __name__ == "__main__":
    for name in ["stream count 1, null", "stream count 0, null", "stream count 0, array",
                 "graph node count 1, null", "graph node count 0, null"]:
        p = mp.get_context("spawn").Process(target=case, args=(name,))
        p.start(); p.join(60)
        if p.exitcode != 0: print(f"{name}: child ended with {p.exitcode}", flush=True)
