"""Measures whether the mover's remaps cost more while the GPU is busy: rounds of mapping N host
handles of SIZE MiB at a fresh range, setting access one mapping at a time and unmapping them (a move
to the host and back, without the copies), timed alone, beside copies in both PCIe directions (what a
pipelined commit runs beside: the epoch's later copies), and beside matrix products on other memory.
On an H200, row 4b's commits took 847 us a move in driver calls, where the simulator's constants
(fitted to calls made on an idle GPU) give about half that.
With --device the handles are device memory instead; --calls times each kind of call on its own
(cuMemMap, cuMemSetAccess, cuMemUnmap), to see which one waits for the copies. A last load runs the
same copies in another process (another context on the same GPU): whether the wait is for the
copy engines themselves or for this context's copies only. --pieces=P,Q,... adds loads of the same
copies made P MiB at a time (in this process): whether a call waits for the running copy's end (so
smaller copies would shorten the wait) or for something else.
usage: python3 remap_under_load.py [--size=MiB] [--device] [--calls] [--pieces=MiB,...] [N]
       (default 32 MiB, 16 handles)
       --span sets access with one call over the round's whole range; --staged keeps every handle mapped
       at a second range for the whole run (as the pool keeps a moving piece's staging mapping);
       --plain-host makes host handles at CU_MEM_LOCATION_TYPE_HOST instead of the host NUMA node
       python3 remap_under_load.py --threads=T [--size=MiB] [--device] [N]: T threads, each with N handles
       of its own, run 4 rounds side by side, alone and beside copies: whether the calls of several
       threads wait side by side or one after another (the driver serialising them)."""
import ctypes, statistics, sys, threading, time

import torch

from cuda_vmm import (Access, Location, Prop, host_location, create_handles, cu, map_all, ok, remap_round, reserve,
                      take_flag, take_option, unmap_all)

args = sys.argv[1:]
size = take_option(args, "size", 32) << 20
threads = take_option(args, "threads", 0)
pieces = take_option(args, "pieces", [], lambda v: [int(p) for p in v.split(",")])
on_device = take_flag(args, "device")
span = take_flag(args, "span")
staged = take_flag(args, "staged")
plain_host = take_flag(args, "plain-host")  # CU_MEM_LOCATION_TYPE_HOST, not the device's host NUMA node
by_call = take_flag(args, "calls") or span or staged
n = int(args[0]) if args else 16

torch.cuda.init()
a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
handle_prop = Prop(type=1, location=Location(type=1, id=0) if on_device else
                   Location(type=2, id=0) if plain_host else host_location())
handles = create_handles(n, size, handle_prop)
acc = Access(location=Location(type=1, id=0), flags=3)
if staged:  # each handle also mapped, with access, at a range of its own for the whole run (as the pool's staging)
    staging_va = reserve(n * size, size)
    map_all(staging_va, handles, size)
    ok(cu.cuMemSetAccess(staging_va, ctypes.c_size_t(n * size), ctypes.byref(acc), ctypes.c_size_t(1)), "access")


calls = {"map": 0.0, "access": 0.0, "unmap": 0.0}  # with --calls: seconds in each kind, this load's rounds


def one_round():
    """Mapping, access one mapping at a time, unmapping (cuda_vmm.remap_round): seconds spent."""
    if not by_call:
        return remap_round(handles, size, acc)
    va = reserve(n * size, size)
    t0 = time.perf_counter()
    map_all(va, handles, size)
    t1 = time.perf_counter()
    for i in range(1 if span else n):
        ok(cu.cuMemSetAccess(ctypes.c_ulonglong(va.value + i * size), ctypes.c_size_t(n * size if span else size),
                             ctypes.byref(acc), ctypes.c_size_t(1)), "access")
    t2 = time.perf_counter()
    unmap_all(va, n, size)
    t3 = time.perf_counter()
    ok(cu.cuMemAddressFree(va, ctypes.c_size_t(n * size)), "free range")
    calls["map"] += t1 - t0
    calls["access"] += t2 - t1
    calls["unmap"] += t3 - t2
    return t3 - t0


# The copies every load runs: `piece` bytes at a time from 1 GiB buffers, both ways on two streams,
# queued until `seconds` of them are in (about 55 GB/s each way). Run in this process (copies()) and,
# as source, by another one (OtherProcess), so the two loads are the same copies.
COPIES = """
import time, torch
pinned = [torch.empty(1 << 30, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
device_bufs = [torch.empty(1 << 30, dtype=torch.uint8, device="cuda") for _ in range(2)]
streams = [torch.cuda.Stream(), torch.cuda.Stream()]
torch.cuda.synchronize()

def queue_copies(piece, seconds, started=lambda: None):
    queued, per_way, first = 0, int(seconds * 55e9), True
    while queued < per_way:
        at = queued % (1 << 30)
        with torch.cuda.stream(streams[0]):
            device_bufs[0][at:at + piece].copy_(pinned[0][at:at + piece], non_blocking=True)
        with torch.cuda.stream(streams[1]):
            pinned[1][at:at + piece].copy_(device_bufs[1][at:at + piece], non_blocking=True)
        queued += piece
        if first:
            started()
            first = False
"""
exec(COPIES)


class Copies:
    """The copies, queued in this process by a thread of their own (small pieces would otherwise be
    queued before the first round, and mostly done by then): query() says whether they ended."""
    def __init__(self, piece):
        self.done, started = None, threading.Event()
        self.thread = threading.Thread(target=self.queue, args=(piece, started.set))
        self.thread.start()
        started.wait()

    def queue(self, piece, started):
        queue_copies(piece, 0.6, started)
        done = torch.cuda.Event()
        torch.cuda.current_stream().wait_stream(streams[0])
        torch.cuda.current_stream().wait_stream(streams[1])
        done.record()
        self.done = done

    def query(self):
        return self.done is not None and self.done.query()


def copies(piece=1 << 30):
    return Copies(piece)


OTHER_PROCESS = COPIES + """
import sys
print("ready", flush=True)
piece = int(sys.stdin.readline())
queue_copies(piece, 0.6, lambda: print("started", flush=True))
torch.cuda.synchronize()
"""


class OtherProcess:
    """The copies of copies(), run by another process in pieces of `piece` bytes: query() says whether
    they ended."""
    def __init__(self, piece=1 << 30):
        import subprocess
        self.p = subprocess.Popen([sys.executable, "-c", OTHER_PROCESS], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        assert self.p.stdout.readline().strip() == "ready"
        self.p.stdin.write(f"{piece}\n")
        self.p.stdin.flush()
        assert self.p.stdout.readline().strip() == "started"
        time.sleep(0.05)

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
    if isinstance(done, Copies):
        done.thread.join()
    torch.cuda.synchronize()
    if isinstance(done, OtherProcess):
        done.p.wait()
    return spent


def threaded(load):
    """`threads` threads, each mapping, setting access on and unmapping its own handles 4 rounds: the wall
    seconds they took, with `load` started first."""
    own = [create_handles(n, size, handle_prop) for _ in range(threads)]
    done = load() if load else None
    t0 = time.perf_counter()
    workers = [threading.Thread(target=lambda h=h: [remap_round(h, size, acc) for _ in range(4)]) for h in own]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    wall = time.perf_counter() - t0
    if isinstance(done, Copies):
        done.thread.join()
    torch.cuda.synchronize()
    for h in sum(own, []):
        cu.cuMemRelease(h)
    return wall


if threads:
    remap_round(handles, size, acc)  # warm-up
    print(f"{threads} threads, each 4 rounds of {n} {'device' if on_device else 'host'} handles of {size >> 20} MiB")
    print("| load | wall ms | ms a round a thread |")
    print("| --- | --- | --- |")
    for name, load in (("none", None), ("copies both ways", copies), ("none, again", None)):
        wall = threaded(load)
        print(f"| {name} | {wall * 1e3:.1f} | {wall * 1e3 / 4:.2f} |", flush=True)
    sys.exit(0)

one_round()  # warm-up
kind = "device" if on_device else "host"
print(f"{kind} handles of {size >> 20} MiB, {n} a round (map, access one at a time, unmap)")
print("| load | rounds | ms a round (median) | min | max |" + (" us a call: map / access / unmap |" if by_call else ""))
print("| --- | --- | --- | --- | --- |" + (" --- |" if by_call else ""))
medians = {}
loads = (("none", None), ("copies both ways", copies), ("fp16 8192^3 products", products), ("none, again", None),
         ("copies both ways, another process", OtherProcess)) + tuple(
             (f"copies both ways in {p} MiB pieces", lambda p=p: copies(p << 20)) for p in pieces)
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
