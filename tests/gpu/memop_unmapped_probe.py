# Whether the driver checks a stream memory operation's address when it is called (as it does a
# memset's: tests/gpu/remap_enqueue.py), on a reserved range with nothing mapped and on one unmapped
# after use. Each case in a child process (a fault there is an answer).
import ctypes, multiprocessing as mp

def case(name):
    cu = ctypes.CDLL("libcuda.so.1")
    assert cu.cuInit(0) == 0
    dev = ctypes.c_int(); cu.cuDeviceGet(ctypes.byref(dev), 0)
    ctx = ctypes.c_void_p(); cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev); cu.cuCtxSetCurrent(ctx)
    size = 2 << 20
    va = ctypes.c_uint64()
    assert cu.cuMemAddressReserve(ctypes.byref(va), ctypes.c_size_t(size), ctypes.c_size_t(0), ctypes.c_uint64(0), ctypes.c_uint64(0)) == 0
    if "after use" in name:
        class Loc(ctypes.Structure): _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]
        class Prop(ctypes.Structure):
            _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", Loc),
                        ("win32HandleMetaData", ctypes.c_void_p), ("compressionType", ctypes.c_ubyte),
                        ("gpuDirectRDMACapable", ctypes.c_ubyte), ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]
        class Access(ctypes.Structure): _fields_ = [("location", Loc), ("flags", ctypes.c_int)]
        prop = Prop(); prop.type = 1; prop.location = Loc(1, 0)  # pinned, device 0
        h = ctypes.c_uint64()
        assert cu.cuMemCreate(ctypes.byref(h), ctypes.c_size_t(size), ctypes.byref(prop), ctypes.c_uint64(0)) == 0
        assert cu.cuMemMap(va, ctypes.c_size_t(size), ctypes.c_size_t(0), h, ctypes.c_uint64(0)) == 0
        acc = Access(Loc(1, 0), 3)
        assert cu.cuMemSetAccess(va, ctypes.c_size_t(size), ctypes.byref(acc), ctypes.c_size_t(1)) == 0
        assert cu.cuStreamWriteValue32_v2(None, va, ctypes.c_uint32(1), 0) == 0
        assert cu.cuCtxSynchronize() == 0
        assert cu.cuMemUnmap(va, ctypes.c_size_t(size)) == 0
    if name.startswith("write"):
        r = cu.cuStreamWriteValue32_v2(None, va, ctypes.c_uint32(5), 0)
    else:
        r = cu.cuStreamWaitValue32_v2(None, va, ctypes.c_uint32(0), 0)  # GEQ 0: met by any word it can read
    s = cu.cuCtxSynchronize()
    print(f"{name}: call {r}, then synchronize {s}", flush=True)

if __name__ == "__main__":
    for name in ["write, never mapped", "wait, never mapped", "write, unmapped after use", "wait, unmapped after use"]:
        p = mp.get_context("spawn").Process(target=case, args=(name,))
        p.start(); p.join(60)
        if p.exitcode != 0: print(f"{name}: child ended with {p.exitcode}", flush=True)
