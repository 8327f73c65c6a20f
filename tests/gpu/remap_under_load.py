"""Measures whether the mover's remaps cost more while the GPU is busy: rounds of mapping N host
handles of SIZE MiB at a fresh range, setting access one mapping at a time and unmapping them (a move
to the host and back, without the copies), timed alone, beside copies in both PCIe directions (what a
pipelined commit runs beside: the epoch's later copies), and beside matrix products on other memory.
On an H200, row 4b's commits took 847 us a move in driver calls, where the simulator's constants
(fitted to calls made on an idle GPU) give about half that.
With --device the handles are device memory instead; --calls times each kind of call on its own
(cuMemMap, cuMemSetAccess, cuMemUnmap), to see which one waits for the copies. A last load runs the
same copies in another process (another context on the same GPU): whether the wait is for the
copy engines themselves or for this context's copies only.
usage: python3 remap_under_load.py [--size=MiB] [--device] [--calls] [N]   (default 32 MiB, 16 handles)"""
import ctypes, statistics, sys, time

import torch

from cuda_vmm import (Access, Location, Prop, host_location, create_handles, cu, map_all, ok, remap_round, reserve,
                      unmap_all)

args = sys.argv[1:]
size = 32 << 20
for a in [a for a in args if a.startswith("--size=")]:
    size = int(a.split("=", 1)[1]) << 20
    args.remove(a)
on_device = "--device" in args
by_call = "--calls" in args
args = [a for a in args if a not in ("--device", "--calls")]
n = int(args[0]) if args else 16

torch.cuda.init()
a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
pinned = [torch.empty(1 << 30, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
device_bufs = [torch.empty(1 << 30, dtype=torch.uint8, device="cuda") for _ in range(2)]
streams = [torch.cuda.Stream(), torch.cuda.Stream()]
torch.cuda.synchronize()
handles = create_handles(n, size, Prop(type=1, location=Location(type=1, id=0) if on_device else host_location()))
acc = Access(location=Location(type=1, id=0), flags=3)


calls = {"map": 0.0, "access": 0.0, "unmap": 0.0}  # with --calls: seconds in each kind, this load's rounds


def one_round():
    """Mapping, access one mapping at a time, unmapping (cuda_vmm.remap_round): seconds spent."""
    if not by_call:
        return remap_round(handles, size, acc)
    va = reserve(n * size, size)
    t0 = time.perf_counter()
    map_all(va, handles, size)
    t1 = time.perf_counter()
    for i in range(n):
        ok(cu.cuMemSetAccess(ctypes.c_ulonglong(va.value + i * size), ctypes.c_size_t(size), ctypes.byref(acc),
                             ctypes.c_size_t(1)), "access")
    t2 = time.perf_counter()
    unmap_all(va, n, size)
    t3 = time.perf_counter()
    ok(cu.cuMemAddressFree(va, ctypes.c_size_t(n * size)), "free range")
    calls["map"] += t1 - t0
    calls["access"] += t2 - t1
    calls["unmap"] += t3 - t2
    return t3 - t0


def copies():
    """Queues 1 GiB copies each way, 30 of each, on two streams: about 0.6 s at 55 GB/s."""
    done = torch.cuda.Event()
    with torch.cuda.stream(streams[0]):
        for _ in range(30):
            device_bufs[0].copy_(pinned[0], non_blocking=True)
    with torch.cuda.stream(streams[1]):
        for _ in range(30):
            pinned[1].copy_(device_bufs[1], non_blocking=True)
    torch.cuda.current_stream().wait_stream(streams[0])
    torch.cuda.current_stream().wait_stream(streams[1])
    done.record()
    return done


OTHER_PROCESS = """
import sys, time, torch
p = [torch.empty(1 << 30, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
d = [torch.empty(1 << 30, dtype=torch.uint8, device="cuda") for _ in range(2)]
s = [torch.cuda.Stream(), torch.cuda.Stream()]
torch.cuda.synchronize()
print("ready", flush=True)
sys.stdin.readline()
with torch.cuda.stream(s[0]):
    for _ in range(30):
        d[0].copy_(p[0], non_blocking=True)
with torch.cuda.stream(s[1]):
    for _ in range(30):
        p[1].copy_(d[1], non_blocking=True)
time.sleep(0.05)
print("started", flush=True)
torch.cuda.synchronize()
print("done", flush=True)
"""


class OtherProcess:
    """The copies of copies(), run by another process: query() says whether they ended."""
    def __init__(self):
        import subprocess
        self.p = subprocess.Popen([sys.executable, "-c", OTHER_PROCESS], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        assert self.p.stdout.readline().strip() == "ready"
        self.p.stdin.write("go\n")
        self.p.stdin.flush()
        assert self.p.stdout.readline().strip() == "started"

    def query(self):
        return self.p.poll() is not None


def products():
    done = torch.cuda.Event()
    for _ in range(200):
        torch.mm(a, b)
    done.record()
    return done


def rounds_beside(load):
    """Remap rounds while `load` runs (at most 40): seconds a round each."""
    done = load() if load else None
    spent = []
    while (done is None and len(spent) < 10) or (done is not None and not done.query() and len(spent) < 40):
        spent.append(one_round())
    torch.cuda.synchronize()
    if isinstance(done, OtherProcess):
        done.p.wait()
    return spent


one_round()  # warm-up
kind = "device" if on_device else "host"
print(f"{kind} handles of {size >> 20} MiB, {n} a round (map, access one at a time, unmap)")
print("| load | rounds | ms a round (median) | min | max |" + (" us a call: map / access / unmap |" if by_call else ""))
print("| --- | --- | --- | --- | --- |" + (" --- |" if by_call else ""))
medians = {}
loads = (("none", None), ("copies both ways", copies), ("fp16 8192^3 products", products), ("none, again", None),
         ("copies both ways, another process", OtherProcess))
for name, load in loads:
    for k in calls:
        calls[k] = 0.0
    spent = rounds_beside(load)
    medians[name] = statistics.median(spent)
    per_call = " / ".join(f"{calls[k] / (len(spent) * n) * 1e6:.0f}" for k in calls) + " |" if by_call else ""
    print(f"| {name} | {len(spent)} | {medians[name] * 1e3:.2f} | {min(spent) * 1e3:.2f} | {max(spent) * 1e3:.2f} |"
          + per_call, flush=True)
base = (medians["none"] + medians["none, again"]) / 2
print(f"beside copies / alone {medians['copies both ways'] / base:.2f}; beside products / alone "
      f"{medians['fp16 8192^3 products'] / base:.2f}")
print(f"beside another process's copies / alone {medians['copies both ways, another process'] / base:.2f}")
for h in handles:
    cu.cuMemRelease(h)
