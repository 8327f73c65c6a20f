"""Measures whether one cuMemUnmap over a range of N adjacent mappings costs less than N calls, one a
mapping, for device and for host-located (HOST_NUMA, else HOST) 2 MiB handles: a move's commit unmaps
every piece of the range it moves (src/pool/vmm.cpp, Vmm::remap), and at about 100 us a mapping the
remaps were a third of a capped training step under tiering (docs/gpu-results.md, 2026-11-29).
Each case maps N handles, grants device access over the range in one call, then unmaps, timed; the
median of several rounds. usage: python3 unmap_costs.py [N ...]   (default 4 16 64)"""
import ctypes, statistics, sys, time

from cuda_vmm import Access, Location, Prop, host_location, create_handles, cu, init_device0, map_all, ok, reserve

init_device0()
host = host_location()
device = Location(type=1, id=0)
acc = Access(location=Location(type=1, id=0), flags=3)
size = 2 << 20
counts = [int(a) for a in sys.argv[1:]] or [4, 16, 64]
rounds = 5

print("| handles | N | N calls, us a mapping | one call, us a mapping | one call / N calls |")
print("| --- | --- | --- | --- | --- |")
for name, loc in (("device", device), ("host", host)):
    prop = Prop(type=1, location=loc)
    for n in counts:
        handles = create_handles(n, size, prop)
        va = reserve(n * size, size)

        def mapped():
            map_all(va, handles, size)
            ok(cu.cuMemSetAccess(va, ctypes.c_size_t(n * size), ctypes.byref(acc), ctypes.c_size_t(1)), "access")

        each, whole = [], []
        for _ in range(rounds):
            mapped()
            t0 = time.perf_counter()
            for i in range(n):
                ok(cu.cuMemUnmap(ctypes.c_ulonglong(va.value + i * size), ctypes.c_size_t(size)), "unmap one")
            each.append((time.perf_counter() - t0) / n * 1e6)
            mapped()
            t0 = time.perf_counter()
            ok(cu.cuMemUnmap(va, ctypes.c_size_t(n * size)), "unmap all")
            whole.append((time.perf_counter() - t0) / n * 1e6)
        e, w = statistics.median(each), statistics.median(whole)
        print(f"| {name} | {n} | {e:.1f} | {w:.1f} | {w / e:.2f} |", flush=True)
        cu.cuMemAddressFree(va, ctypes.c_size_t(n * size))
        for h in handles:
            cu.cuMemRelease(h)
