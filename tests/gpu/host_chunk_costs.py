"""Measures what spilling costs on this GPU with host-located VMM chunks (CU_MEM_LOCATION_TYPE_HOST_NUMA
at the device's node, else HOST): pinning (cuMemCreate) per chunk, cuMemMap per chunk, and one
cuMemSetAccess over N mapped chunks, with device access only and with device + host access; also the
same for N = 1 (the cost a single-chunk spill pays).
usage: python3 host_chunk_costs.py [chunks ...]   (default 1 8 64 512, 2 MiB chunks)"""
import ctypes, sys, time

from cuda_vmm import Access, Location, Prop, create_handles, cu, init_device0, map_all, ok, reserve

init_device0()
numa = ctypes.c_int(-1)
cu.cuDeviceGetAttribute(ctypes.byref(numa), 134, 0)  # HOST_NUMA_ID
loc = Location(type=3, id=numa.value) if numa.value >= 0 else Location(type=2, id=0)
prop = Prop(type=1, location=loc)
size = 2 << 20
counts = [int(a) for a in sys.argv[1:]] or [1, 8, 64, 512]
dev_only = (Access * 1)(Access(location=Location(type=1, id=0), flags=3))
dev_host = (Access * 2)(Access(location=Location(type=1, id=0), flags=3), Access(location=Location(type=2, id=0), flags=3))
print(f"host location type {loc.type} id {loc.id}")
print("| chunks | cuMemCreate per chunk | cuMemMap per chunk | setaccess dev per chunk | setaccess dev+host per chunk | unmap per chunk |")
print("| --- | --- | --- | --- | --- | --- |")
for n in counts:
    t0 = time.perf_counter()
    handles = create_handles(n, size, prop)
    t1 = time.perf_counter()
    row = [(t1 - t0) / n * 1e6]
    for access, count in ((dev_only, 1), (dev_host, 2)):
        va = reserve(n * size, size)
        a = time.perf_counter()
        map_all(va, handles, size)
        b = time.perf_counter()
        ok(cu.cuMemSetAccess(va, ctypes.c_size_t(n * size), access, ctypes.c_size_t(count)), "access")
        c = time.perf_counter()
        for i in range(n):
            cu.cuMemUnmap(ctypes.c_ulonglong(va.value + i * size), ctypes.c_size_t(size))
        d = time.perf_counter()
        cu.cuMemAddressFree(va, ctypes.c_size_t(n * size))
        if count == 1: row.append((b - a) / n * 1e6)
        row.append((c - b) / n * 1e6)
        if count == 2: row.append((d - c) / n * 1e6)
    print(f"| {n} | {row[0]:.0f} us | {row[1]:.1f} us | {row[2]:.1f} us | {row[3]:.1f} us | {row[4]:.1f} us |", flush=True)
    for h in handles:
        cu.cuMemRelease(h)
