# Whether the CUDA 11.0-11.6 stream memory operations (the "v1" API) can be used on this GPU, and what
# cuGetProcAddress answers for their names at 11.0 and 11.7.
import ctypes
cu = ctypes.CDLL("libcuda.so.1")
assert cu.cuInit(0) == 0
dev = ctypes.c_int(); cu.cuDeviceGet(ctypes.byref(dev), 0)
for name, attr in [("CAN_USE_STREAM_MEM_OPS_V1", 92), ("CAN_USE_64_BIT_STREAM_MEM_OPS_V1", 93),
                   ("CAN_USE_STREAM_WAIT_VALUE_NOR_V1", 94), ("CAN_USE_64_BIT_STREAM_MEM_OPS", 122),
                   ("CAN_USE_STREAM_WAIT_VALUE_NOR", 123)]:
    v = ctypes.c_int(-1); r = cu.cuDeviceGetAttribute(ctypes.byref(v), attr, dev)
    print(f"{name} ({attr}): {v.value} (status {r})")
gpa = cu.cuGetProcAddress_v2
gpa.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_uint64, ctypes.POINTER(ctypes.c_int)]
for base in ["cuStreamWaitValue32", "cuStreamWriteValue32", "cuStreamBatchMemOp"]:
    for version in [11000, 11060, 11070, 12000, 13000]:
        p = ctypes.c_void_p(); st = ctypes.c_int(-1)
        r = gpa(base.encode(), ctypes.byref(p), version, 0, ctypes.byref(st))
        names = {}
        for sym in [base, base + "_v2"]:
            try: names[ctypes.cast(getattr(cu, sym), ctypes.c_void_p).value] = sym
            except AttributeError: pass
        print(f"{base} at {version}: status {r}/{st.value}, {names.get(p.value, hex(p.value or 0))}")
