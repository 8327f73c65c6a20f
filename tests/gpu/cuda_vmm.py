"""The driver's VMM types for the ctypes probes in tests/gpu (vmm_costs.py, host_chunk_costs.py), and
a context made current on device 0."""
import ctypes, sys

cu = ctypes.CDLL("libcuda.so.1")

def ok(r, what):
    if r != 0: sys.exit(f"{what} failed: {r}")

class Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]
class Prop(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", ctypes.c_ubyte * 8)]
class Access(ctypes.Structure):
    _fields_ = [("location", Location), ("flags", ctypes.c_int)]

def init_device0():
    ok(cu.cuInit(0), "cuInit")
    ctx = ctypes.c_void_p()
    ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0), "retain")
    ok(cu.cuCtxSetCurrent(ctx), "set current")
    return ctx
