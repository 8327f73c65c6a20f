"""NCCL's own VMM buffers under uvmpool (docs/architecture.md, "The program's own VMM").

One rank of torch.distributed on NCCL (cuMem buffers, NCCL_CUMEM_ENABLE's default): after an
all_reduce the buffers NCCL made with cuMemCreate are counted (external_device_bytes); NCCL frees
them with cuMemRetainAllocationHandle, cuMemRelease, cuMemUnmap, cuMemRelease when the process
group is destroyed, and the count must then be back where it was. Run with LD_PRELOAD=libuvmpool.so.
Prints one line: UVMPOOL_NCCL_VMM ... OK|FAILED.
"""
import ctypes
import os
import re
import sys

import torch
import torch.distributed as dist


def figure(lib, name):
    buf = ctypes.create_string_buffer(1 << 20)
    lib.uvmpool_stats_json(buf, ctypes.c_ulonglong(1 << 20))
    found = re.search(r'"%s":\s*(\d+)' % name, buf.value.decode())
    return int(found.group(1)) if found else -1


def calls(lib, fn):
    lib.uvmpool_hook_calls.restype = ctypes.c_ulonglong
    return lib.uvmpool_hook_calls(fn.encode())


def main():
    lib = ctypes.CDLL(None)
    if not hasattr(lib, "uvmpool_stats_json"):
        print("UVMPOOL_NCCL_VMM uvmpool not loaded FAILED")
        return 1
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    torch.cuda.set_device(0)
    x = torch.ones(1 << 20, device="cuda")
    torch.cuda.synchronize()
    before = figure(lib, "external_device_bytes")
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    dist.all_reduce(x)
    torch.cuda.synchronize()
    during = figure(lib, "external_device_bytes")
    mapped = calls(lib, "cuMemMap")
    dist.destroy_process_group()
    torch.cuda.synchronize()
    after = figure(lib, "external_device_bytes")
    names = ["cuMemCreate", "cuMemMap", "cuMemRetainAllocationHandle", "cuMemUnmap", "cuMemRelease"]
    counts = " ".join("%s=%d" % (n, calls(lib, n)) for n in names)
    # With NCCL_CUMEM_ENABLE=0 NCCL maps nothing (its one probing cuMemCreate is released at once).
    ok = x[0].item() == 1.0 and after == before and (mapped == 0 or during > before)
    print("UVMPOOL_NCCL_VMM external_device_bytes before=%d during=%d after=%d %s %s"
          % (before, during, after, counts, "OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
