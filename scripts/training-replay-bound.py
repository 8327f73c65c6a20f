#!/usr/bin/env python3
"""How many bytes whole-tensor moves must carry on uvmpool-bench-tiering's training replay.

The replay (tests/benchmarks/tiering_bench.cpp, `training`): 24 layers, per layer weights 1 unit,
gradients 1, AdamW state 4, saved activations 22; activation gradients d0/d1 (22 each, ping-pong) and
the input (22); a step is the forward (weights, the layer's input, its activation written), the
backward in reverse (weights, activation, d-in, d-out, gradient) and AdamW (weights, gradient, state).
The bench's floor counts the bytes that do not fit once each way a step (need - budget). A mover that
moves whole tensors and cannot tell when a tensor's contents are dead (an activation between its last
read in the backward and its rewrite in the next forward: PyTorch's caching allocator keeps the block)
must also carry what is dead. This prints, per step in units each way:
  - the floor the bench uses (need - budget);
  - Belady on demand (a tensor brought in when an operation needs it, the one used farthest ahead
    sent out), in steady state;
  - a plan over the whole period: keep a tensor on the device across a gap between two uses when it
    fits there for the whole gap, shortest gaps first; every other gap moves it out and back;
  - the same plan when a gap that ends in an overwrite (the tensor's contents are dead across it)
    costs nothing: what a mover that knew the program's frees could reach.
The policy itself moved 1.58 GiB each way a step (809 units of 2 MiB) in the modeled run of
2026-11-30 (docs/tiering.md, "Results": "What whole-tensor moves must carry").
usage: scripts/training-replay-bound.py [budget units, default 256] [unit MiB, default 2]"""
import bisect
import sys

budget = int(sys.argv[1]) if len(sys.argv) > 1 else 256
unit_mib = int(sys.argv[2]) if len(sys.argv) > 2 else 2
layers = 24

sizes = []


def tensor(units):
    sizes.append(units)
    return len(sizes) - 1


weight, grad, state = [], [], []
for _ in range(layers):
    weight.append(tensor(1))
    grad.append(tensor(1))
    state.append(tensor(4))
d0, d1, inp = tensor(22), tensor(22), tensor(22)
act = [tensor(22) for _ in range(layers)]
step = [[weight[l], inp if l == 0 else act[l - 1], act[l]] for l in range(layers)]
for l in range(layers - 1, -1, -1):
    d_in, d_out = (d0, d1) if l % 2 == 0 else (d1, d0)
    step.append([weight[l], act[l], d_in, d_out, grad[l]])
step += [[weight[l], grad[l], state[l]] for l in range(layers)]
period = len(step)


def belady(steps=6):
    seq = [op for _ in range(steps) for op in step]
    uses = {}
    for i, op in enumerate(seq):
        for t in op:
            uses.setdefault(t, []).append(i)

    def next_use(t, i):
        u = uses[t]
        k = bisect.bisect_right(u, i)
        return u[k] if k < len(u) else float("inf")

    resident, used, moved_in, moved_out = set(), 0, [0] * steps, [0] * steps
    for i, op in enumerate(seq):
        s = i // period
        for t in op:
            if t in resident:
                continue
            while used + sizes[t] > budget:
                victim = max((x for x in resident if x not in op), key=lambda x: next_use(x, i))
                resident.remove(victim)
                used -= sizes[victim]
                moved_out[s] += sizes[victim]
            resident.add(t)
            used += sizes[t]
            moved_in[s] += sizes[t]
    return moved_in[-1], moved_out[-1]


# Uses that overwrite a tensor whole, so that what it held before is dead: an activation written by
# its forward operation, the activation gradient a backward operation writes (d-out), a weight
# gradient written by the backward. Weights and AdamW state are read and written.
overwrites = {(l, act[l]) for l in range(layers)}
for k, l in enumerate(range(layers - 1, -1, -1)):
    d_out = d1 if l % 2 == 0 else d0
    overwrites |= {(layers + k, d_out), (layers + k, grad[l])}


def gap_plan(dead_free=False):
    """Units moved each way a step; with dead_free, a gap that ends in an overwrite moves nothing."""
    uses = {}
    for i, op in enumerate(step):
        for t in op:
            uses.setdefault(t, []).append(i)
    occupied = [sum(sizes[t] for t in op) for op in step]  # what each operation needs at once
    gaps = []
    for t, u in uses.items():
        for k, a in enumerate(u):
            b = u[k + 1] if k + 1 < len(u) else u[0] + period
            gaps.append((b - a, t, a, b))
    moved = 0
    for _, t, a, b in sorted(gaps):
        if dead_free and (b % period, t) in overwrites:
            continue  # nothing to keep: the tensor leaves the device and comes back empty
        between = [x % period for x in range(a + 1, b)]
        if all(occupied[x] + sizes[t] <= budget for x in between):
            for x in between:
                occupied[x] += sizes[t]
        else:
            moved += sizes[t]
    return moved


def show(name, units):
    print(f"{name:<44} {units:5d} units = {units * unit_mib / 1024:.2f} GiB each way a step")


print(f"training replay: {sum(sizes)} units needed, budget {budget} ({sum(sizes) / budget:.2f}x), "
      f"{period} operations a step, unit {unit_mib} MiB")
show("the bench's floor (need - budget)", sum(sizes) - budget)
moved_in, moved_out = belady()
show("Belady on demand, in", moved_in)
show("Belady on demand, out", moved_out)
show("shortest gaps kept first", gap_plan())
show("the same, dead contents not moved", gap_plan(dead_free=True))
