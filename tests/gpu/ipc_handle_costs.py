"""Measures what making pool chunks exportable costs on this GPU (issue 17, item 10: CUDA IPC of pool
memory needs each chunk's shareable handle, so chunks would be created with the POSIX file-descriptor
handle type): cuMemCreate, cuMemMap, cuMemSetAccess, cuMemUnmap and cuMemRelease per chunk with
requestedHandleTypes 0 against CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, for device chunks and for
host-located chunks (HOST_NUMA at the device's node, else HOST), then cuMemExportToShareableHandle and
cuMemImportFromShareableHandle per chunk (the import in a forked child, as another process does it).
Every figure is the mean over the chunks, in microseconds; rows alternate the two handle types so
that drift in the host's speed falls on both alike.
usage: python3 ipc_handle_costs.py [chunks] [chunk MiB ...]   (default 64 chunks of 2 and 32 MiB)"""
import ctypes, os, subprocess, sys, time

from cuda_vmm import Access, Location, Prop, host_location, cu, init_device0, ok, unmap_all

POSIX_FD = 1
init_device0()
if len(sys.argv) > 1 and sys.argv[1] == "--import":  # the importing process: mean microseconds per fd
    fds = [int(a) for a in sys.argv[2:]]
    imported = []
    a = time.perf_counter()
    for fd in fds:
        h = ctypes.c_ulonglong()
        ok(cu.cuMemImportFromShareableHandle(ctypes.byref(h), ctypes.c_void_p(fd), ctypes.c_int(POSIX_FD)), "import")
        imported.append(h)
    b = time.perf_counter()
    print((b - a) / len(fds) * 1e6)
    for h in imported:
        cu.cuMemRelease(h)
    sys.exit(0)
host_loc = host_location()
dev_loc = Location(type=1, id=0)
n = int(sys.argv[1]) if len(sys.argv) > 1 else 64
sizes = [int(a) << 20 for a in sys.argv[2:]] or [2 << 20, 32 << 20]
access = (Access * 1)(Access(location=Location(type=1, id=0), flags=3))
free, total = ctypes.c_size_t(), ctypes.c_size_t()
ok(cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo")


def us(t0, t1, count):
    return (t1 - t0) / count * 1e6


def cycle(loc, size, handle_type):
    """create, map, set access, unmap, release n chunks; returns per-chunk costs and the handles'
    export/import costs (when exportable)."""
    prop = Prop(type=1, requestedHandleTypes=handle_type, location=loc)
    handles = []
    t0 = time.perf_counter()
    for _ in range(n):
        h = ctypes.c_ulonglong()
        ok(cu.cuMemCreate(ctypes.byref(h), ctypes.c_size_t(size), ctypes.byref(prop), ctypes.c_ulonglong(0)), "create")
        handles.append(h)
    t1 = time.perf_counter()
    va = ctypes.c_ulonglong()
    ok(cu.cuMemAddressReserve(ctypes.byref(va), ctypes.c_size_t(n * size), ctypes.c_size_t(size), ctypes.c_ulonglong(0),
                              ctypes.c_ulonglong(0)), "reserve")
    for i, h in enumerate(handles):
        ok(cu.cuMemMap(ctypes.c_ulonglong(va.value + i * size), ctypes.c_size_t(size), ctypes.c_size_t(0), h,
                       ctypes.c_ulonglong(0)), "map")
    t2 = time.perf_counter()
    ok(cu.cuMemSetAccess(va, ctypes.c_size_t(n * size), access, ctypes.c_size_t(1)), "access")
    t3 = time.perf_counter()
    export_us = import_us = None
    if handle_type == POSIX_FD:
        fds = []
        a = time.perf_counter()
        for h in handles:
            fd = ctypes.c_int(-1)
            ok(cu.cuMemExportToShareableHandle(ctypes.byref(fd), h, ctypes.c_int(POSIX_FD), ctypes.c_ulonglong(0)), "export")
            fds.append(fd.value)
        b = time.perf_counter()
        export_us = us(a, b, n)
        # Another process imports them (CUDA cannot be used in a forked child): a fresh interpreter
        # inherits the descriptors, as SCM_RIGHTS would hand them over.
        child = subprocess.run([sys.executable, __file__, "--import", *map(str, fds)], pass_fds=fds,
                               capture_output=True, text=True, timeout=120)
        out = child.stdout.strip()
        import_us = float(out) if child.returncode == 0 and out else "error: " + (child.stderr.strip() or out)[-80:]
        for fd in fds:
            os.close(fd)
    t4 = time.perf_counter()
    unmap_all(va, n, size)
    t5 = time.perf_counter()
    for h in handles:
        ok(cu.cuMemRelease(h), "release")
    t6 = time.perf_counter()
    cu.cuMemAddressFree(va, ctypes.c_size_t(n * size))
    return [us(t0, t1, n), us(t1, t2, n), us(t2, t3, n), us(t4, t5, n), us(t5, t6, n)], export_us, import_us


print(f"{n} chunks per row; device free {free.value / 2**30:.1f} GiB of {total.value / 2**30:.1f}; "
      f"host location type {host_loc.type} id {host_loc.id}")
print("| where | chunk | handle type | create | map | set access | unmap | release | export | import (other process) |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for where, loc in (("device", dev_loc), ("host", host_loc)):
    for size in sizes:
        if where == "device" and 2 * n * size > free.value // 2:
            print(f"| {where} | {size >> 20} MiB | - | skipped: {n} chunks would take more than half the free memory |")
            continue
        for rep in range(2):
            for handle_type in (0, POSIX_FD) if rep == 0 else (POSIX_FD, 0):
                row, exp, imp = cycle(loc, size, handle_type)
                fmt = lambda v: "-" if v is None else (v if isinstance(v, str) else f"{v:.1f} us")
                name = "POSIX fd" if handle_type else "none"
                print(f"| {where} | {size >> 20} MiB | {name} | " + " | ".join(f"{v:.1f} us" for v in row) +
                      f" | {fmt(exp)} | {fmt(imp)} |", flush=True)
