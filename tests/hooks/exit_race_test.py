#!/usr/bin/env python3
"""Exit racing the first allocation (issue 17): main exits while another thread makes the program's
first allocation, so uvmpool is starting its trace and statistics segment at that moment. Before the
fix, 8 runs in 25 left a 0-byte UVMPOOL_TRACE file (not JSON) or a 0-byte / "not ready" segment.
After each run the trace, if there is one, must be valid JSON and no segment of the process remains.

usage: exit_race_test.py CLIENT PRELOAD SIM_DIR [RUNS]
"""
import json
import os
import subprocess
import sys
import tempfile


def segment_paths(pid):
    uid = os.getuid()
    return [f"/dev/shm/uvmpool-{uid}-{pid}", f"/dev/shm/uvmpool-{uid}/uvmpool-{uid}-{pid}"]


def main():
    client, preload, sim_dir = sys.argv[1:4]
    runs = int(sys.argv[4]) if len(sys.argv) > 4 else 40
    failures = []
    with tempfile.TemporaryDirectory(prefix="uvmpool-exit-race-") as tmp:
        for i in range(runs):
            delay_us = (i * 37) % 400  # spread over the start: driver, trace, segment
            trace = os.path.join(tmp, f"trace-{i}.json")
            env = dict(os.environ, LD_PRELOAD=preload, LD_LIBRARY_PATH=sim_dir, UVMPOOL_TRACE=trace,
                       UVMPOOL_STATS_INTERVAL="10")
            r = subprocess.run([client, "race", str(delay_us)], env=env, capture_output=True, text=True, timeout=60)
            pid = next((int(l.split()[1]) for l in r.stdout.splitlines() if l.startswith("pid ")), None)
            if r.returncode != 0 or pid is None:
                failures.append(f"run {i}: exited {r.returncode}: {r.stdout}{r.stderr}")
                continue
            if os.path.exists(trace):
                try:
                    with open(trace) as f:
                        json.load(f)
                except ValueError as e:
                    failures.append(f"run {i} (delay {delay_us} us): trace of {os.path.getsize(trace)} bytes is not JSON: {e}")
            for seg in segment_paths(pid):
                if os.path.exists(seg):
                    failures.append(f"run {i} (delay {delay_us} us): segment {seg} ({os.path.getsize(seg)} bytes) left behind")
                    try:
                        os.unlink(seg)
                    except OSError:
                        pass
    for f in failures:
        print("FAILED: " + f)
    if failures:
        print(f"{len(failures)} failures in {runs} runs")
        sys.exit(1)
    print(f"{runs} runs: every trace valid JSON, no segment left behind")


if __name__ == "__main__":
    main()
