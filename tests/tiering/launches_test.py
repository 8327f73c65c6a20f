#!/usr/bin/env python3
"""scripts/uvmpool-launches.py on a trace of known launches, and uvmpool-policy-replay on what it
writes: the buffers, the pointers' offsets and first tiers come out as the trace says, and Belady on
demand by pieces brings in less than by whole allocations where launches touch only part of them,
and so does the policy given pieces (--unit=piece): nothing is read in place once it learned them.

    launches_test.py SCRIPT REPLAY
"""
import json
import os
import re
import subprocess
import sys
import tempfile

MiB = 1 << 20


def event(ph, name, ts, **args):
    return {"ph": ph, "cat": "device0", "name": name, "pid": 1, "tid": 7, "ts": ts, "args": args}


LOOPS = 1800  # the loop's rounds: past 4096 launches A's last quarter is cold (PolicyConfig::cold_after)


def main():
    script, replay = sys.argv[1], sys.argv[2]
    a, b = 0x100000000, 0x200000000
    evs, ts = [], 0.0
    for base, host in ((a, 0), (b, 64 * MiB)):
        e = event("b", "allocation", ts, bytes=64 * MiB, host_bytes=host, address=hex(base))
        e["id"] = hex(base)
        evs.append(e)
    def launch(function, *touches):
        nonlocal ts
        ts += 1.0
        evs.append(event("i", "launch", ts, bytes=0, host_bytes=0, function=hex(function)))
        for pointer, host in touches:
            ts += 0.001
            evs.append(event("i", "touch", ts, bytes=64 * MiB, host_bytes=64 * MiB if host else 0, address=hex(pointer)))
    # Once each: the last quarter of A, the first three quarters of B. Then, over and over, the first
    # three quarters of A and the last quarter of B: together they fit the device (A's 64 MiB).
    launch(0x10, (a + 48 * MiB, False))
    launch(0x20, (b, True))
    for _ in range(LOOPS):
        launch(0x30, (a, False))
        launch(0x40, (b + 48 * MiB, True))
        launch(0x50, (b + 48 * MiB, True))  # twice a round: the thrash guard lets it come in
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace.json")
        with open(trace, "w") as f:
            json.dump({"traceEvents": evs}, f)
        out = os.path.join(tmp, "seq.launches")
        subprocess.run([sys.executable, script, trace, "-o", out], check=True)
        lines = [l for l in open(out).read().splitlines() if not l.startswith("#")]
        expect = ["b 0 67108864", "l 0 0+50331648", "b 1 67108864", "l 1 1h", "l 2 0", "l 3 1+50331648h"]
        if lines[:6] != expect:
            sys.exit(f"FAIL: the sequence begins {lines[:6]}, not {expect}")
        if len(lines) != 2 + 2 + 3 * LOOPS:
            sys.exit(f"FAIL: {len(lines)} lines, not {4 + 3 * LOOPS}")
        r = subprocess.run([replay, out, "--every=1000"], check=True, capture_output=True, text=True).stdout
        m = re.search(r"Belady on demand ([0-9.]+) GiB in, by pieces ([0-9.]+)", r)
        if not m:
            sys.exit(f"FAIL: no Belady figures by allocations and by pieces in:\n{r}")
        whole, pieces = float(m.group(1)), float(m.group(2))
        # By allocations each round of the loop brings both whole 64 MiB allocations in (128 MiB a
        # round, over 40 GiB in the first 1000 launches); by pieces B's first three quarters come in once, pushing A's first
        # three quarters out (they come back once), and B's last quarter once: 112 MiB, 0.11 GiB.
        if not (whole >= 40.0 and pieces <= 0.11):
            sys.exit(f"FAIL: Belady on demand {whole} GiB by allocations, {pieces} by pieces (want >= 40.0 and <= 0.11)")
        # The policy given pieces (--unit=piece): once A's last quarter is cold (4096 launches unused)
        # B's last quarter takes its place and the loop reads nothing in place; given allocations, B
        # cannot come in without pushing out A, needed a launch later, and is read in place for good.
        in_place = {}
        for unit in ("allocation", "piece"):
            r = subprocess.run([replay, out, "--every=1000", f"--unit={unit}"], check=True, capture_output=True, text=True).stdout
            windows = re.findall(r"\(([0-9.]+) GiB read in place\)", r)
            if not windows:
                sys.exit(f"FAIL: no windows in the replay by {unit}:\n{r}")
            in_place[unit] = float(windows[-1])
        if not (in_place["allocation"] > 1.0 and in_place["piece"] == 0.0):
            sys.exit(f"FAIL: read in place in the last window {in_place} (want more than 1 GiB by allocations, none by pieces)")
    print(f"ok: by allocations {whole} GiB, by pieces {pieces} GiB; the policy read in place {in_place} in the last window")


if __name__ == "__main__":
    main()
