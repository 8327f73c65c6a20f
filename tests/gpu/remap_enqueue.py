"""What the driver does with a copy or memset queued behind a hold while its memory is remapped.

uvmpool's mover holds the program's streams (cuStreamWaitValue32) and remaps memory at the same
address while the program's threads go on queueing work behind the hold (docs/tiering.md). Kernels
reach memory by virtual address when they run. This probe asks the same of the driver's copies and
memsets, on a stream held the same way, with a range that is remapped from a pinned host piece to a
device piece (and back) while the work waits:

  1. queued while the range is mapped to the old piece, run after the remap: does the work land in
     the new piece (resolved when it runs) or in the old one (resolved when it was queued)?
  2. queued while the range is unmapped (inside the remap): what does the call answer?

Prints one UVMPOOL_REMAP_ENQUEUE line per case. Run on a GPU: python3 tests/gpu/remap_enqueue.py
"""
import ctypes, sys, os, threading, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_vmm import cu, Location, Prop, Access, init_device0

U64, U32, VP = ctypes.c_uint64, ctypes.c_uint32, ctypes.c_void_p
SIZE = 2 << 20
DEVICE, HOST = 1, 2


def call(name, *args):
    # Each call timed and shown before it returns, so a call that waits (for the held work) shows as one.
    t0 = time.perf_counter()
    print(f"    {name} ...", end="", flush=True)
    r = getattr(cu, name)(*args)
    print(f" {r} in {(time.perf_counter() - t0) * 1e3:.1f} ms", flush=True)
    return r


def must(r, what):
    if r != 0:
        sys.exit(f"{what} failed: {r}")


def handle(kind):
    prop = Prop()
    prop.type = 1  # pinned
    prop.location = Location(kind, 0)
    h = U64()
    must(call("cuMemCreate", ctypes.byref(h), ctypes.c_size_t(SIZE), ctypes.byref(prop), U64(0)), f"cuMemCreate({kind})")
    return h


def map_at(va, h):
    must(call("cuMemMap", U64(va), ctypes.c_size_t(SIZE), ctypes.c_size_t(0), h, U64(0)), "cuMemMap")
    acc = Access(Location(DEVICE, 0), 3)
    must(call("cuMemSetAccess", U64(va), ctypes.c_size_t(SIZE), ctypes.byref(acc), ctypes.c_size_t(1)), "cuMemSetAccess")


def unmap(va):
    must(call("cuMemUnmap", U64(va), ctypes.c_size_t(SIZE)), "cuMemUnmap")


def reserve():
    va = U64()
    must(call("cuMemAddressReserve", ctypes.byref(va), ctypes.c_size_t(SIZE), ctypes.c_size_t(SIZE), U64(0), U64(0)), "reserve")
    return va.value


def read_word(va):
    out = U32()
    r = call("cuMemcpyDtoH_v2", ctypes.byref(out), U64(va), ctypes.c_size_t(4))
    return out.value if r == 0 else f"error {r}"


def main():
    init_device0()
    stream = VP()
    must(call("cuStreamCreate", ctypes.byref(stream), ctypes.c_uint(1)), "cuStreamCreate")  # non-blocking
    flag_host = VP()
    must(call("cuMemHostAlloc", ctypes.byref(flag_host), ctypes.c_size_t(4), ctypes.c_uint(3)), "cuMemHostAlloc")
    ctypes.c_uint32.from_address(flag_host.value).value = 0
    flag = U64()
    must(call("cuMemHostGetDevicePointer_v2", ctypes.byref(flag), flag_host, ctypes.c_uint(0)), "device pointer")
    src = U64()
    must(call("cuMemAlloc_v2", ctypes.byref(src), ctypes.c_size_t(SIZE)), "cuMemAlloc")
    must(call("cuMemsetD32_v2", src, U32(0x5eed5eed), ctypes.c_size_t(SIZE // 4)), "memset src")

    hold_value = [0]

    def hold():
        hold_value[0] += 1
        must(call("cuStreamWaitValue32_v2", stream, flag, U32(hold_value[0]), ctypes.c_uint(0)), "cuStreamWaitValue32")

    def release():
        ctypes.c_uint32.from_address(flag_host.value).value = hold_value[0]

    # A call that waits for the held work would wait for ever: this releases each hold after 3 s
    # (the output then shows which call waited that long).
    def watchdog():
        while True:
            time.sleep(3)
            if ctypes.c_uint32.from_address(flag_host.value).value < hold_value[0]:
                print("    (watchdog: releasing the hold)", flush=True)
                release()
    threading.Thread(target=watchdog, daemon=True).start()

    for old_kind, new_kind, name in ((HOST, DEVICE, "host->device"), (DEVICE, HOST, "device->host")):
        va, old_view, new_view = reserve(), reserve(), reserve()
        old, new = handle(old_kind), handle(new_kind)
        map_at(va, old)
        map_at(old_view, old)  # a second mapping of each piece, to read it after the remap
        map_at(new_view, new)
        must(call("cuMemsetD32_v2", U64(va), U32(0), ctypes.c_size_t(SIZE // 4)), "clear old")
        must(call("cuMemsetD32_v2", U64(new_view), U32(0), ctypes.c_size_t(SIZE // 4)), "clear new")
        must(call("cuCtxSynchronize"), "sync")

        print(f"case {name}", flush=True)
        hold()
        # Case 1: queued while mapped to the old piece.
        r_set = call("cuMemsetD32Async", U64(va), U32(0xaaaaaaaa), ctypes.c_size_t(1024), stream)
        r_cpy = call("cuMemcpyDtoDAsync_v2", U64(va + 8192), src, ctypes.c_size_t(4096), stream)
        r_gen = call("cuMemcpyAsync", U64(va + 16384), src, ctypes.c_size_t(4096), stream)
        # The remap, and case 2 inside it.
        unmap(va)
        r_set_gap = call("cuMemsetD32Async", U64(va + 65536), U32(0xbbbbbbbb), ctypes.c_size_t(1024), stream)
        r_cpy_gap = call("cuMemcpyDtoDAsync_v2", U64(va + 73728), src, ctypes.c_size_t(4096), stream)
        # cuMemcpyAsync (the unified-address copy) with an unmapped address waited for the held work
        # and broke the context (719) on an H200, driver 580: asked only where GENERIC_GAP=1.
        r_gen_gap = (call("cuMemcpyAsync", U64(va + 81920), src, ctypes.c_size_t(4096), stream)
                     if os.environ.get("GENERIC_GAP") == "1" else "skipped")
        map_at(va, new)
        release()
        r_sync = call("cuStreamSynchronize", stream)
        landed = {}
        for label, off in (("memset", 0), ("dtod", 8192), ("generic", 16384),
                           ("memset_gap", 65536), ("dtod_gap", 73728), ("generic_gap", 81920)):
            landed[label] = (read_word(new_view + off), read_word(old_view + off))
        print(f"UVMPOOL_REMAP_ENQUEUE case={name} queued_before: memset={r_set} dtod={r_cpy} generic={r_gen}; "
              f"queued_while_unmapped: memset={r_set_gap} dtod={r_cpy_gap} generic={r_gen_gap}; sync={r_sync}", flush=True)
        for label, (in_new, in_old) in landed.items():
            if isinstance(in_new, str) or isinstance(in_old, str):
                where = "unreadable (the context is broken)"
            else:
                where = "new" if in_new != 0 else ("old" if in_old != 0 else "nowhere")
            print(f"  {label:12} new piece {in_new if isinstance(in_new, str) else hex(in_new)}, "
                  f"old piece {in_old if isinstance(in_old, str) else hex(in_old)}: landed in {where}", flush=True)
        if r_sync != 0:
            print("  the context is broken (sticky error): stopping", flush=True)
            return 1
        unmap(va)
        unmap(old_view)
        unmap(new_view)
    return 0


if __name__ == "__main__":
    sys.exit(main())
