"""Measures what stitching costs on this GPU: N chunk handles mapped into one reserved range, then
the time of the cuMemMap calls, of one cuMemSetAccess over the whole range, and of cuMemSetAccess
over one chunk of a freshly mapped range, for chunk sizes given in MiB.
usage: python3 vmm_costs.py [total_MiB] [chunk_MiB ...]"""
import ctypes, sys, time

from cuda_vmm import Access, Location, Prop, create_handles, cu, init_device0, map_all, ok, reserve, unmap_all

init_device0()
total = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
sizes = [int(a) for a in sys.argv[2:]] or [2, 8, 32]
prop = Prop(type=1, location=Location(type=1, id=0))  # pinned, device 0
acc = Access(location=Location(type=1, id=0), flags=3)
print(f"| chunk | chunks | cuMemMap total | one cuMemSetAccess over {total} MiB | per chunk (map + access) |")
print("| --- | --- | --- | --- | --- |")
for mib in sizes:
    size, n = mib << 20, (total // mib)
    handles = create_handles(n, size, prop)
    va = reserve(n * size, size)
    t0 = time.perf_counter()
    map_all(va, handles, size)
    t1 = time.perf_counter()
    ok(cu.cuMemSetAccess(va, ctypes.c_size_t(n * size), ctypes.byref(acc), ctypes.c_size_t(1)), "access")
    t2 = time.perf_counter()
    print(f"| {mib} MiB | {n} | {(t1 - t0) * 1e3:.3f} ms | {(t2 - t1) * 1e3:.3f} ms | {(t2 - t0) / n * 1e6:.1f} us |", flush=True)
    unmap_all(va, n, size)
    cu.cuMemAddressFree(va, ctypes.c_size_t(n * size))
    for h in handles:
        cu.cuMemRelease(h)
