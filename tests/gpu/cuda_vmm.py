"""The driver's VMM types and the steps the ctypes probes in tests/gpu share (vmm_costs.py,
host_chunk_costs.py, unmap_costs.py, ipc_handle_costs.py, remap_stall.py, remap_under_load.py): a
context made current on device 0, where host memory lives, handles made, a range reserved, handles
mapped into it side by side and unmapped one by one."""
import ctypes, sys, time

cu = ctypes.CDLL("libcuda.so.1")

def take_option(args, name, default, parse=int):
    """The value of `--name=V` in args (removed from it), parsed; `default` when absent."""
    value = default
    for a in [a for a in args if a.startswith(f"--{name}=")]:
        value = parse(a.split("=", 1)[1])
        args.remove(a)
    return value

def take_flag(args, name):
    """Whether `--name` is in args (removed from it)."""
    present = f"--{name}" in args
    while f"--{name}" in args:
        args.remove(f"--{name}")
    return present

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

def host_location(device=0):
    """Where the pool puts host memory: the device's host NUMA node (CU_MEM_LOCATION_TYPE_HOST_NUMA), else
    CU_MEM_LOCATION_TYPE_HOST."""
    numa = ctypes.c_int(-1)
    cu.cuDeviceGetAttribute(ctypes.byref(numa), 134, device)  # CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID
    return Location(type=3, id=numa.value) if numa.value >= 0 else Location(type=2, id=0)

def create_handles(n, size, prop):
    """n handles of `size` bytes each, made with `prop` (a Prop)."""
    handles = []
    for _ in range(n):
        h = ctypes.c_ulonglong()
        ok(cu.cuMemCreate(ctypes.byref(h), ctypes.c_size_t(size), ctypes.byref(prop), ctypes.c_ulonglong(0)), "create")
        handles.append(h)
    return handles

def reserve(size, align):
    """A reserved range of `size` bytes (its address, a c_ulonglong)."""
    va = ctypes.c_ulonglong()
    ok(cu.cuMemAddressReserve(ctypes.byref(va), ctypes.c_size_t(size), ctypes.c_size_t(align), ctypes.c_ulonglong(0),
                              ctypes.c_ulonglong(0)), "reserve")
    return va

def map_all(va, handles, size):
    """Each handle mapped at va + i * size, one cuMemMap each."""
    for i, h in enumerate(handles):
        ok(cu.cuMemMap(ctypes.c_ulonglong(va.value + i * size), ctypes.c_size_t(size), ctypes.c_size_t(0), h,
                       ctypes.c_ulonglong(0)), "map")

def unmap_all(va, n, size):
    """The n mappings of `size` bytes from va unmapped, one cuMemUnmap each."""
    for i in range(n):
        ok(cu.cuMemUnmap(ctypes.c_ulonglong(va.value + i * size), ctypes.c_size_t(size)), "unmap")

def remap_round(handles, size, access):
    """Maps every handle at a fresh range, sets `access` (an Access) one mapping at a time, unmaps them
    and frees the range, as a move's commits do: seconds spent."""
    t0 = time.perf_counter()
    n = len(handles)
    va = reserve(n * size, size)
    map_all(va, handles, size)
    for i in range(n):
        ok(cu.cuMemSetAccess(ctypes.c_ulonglong(va.value + i * size), ctypes.c_size_t(size), ctypes.byref(access),
                             ctypes.c_size_t(1)), "access")
    unmap_all(va, n, size)
    ok(cu.cuMemAddressFree(va, ctypes.c_size_t(n * size)), "free range")
    return time.perf_counter() - t0
