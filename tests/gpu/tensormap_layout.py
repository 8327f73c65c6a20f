"""Where a TMA descriptor keeps its global address (issue 16, "TMA descriptors"): encodes
CUtensorMaps with cuTensorMapEncodeTiled (and cuTensorMapEncodeIm2col) over pool-like device
addresses, rewrites one with cuTensorMapReplaceAddress, and prints each descriptor's 16 words and
which of them hold the address as it is. The launch hooks look every 8-aligned word of a launch's
arguments up in the pool's address map (docs/tiering.md), so a descriptor passed by value is seen
exactly when its address is such a word.

  python3 tensormap_layout.py

Last line: UVMPOOL_TENSORMAP raw|encoded <details>
"""
import ctypes, sys

cu = ctypes.CDLL("libcuda.so.1")
u32, u64 = ctypes.c_uint32, ctypes.c_uint64


def check(r, what):
    if r != 0:
        sys.exit(f"{what} answered {r}")


class TensorMap(ctypes.Structure):
    _fields_ = [("words", u64 * 16)]  # CUtensorMap: 128 bytes, 64-byte aligned


def aligned_map():
    # ctypes does not honour 64-byte alignment: carve one out of a larger buffer.
    raw = ctypes.create_string_buffer(128 + 64)
    address = (ctypes.addressof(raw) + 63) & ~63
    return raw, TensorMap.from_address(address)


def main():
    check(cu.cuInit(0), "cuInit")
    dev = ctypes.c_int()
    check(cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ctx = ctypes.c_void_p()
    check(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    buf = ctypes.c_uint64()
    check(cu.cuMemAlloc_v2(ctypes.byref(buf), 64 << 20), "cuMemAlloc_v2")
    results = []
    # Tiled, rank 2 and 3, float32 and bf16, at several offsets into the allocation.
    for rank, dtype, elem, offset in [(2, 7, 4, 0), (2, 7, 4, 4096), (3, 10, 2, 1 << 20), (2, 6, 2, 48)]:
        raw, m = aligned_map()
        dims = (u64 * rank)(*([256] * rank))
        strides = (u64 * (rank - 1))(*[256 ** (i + 1) * elem for i in range(rank - 1)])
        box = (u32 * rank)(*([32] * rank))
        estr = (u32 * rank)(*([1] * rank))
        addr = buf.value + offset
        check(cu.cuTensorMapEncodeTiled(ctypes.byref(m), dtype, rank, ctypes.c_void_p(addr), dims, strides, box, estr,
                                        0, 0, 0, 0), f"cuTensorMapEncodeTiled rank {rank} dtype {dtype}")
        words = list(m.words)
        hits = [i for i, w in enumerate(words) if w == addr]
        print(f"tiled rank {rank} dtype {dtype} address {addr:#x}: words " + " ".join(f"{w:#x}" for w in words))
        print(f"  the address as it is in words {hits}")
        results.append(bool(hits))
        moved = addr + (8 << 20)
        check(cu.cuTensorMapReplaceAddress(ctypes.byref(m), ctypes.c_void_p(moved)), "cuTensorMapReplaceAddress")
        rhits = [i for i, w in enumerate(m.words) if w == moved]
        print(f"  after cuTensorMapReplaceAddress to {moved:#x}: in words {rhits}; old address still in "
              f"{[i for i, w in enumerate(m.words) if w == addr]}")
        results.append(bool(rhits))
        del raw
    # Im2col, rank 3 (N, W, C) float32.
    raw, m = aligned_map()
    rank = 3
    dims = (u64 * rank)(64, 32, 4)
    strides = (u64 * (rank - 1))(64 * 4, 64 * 32 * 4)
    lower = (ctypes.c_int * 1)(0)
    upper = (ctypes.c_int * 1)(0)
    estr = (u32 * rank)(1, 1, 1)
    addr = buf.value + 2 * 4096
    r = cu.cuTensorMapEncodeIm2col(ctypes.byref(m), 7, rank, ctypes.c_void_p(addr), dims, strides, lower, upper,
                                   u32(64), u32(32), estr, 0, 0, 0, 0)
    if r == 0:
        hits = [i for i, w in enumerate(m.words) if w == addr]
        print(f"im2col rank 3 address {addr:#x}: words " + " ".join(f"{w:#x}" for w in m.words))
        print(f"  the address as it is in words {hits}")
        results.append(bool(hits))
    else:
        print(f"cuTensorMapEncodeIm2col answered {r}; not checked")
    check(cu.cuMemFree_v2(buf), "cuMemFree_v2")
    verdict = "raw" if all(results) else "encoded"
    print(f"UVMPOOL_TENSORMAP {verdict} {sum(results)} of {len(results)} descriptors hold their address as a word")


if __name__ == "__main__":
    main()
