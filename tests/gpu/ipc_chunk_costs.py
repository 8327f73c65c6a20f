"""What making pool chunks exportable costs (uvmpool's CUDA IPC, docs/architecture.md): cuMemCreate,
cuMemMap, cuMemSetAccess, cuMemUnmap and cuMemRelease of 2 MiB chunks created with
requestedHandleTypes = 0 against CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, for a device chunk and a
host chunk (HOST_NUMA at the device's node); then cuMemExportToShareableHandle of one chunk (what an
exporter pays per chunk when an importer opens a handle) and cuMemImportFromShareableHandle of the fd
in the same process (a lower bound for what an importer pays).
usage: python3 ipc_chunk_costs.py [chunks] [rounds]   (default 64 chunks, 5 rounds; the median round)"""
import ctypes, os, statistics, sys, time

from cuda_vmm import Access, Location, Prop, cu, init_device0, ok

POSIX_FD = 1
init_device0()
numa = ctypes.c_int(-1)
cu.cuDeviceGetAttribute(ctypes.byref(numa), 134, 0)  # HOST_NUMA_ID
supported = ctypes.c_int(0)
cu.cuDeviceGetAttribute(ctypes.byref(supported), 102, 0)  # HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
size = 2 << 20
n = int(sys.argv[1]) if len(sys.argv) > 1 else 64
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
access = (Access * 1)(Access(location=Location(type=1, id=0), flags=3))
print(f"POSIX fd handles supported: {supported.value}; host NUMA id {numa.value}; {n} chunks of 2 MiB, median of {rounds} rounds")


def one_round(loc, types):
    prop = Prop(type=1, requestedHandleTypes=types, location=loc)
    handles = []
    t0 = time.perf_counter()
    for _ in range(n):
        h = ctypes.c_ulonglong()
        r = cu.cuMemCreate(ctypes.byref(h), ctypes.c_size_t(size), ctypes.byref(prop), ctypes.c_ulonglong(0))
        if r != 0:
            for x in handles: cu.cuMemRelease(x)
            return None, r
        handles.append(h)
    t1 = time.perf_counter()
    va = ctypes.c_ulonglong()
    ok(cu.cuMemAddressReserve(ctypes.byref(va), ctypes.c_size_t(n * size), ctypes.c_size_t(size), ctypes.c_ulonglong(0), ctypes.c_ulonglong(0)), "reserve")
    for i, h in enumerate(handles):
        ok(cu.cuMemMap(ctypes.c_ulonglong(va.value + i * size), ctypes.c_size_t(size), ctypes.c_size_t(0), h, ctypes.c_ulonglong(0)), "map")
    t2 = time.perf_counter()
    ok(cu.cuMemSetAccess(va, ctypes.c_size_t(n * size), access, ctypes.c_size_t(1)), "access")
    t3 = time.perf_counter()
    export = imp = float("nan")
    if types:
        fd = ctypes.c_int(-1)
        a = time.perf_counter()
        ok(cu.cuMemExportToShareableHandle(ctypes.byref(fd), handles[0], POSIX_FD, ctypes.c_ulonglong(0)), "export")
        b = time.perf_counter()
        h2 = ctypes.c_ulonglong()
        ok(cu.cuMemImportFromShareableHandle(ctypes.byref(h2), ctypes.c_void_p(fd.value), POSIX_FD), "import")
        c = time.perf_counter()
        cu.cuMemRelease(h2)
        os.close(fd.value)
        export, imp = (b - a) * 1e6, (c - b) * 1e6
    t4 = time.perf_counter()
    for i in range(n):
        cu.cuMemUnmap(ctypes.c_ulonglong(va.value + i * size), ctypes.c_size_t(size))
    t5 = time.perf_counter()
    for h in handles:
        cu.cuMemRelease(h)
    t6 = time.perf_counter()
    cu.cuMemAddressFree(va, ctypes.c_size_t(n * size))
    us = lambda s: s / n * 1e6
    return [us(t1 - t0), us(t2 - t1), us(t3 - t2), us(t5 - t4), us(t6 - t5), export, imp], 0


print("| location | handle types | cuMemCreate | cuMemMap | cuMemSetAccess | cuMemUnmap | cuMemRelease | export 1 chunk | import 1 chunk |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
locations = [("device", Location(type=1, id=0))]
if numa.value >= 0: locations.append(("host NUMA", Location(type=3, id=numa.value)))
for name, loc in locations:
    for types in (0, POSIX_FD):
        rows = []
        for _ in range(rounds):
            row, err = one_round(loc, types)
            if row is None:
                print(f"| {name} | {types} | refused: CUresult {err} | | | | | | |", flush=True)
                break
            rows.append(row)
        if rows:
            med = [statistics.median(col) for col in zip(*rows)]
            print(f"| {name} | {'POSIX fd' if types else 'none'} | " + " | ".join(f"{v:.1f} us" for v in med) + " |", flush=True)
