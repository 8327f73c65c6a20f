# How many operations one cuStreamBatchMemOp_v2 takes (cuda.h: "must be less than 256"), and whether a
# batch the driver refuses ran any of its operations.
import ctypes
cu = ctypes.CDLL("libcuda.so.1")
assert cu.cuInit(0) == 0
dev = ctypes.c_int(); cu.cuDeviceGet(ctypes.byref(dev), 0)
ctx = ctypes.c_void_p(); cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev); cu.cuCtxSetCurrent(ctx)
buf = ctypes.c_uint64(); assert cu.cuMemAlloc_v2(ctypes.byref(buf), ctypes.c_size_t(1 << 20)) == 0
class Op(ctypes.Structure):  # CUstreamBatchMemOpParams: 48 bytes; writeValue = {op, address, value, flags, alias}
    _fields_ = [("operation", ctypes.c_uint32), ("pad0", ctypes.c_uint32), ("address", ctypes.c_uint64),
                ("value", ctypes.c_uint64), ("flags", ctypes.c_uint32), ("pad1", ctypes.c_uint32), ("alias", ctypes.c_uint64), ("pad2", ctypes.c_uint64)]
assert ctypes.sizeof(Op) == 48
for count in [255, 256, 257, 1000, 4096]:
    cu.cuMemsetD32_v2(buf, ctypes.c_uint32(0), ctypes.c_size_t(4096)); cu.cuCtxSynchronize()
    ops = (Op * count)()
    for i in range(count):
        ops[i].operation = 2  # WRITE_VALUE_32
        ops[i].address = buf.value + 4 * i
        ops[i].value = 7
    r = cu.cuStreamBatchMemOp_v2(None, ctypes.c_uint(count), ops, ctypes.c_uint(0))
    s = cu.cuCtxSynchronize()
    out = (ctypes.c_uint32 * count)()
    cu.cuMemcpyDtoH_v2(out, buf, ctypes.c_size_t(4 * count))
    print(f"count {count}: returned {r}, synchronize {s}, words written {sum(1 for v in out if v == 7)}")
