#!/usr/bin/env python3
"""What carving allocations out of extents mapped once would do on the churn trace: a model of a
design, not of the pool's code (docs/benchmarks.md, "Against expandable segments").

Input: the fragmentation benchmark's trace, `uvmpool-bench-fragmentation --dump-trace=FILE`.
Model: requests above 1 MiB (the slabs take the rest) are rounded up to --unit and carved best-fit
from one address range of extents of --extent bytes, mapped one after another; when nothing fits,
extents are mapped at the end (counting the free space the range ends in). With --remap, wholly
free extents elsewhere are moved to the end first, instead of new ones being made.
Output: peak mapped / peak live (of the requests above 1 MiB), extents made and moved, and their
cost at the simulator's H200 constants (UVMPOOL_SIM_*: create 9.5 us, map 0.85 us, access 30 us,
unmap 17 us a mapping)."""
import argparse
import bisect

MIB = 1 << 20


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--extent", default="32M")
    ap.add_argument("--unit", default="64K", help="carving granularity (2M: the pool's chunk)")
    ap.add_argument("--remap", action="store_true")
    args = ap.parse_args()
    extent, unit = parse_size(args.extent), parse_size(args.unit)
    per_extent = extent // unit

    free = []          # sorted, disjoint [start, end) in units, of mapped free space
    used = {}          # extent index -> units in use
    mapped = set()     # extent indices mapped
    top = 0            # extents of address range used so far
    where = {}
    live = peak_live = peak = made = moved = 0

    def take(s, e):
        i = bisect.bisect_right(free, [s, float("inf")]) - 1
        a, b = free.pop(i)
        assert a <= s and e <= b
        if e < b:
            free.insert(i, [e, b])
        if a < s:
            free.insert(i, [a, s])

    def give(s, e):
        i = bisect.bisect_left(free, [s, e])
        free.insert(i, [s, e])
        if i + 1 < len(free) and free[i][1] == free[i + 1][0]:
            free[i][1] = free.pop(i + 1)[1]
        if i > 0 and free[i - 1][1] == free[i][0]:
            free[i - 1][1] = free.pop(i)[1]

    def count(s, e, d):
        x = s
        while x < e:
            k = x // per_extent
            nx = min(e, (k + 1) * per_extent)
            used[k] = used.get(k, 0) + d * (nx - x)
            x = nx

    for line in open(args.trace):
        parts = line.split()
        ident = int(parts[1])
        if parts[0] == "a":
            size = int(parts[2])
            if size <= MIB:
                continue
            live += size
            peak_live = max(peak_live, live)
            u = -(-size // unit)
            best = min((b - a, a) for a, b in free if b - a >= u) if any(b - a >= u for a, b in free) else None
            if best is None:
                end = top * per_extent
                tail = free[-1][0] if free and free[-1][1] == end else end
                need = -(-(u - (end - tail)) // per_extent)
                idle = [x for x in sorted(mapped) if used.get(x, 0) == 0 and (x + 1) * per_extent <= tail] if args.remap else []
                for x in idle[:need]:
                    mapped.discard(x)
                    take(x * per_extent, (x + 1) * per_extent)
                    moved += 1
                made += need - len(idle[:need])
                for _ in range(need):
                    mapped.add(top)
                    give(top * per_extent, (top + 1) * per_extent)
                    top += 1
                start = tail
            else:
                start = best[1]
            take(start, start + u)
            count(start, start + u, 1)
            where[ident] = (start, u, size)
        elif ident in where:
            start, u, size = where.pop(ident)
            live -= size
            count(start, start + u, -1)
            give(start, start + u)
        peak = max(peak, len(mapped) * extent)

    cost_us = made * (9.5 + 0.85 + 30) + moved * (17 + 0.85 + 30)
    print(f"extent {args.extent}, unit {args.unit}, remap {'on' if args.remap else 'off'}: "
          f"peak mapped {peak / 2**30:.2f} GiB / peak live {peak_live / 2**30:.2f} GiB = {peak / peak_live:.3f}; "
          f"{made} extents made, {moved} moved; modeled driver time {cost_us / 1000:.1f} ms")


if __name__ == "__main__":
    main()
