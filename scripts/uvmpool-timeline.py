#!/usr/bin/env python3
"""Plots a uvmpool trace (UVMPOOL_TRACE=file) as a PNG: per device, live bytes in device and in
pinned host memory over time (stacked), what the pool held of each (lines), out-of-memory refusals
(red marks) and spills (light marks).

    python3 scripts/uvmpool-timeline.py TRACE.json [-o out.png] [--title T]

The trace of a killed process (no closing "]", maybe a cut last line) is read as far as it goes.
Memory figures come from the counter events; without them, live bytes are rebuilt from the
allocation events.
"""
import argparse
import json
import os
import re
import sys
from collections import defaultdict

GIB = float(1 << 30)
COUNTER = re.compile(r"^device (\d+) memory \(bytes\)$")
CATEGORY = re.compile(r"^device(\d+)$")


def load_events(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    try:
        data = json.loads(text)
        return data.get("traceEvents", []) if isinstance(data, dict) else data
    except json.JSONDecodeError:
        pass
    # uvmpool writes one event per line: read line by line, skipping what a kill cut short.
    events = []
    for line in text.splitlines():
        line = line.strip().rstrip(",")
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return events


def device_of(event):
    m = CATEGORY.match(event.get("cat", ""))
    return int(m.group(1)) if m else None


def gather(events):
    """Per device: counter samples, allocation-derived samples, OOM and spill times (microseconds), and
    tiering's committed moves as (time, bytes) per direction ("promote", "demote")."""
    counters = defaultdict(list)  # device -> [(ts, live_device, live_host, held_device, held_host)]
    rebuilt = defaultdict(list)   # device -> [(ts, live_device, live_host)] from allocation events
    ooms, spills = defaultdict(list), defaultdict(list)
    moves = defaultdict(lambda: {"promote": [], "demote": []})  # device -> direction -> [(ts, bytes)]
    open_moves = {}
    holds, periods = [], []  # tiering: hold durations (us); (ts, launches) of each period learned or dropped
    live, open_allocs = defaultdict(lambda: [0, 0]), {}
    process = None
    for e in sorted((e for e in events if "ts" in e), key=lambda e: float(e["ts"])):
        ph, name, ts, args = e.get("ph"), e.get("name", ""), float(e["ts"]), e.get("args", {})
        if ph == "M" and name == "process_name":
            process = args.get("name")
            continue
        if ph == "X" and name == "hold":
            holds.append(float(e.get("dur", 0)))
            continue
        if ph == "i" and name == "launch period":
            periods.append((ts, int(args.get("launches", 0))))
            continue
        if ph == "C":
            m = COUNTER.match(name)
            if m:
                counters[int(m.group(1))].append((ts, args.get("live_device", 0), args.get("live_host", 0),
                                                  args.get("held_device", 0), args.get("held_host", 0)))
            continue
        dev = device_of(e)
        if dev is None:
            continue
        if ph == "i" and name == "out of memory":
            ooms[dev].append(ts)
        elif ph == "i" and name == "spill":
            spills[dev].append(ts)
        elif ph == "b" and name == "allocation":
            host = int(args.get("host_bytes", 0))
            dev_bytes = max(int(args.get("bytes", 0)) - host, 0)
            open_allocs[(dev, e.get("id"))] = (dev_bytes, host)
            live[dev][0] += dev_bytes
            live[dev][1] += host
            rebuilt[dev].append((ts, live[dev][0], live[dev][1]))
        elif ph == "b" and name in ("promote", "demote"):
            open_moves[(dev, name, e.get("id"))] = int(args.get("bytes", 0))
        elif ph == "e" and name in ("promote", "demote"):
            moved_bytes = open_moves.pop((dev, name, e.get("id")), 0)
            if args.get("moved"):  # a dropped move changed nothing
                moves[dev][name].append((ts, moved_bytes))
        elif ph == "e" and name == "allocation":
            dev_bytes, host = open_allocs.pop((dev, e.get("id")), (0, 0))
            live[dev][0] -= dev_bytes
            live[dev][1] -= host
            rebuilt[dev].append((ts, live[dev][0], live[dev][1]))
    return process, counters, rebuilt, ooms, spills, moves, holds, periods


def plot(path, out, title):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("uvmpool-timeline: matplotlib is missing; install it with `apt-get install python3-matplotlib` "
                 "(Debian/Ubuntu) or `pip install matplotlib`")
    events = load_events(path)
    process, counters, rebuilt, ooms, spills, moves, holds, periods = gather(events)
    devices = sorted(set(counters) | set(rebuilt) | set(ooms) | set(spills) | set(moves))
    times = [float(e["ts"]) for e in events if "ts" in e and e.get("ph") != "M"]
    t0 = min(times) if times else 0.0
    sec = lambda us: (us - t0) / 1e6  # noqa: E731

    fig, axes = plt.subplots(max(len(devices), 1), 1, figsize=(12, 1 + 3.2 * max(len(devices), 1)),
                             squeeze=False, sharex=True)
    peak_device = peak_host = 0
    for ax, dev in zip(axes[:, 0], devices):
        if counters[dev]:
            rows = counters[dev]
            source = "counters"
        else:
            rows = [(ts, d, h, None, None) for ts, d, h in rebuilt[dev]]
            source = "rebuilt from allocation events"
        if rows:
            t = [sec(r[0]) for r in rows]
            d = [r[1] / GIB for r in rows]
            h = [(r[1] + r[2]) / GIB for r in rows]
            peak_device = max(peak_device, max(r[1] for r in rows))
            peak_host = max(peak_host, max(r[2] for r in rows))
            ax.fill_between(t, 0, d, step="post", color="tab:blue", alpha=0.6, label="live in device memory")
            ax.fill_between(t, d, h, step="post", color="tab:orange", alpha=0.6, label="live in host memory (spilled)")
            if rows[0][3] is not None:
                ax.step(t, [r[3] / GIB for r in rows], where="post", color="navy", lw=1, label="held: device")
                # Stacked like the areas: the host line sits on top of what the device holds.
                ax.step(t, [(r[3] + r[4]) / GIB for r in rows], where="post", color="darkorange", lw=1, ls="--",
                        label="held: device + host")
        if spills[dev]:
            ax.vlines([sec(s) for s in spills[dev]], 0, 1, transform=ax.get_xaxis_transform(), color="tab:orange",
                      alpha=0.35, lw=0.8, label=f"spills ({len(spills[dev])})")
        # Tiering's moves: promotions rise from the bottom, demotions hang from the top.
        for direction, color, low, high in (("promote", "tab:green", 0, 0.12), ("demote", "tab:purple", 0.88, 1)):
            done = moves[dev][direction]
            if done:
                ax.vlines([sec(ts) for ts, _ in done], low, high, transform=ax.get_xaxis_transform(), color=color,
                          lw=0.8, label=f"{direction}d: {len(done)}, {sum(b for _, b in done) / GIB:.2f} GiB")
        for i, ts in enumerate(ooms[dev]):
            ax.axvline(sec(ts), color="red", lw=1.2, label=f"out of memory ({len(ooms[dev])})" if i == 0 else None)
        ax.set_ylabel("GiB")
        ax.set_title(f"device {dev} ({source})", fontsize=10, loc="left")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
    if not devices:
        axes[0, 0].text(0.5, 0.5, "no memory events in this trace", ha="center", va="center",
                        transform=axes[0, 0].transAxes)
    axes[-1, 0].set_xlabel("seconds since the first event")

    spilled = sum(len(v) for v in spills.values())
    moved = {d: [m for dev in moves for m in moves[dev][d]] for d in ("promote", "demote")}
    head = title or (process or os.path.basename(path))
    if len(head) > 100:
        head = head[:97] + "..."
    fig.suptitle(f"{head}\npeak device {peak_device / GIB:.2f} GiB, peak host {peak_host / GIB:.2f} GiB, "
                 f"{spilled} spilled allocations", fontsize=11)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    tiering = {"moves": moved, "holds": holds, "periods": [(sec(ts), n) for ts, n in periods]}
    return len(events), tiering


def main():
    parser = argparse.ArgumentParser(description="Plot a uvmpool trace (UVMPOOL_TRACE) as a PNG timeline.")
    parser.add_argument("trace", help="the trace file (Chrome trace-event JSON written by uvmpool)")
    parser.add_argument("-o", "--output", help="the PNG to write (default: the trace's name with .png)")
    parser.add_argument("--title", help="the figure's title (default: the traced program's command line)")
    args = parser.parse_args()
    out = args.output or os.path.splitext(args.trace)[0] + ".png"
    try:
        n, tiering = plot(args.trace, out, args.title)
    except OSError as e:
        sys.exit(f"uvmpool-timeline: {e}")
    print(f"uvmpool-timeline: {n} events from {args.trace} -> {out}")
    moved, holds = tiering["moves"], sorted(tiering["holds"])
    for t, launches in tiering["periods"]:
        print(f"uvmpool-timeline: at {t:.2f} s the policy " +
              (f"learned a period of {launches} launches" if launches else "forgot its period"))
    if holds:  # how long the program's streams were held, each epoch: a move lands only after its hold
        print(f"uvmpool-timeline: holds: {len(holds)}, median {holds[len(holds) // 2] / 1e3:.1f} ms, "
              f"longest {holds[-1] / 1e3:.1f} ms, {sum(holds) / 1e6:.2f} s in all")
    if moved["promote"] or moved["demote"]:
        print("uvmpool-timeline: moves: " + ", ".join(
            f"{len(moved[d])} {d}d ({sum(b for _, b in moved[d]) / GIB:.2f} GiB)" for d in ("promote", "demote")))


if __name__ == "__main__":
    main()
