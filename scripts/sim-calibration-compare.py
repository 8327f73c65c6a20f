#!/usr/bin/env python3
"""Compares the simulator's modeled times with a GPU's measured ones, item by item.

    python3 scripts/sim-calibration-compare.py MODELED.jsonl MEASURED.jsonl [MEASURED.jsonl ...]

The files are what uvmpool-sim-calibrate printed (on the simulated driver, and on a GPU): the lines
that are JSON objects with an "item" count, anything else is skipped. Prints a Markdown table of
ns per call, modeled / measured, marking rows whose ratio lies outside [0.8, 1.25] (issue 14: the
model should be within 25% of the GPU), and a last line for the GPU suite's summary. With several
measured files (one per machine: the driver calls' costs vary from host to host by more than the
band), each item's measured figure is the median of theirs; the defaults are fitted to that
(docs/calibration holds the H200 runs they rest on). Exits 0 whatever the ratios (a gap is a
finding, not a failure); 2 when not given a modeled and a measured file.
"""
import json
import statistics
import sys

LOW, HIGH = 0.8, 1.25


def load(path):
    items = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict) and "item" in row:
                items[row["item"]] = row
    return items


def median_of(runs):
    """Per item, the median of the runs' ns per call (GB/s from the same bytes)."""
    out = {}
    for name in dict.fromkeys(name for run in runs for name in run):
        rows = [run[name] for run in runs if name in run]
        ns = statistics.median(row["ns_per_call"] for row in rows)
        row = {"item": name, "ns_per_call": ns}
        rates = [r["gbps"] * r["ns_per_call"] for r in rows if r.get("gbps")]
        if rates:
            row["gbps"] = statistics.median(rates) / ns  # bytes per call are the same in every run
        out[name] = row
    return out


def per_call(row):
    """ns per call, with GB/s when the item moves bytes."""
    if row is None:
        return "-"
    text = f"{row['ns_per_call']:,.0f} ns"
    if row.get("gbps") is not None:
        text += f" ({row['gbps']:.1f} GB/s)"
    return text


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    modeled, runs = load(argv[1]), [load(path) for path in argv[2:]]
    measured = runs[0] if len(runs) == 1 else median_of(runs)
    names = list(measured) + [name for name in modeled if name not in measured]
    print("| item | modeled | measured | ratio |")
    print("| --- | ---: | ---: | ---: |")
    off = compared = 0
    for name in names:
        m, g = modeled.get(name), measured.get(name)
        ratio = ""
        if m is not None and g is not None and g["ns_per_call"] > 0:
            compared += 1
            r = m["ns_per_call"] / g["ns_per_call"]
            ratio = f"{r:.2f}"
            if not LOW <= r <= HIGH:
                off += 1
                ratio = f"**{ratio}** (off)"
        print(f"| {name} | {per_call(m)} | {per_call(g)} | {ratio} |")
    print()
    print(f"UVMPOOL_CALIBRATION {compared} items compared, {off} outside [{LOW}, {HIGH}]")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
