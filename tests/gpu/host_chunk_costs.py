"""Measures what spilling costs on this GPU with host-located VMM chunks (CU_MEM_LOCATION_TYPE_HOST_NUMA
at the device's node, else HOST): pinning (cuMemCreate) per chunk, cuMemMap per chunk, and one
cuMemSetAccess over N mapped chunks, with device access only and with device + host access; also the
same for N = 1 (the cost a single-chunk spill pays). With --size=MiB the handles are that large (a host
extent, as a move to the host maps), so one can see whether the per-mapping costs grow with the bytes.
With --threads=K,... it then times setting access on the largest count's mappings one call each, spread
over K threads: whether a mover could set access on several moves at once.
usage: python3 host_chunk_costs.py [--size=MiB] [--host] [--threads=1,2,4] [chunks ...]
       (default 2 MiB handles; 1 8 64 512 of them)"""
import ctypes, sys, threading, time

from cuda_vmm import Access, Location, Prop, host_location, create_handles, cu, init_device0, map_all, ok, reserve, unmap_all

ctx = init_device0()
loc = host_location()
if "--host" in sys.argv:  # CU_MEM_LOCATION_TYPE_HOST even where a NUMA node is known, to compare
    sys.argv.remove("--host")
    loc = Location(type=2, id=0)
prop = Prop(type=1, location=loc)
args = sys.argv[1:]
size = 2 << 20
for a in [a for a in args if a.startswith("--size=")]:
    size = int(a.split("=", 1)[1]) << 20
    args.remove(a)
threads = []
for a in [a for a in args if a.startswith("--threads=")]:
    threads = [int(k) for k in a.split("=", 1)[1].split(",")]
    args.remove(a)
counts = [int(a) for a in args] or [1, 8, 64, 512]
dev_only = (Access * 1)(Access(location=Location(type=1, id=0), flags=3))
dev_host = (Access * 2)(Access(location=Location(type=1, id=0), flags=3), Access(location=Location(type=2, id=0), flags=3))
granularity = [ctypes.c_size_t(), ctypes.c_size_t()]
for option in (0, 1):  # CU_MEM_ALLOC_GRANULARITY_MINIMUM, _RECOMMENDED
    ok(cu.cuMemGetAllocationGranularity(ctypes.byref(granularity[option]), ctypes.byref(prop), option), "granularity")
print(f"host location type {loc.type} id {loc.id}, handles of {size >> 20} MiB (granularity: minimum "
      f"{granularity[0].value >> 10} KiB, recommended {granularity[1].value >> 10} KiB)")
print("| chunks | cuMemCreate per chunk | cuMemMap per chunk | setaccess dev per chunk | again at a 2nd address | unmap (dev) per chunk "
      "| setaccess dev+host per chunk | unmap (dev+host) per chunk |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")


def mapped(handles, access, count):
    """Maps the handles one after another at a fresh range and sets access over it: (va, map s, access s)."""
    va = reserve(len(handles) * size, size)
    a = time.perf_counter()
    map_all(va, handles, size)
    b = time.perf_counter()
    ok(cu.cuMemSetAccess(va, ctypes.c_size_t(len(handles) * size), access, ctypes.c_size_t(count)), "access")
    return va, b - a, time.perf_counter() - b


def unmapped(va, n):
    """Unmaps the n handles mapped at va and frees the range: seconds spent unmapping."""
    a = time.perf_counter()
    unmap_all(va, n, size)
    b = time.perf_counter()
    cu.cuMemAddressFree(va, ctypes.c_size_t(n * size))
    return b - a


us = lambda seconds, n: f"{seconds / n * 1e6:.1f} us"
for n in counts:
    t0 = time.perf_counter()
    handles = create_handles(n, size, prop)
    create = time.perf_counter() - t0
    # Device access only, as the pool maps them; the second mapping is how a move to the host maps a
    # handle that a staging mapping already holds.
    first, map_s, access_s = mapped(handles, dev_only, 1)
    second, _, again_s = mapped(handles, dev_only, 1)
    unmap_s = unmapped(second, n)
    unmapped(first, n)
    both, _, both_s = mapped(handles, dev_host, 2)
    both_unmap_s = unmapped(both, n)
    print(f"| {n} | {create / n * 1e6:.0f} us | {us(map_s, n)} | {us(access_s, n)} | {us(again_s, n)} | {us(unmap_s, n)} "
          f"| {us(both_s, n)} | {us(both_unmap_s, n)} |", flush=True)
    for h in handles:
        cu.cuMemRelease(h)


def spread_access(n, k):
    """Seconds to set device access on n fresh mappings, one cuMemSetAccess each, from k threads."""
    handles = create_handles(n, size, prop)
    va = reserve(n * size, size)
    map_all(va, handles, size)
    errors = []

    def work(t):
        cu.cuCtxSetCurrent(ctx)
        for i in range(t, n, k):
            r = cu.cuMemSetAccess(ctypes.c_ulonglong(va.value + i * size), ctypes.c_size_t(size), dev_only, ctypes.c_size_t(1))
            if r != 0: errors.append(r)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(k)]
    a = time.perf_counter()
    for w in workers: w.start()
    for w in workers: w.join()
    seconds = time.perf_counter() - a
    ok(errors[0] if errors else 0, "access from threads")
    unmapped(va, n)
    for h in handles:
        cu.cuMemRelease(h)
    return seconds


if threads:
    n = max(counts)
    print(f"| threads | cuMemSetAccess on {n} mappings of {size >> 20} MiB, wall | per mapping |")
    print("| --- | --- | --- |")
    for k in threads:
        seconds = spread_access(n, k)
        print(f"| {k} | {seconds * 1e3:.2f} ms | {us(seconds, n)} |", flush=True)
