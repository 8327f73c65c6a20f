"""Measures whether remapping host-located memory slows kernels that run on other memory: a move to the
host sets access on its new host mapping (about 10 us a MiB, docs/tiering.md), and a mover that
committed beside the program's kernels, not under a hold, would do so while they run. The fidelity
tests found device remaps elsewhere leave a running kernel's time alone; host mappings write many
more page-table entries.

A chain of matrix products (PyTorch, on memory of its own) is timed with CUDA events: alone, then
while this thread maps, sets access on and unmaps N host handles of SIZE MiB elsewhere, round after
round (at most 50) until the products end.
With --device the handles are device memory instead, to compare.
usage: python3 remap_stall.py [--size=MiB] [--device] [N]   (default 32 MiB, 16 handles)"""
import statistics, sys

import torch

from cuda_vmm import Access, Location, Prop, host_location, create_handles, cu, remap_round, take_flag, take_option

args = sys.argv[1:]
size = take_option(args, "size", 32) << 20
on_device = take_flag(args, "device")
n = int(args[0]) if args else 16

torch.cuda.init()
a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
torch.cuda.synchronize()
# The driver calls below run in the context PyTorch made current (the device's primary context).
host = host_location()
handles = create_handles(n, size, Prop(type=1, location=Location(type=1, id=0) if on_device else host))
acc = Access(location=Location(type=1, id=0), flags=3)


def kernels(products):
    """Queues `products` matrix products between two events; returns the events."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(products):
        torch.mm(a, b)
    stop.record()
    return start, stop


def remaps():
    """One round of remaps elsewhere (cuda_vmm.remap_round): seconds spent."""
    return remap_round(handles, size, acc)


# Long enough that the remaps end while the products still run.
products = 200
kernels(products)  # warm-up
torch.cuda.synchronize()
alone, beside, remap_s = [], [], []
for _ in range(5):
    start, stop = kernels(products)
    torch.cuda.synchronize()
    alone.append(start.elapsed_time(stop))
    start, stop = kernels(products)
    rounds, spent = 0, 0.0
    while not stop.query() and rounds < 50:
        spent += remaps()
        rounds += 1
    torch.cuda.synchronize()
    beside.append(start.elapsed_time(stop))
    remap_s.append((rounds, spent))
print(f"{'device' if on_device else 'host'} handles of {size >> 20} MiB, {n} a round; {products} fp16 8192^3 products a run")
print("| run | products alone | products beside remaps | remap rounds during them | host time remapping |")
print("| --- | --- | --- | --- | --- |")
for i, (x, y, (rounds, spent)) in enumerate(zip(alone, beside, remap_s)):
    print(f"| {i} | {x:.2f} ms | {y:.2f} ms | {rounds} | {spent * 1e3:.1f} ms |")
print(f"median: alone {statistics.median(alone):.2f} ms, beside {statistics.median(beside):.2f} ms "
      f"({statistics.median(beside) / statistics.median(alone):.3f})")
for h in handles:
    cu.cuMemRelease(h)
