"""Observability on a real PyTorch job: trains the model of train_overcommit.py for a few steps under
LD_PRELOAD=libuvmpool.so with a device limit it must spill past, recording a trace (UVMPOOL_TRACE) and
the exit report (UVMPOOL_STATS, UVMPOOL_STATS_FILE), while this script reads the job's live figures
with uvmpool-stat (--json every half second, one table and one --prometheus text). Then it checks the
trace is valid trace-event JSON with allocations, spills and counter tracks, and that the live figures
match the exit report's peaks.

  python3 observe_torch.py --lib build/lib/libuvmpool.so --stat build/bin/uvmpool-stat --out DIR

Writes DIR/trace-torch.json, DIR/stats-torch.json, DIR/live.jsonl, DIR/uvmpool-stat.txt,
DIR/prometheus.txt. Last line: UVMPOOL_OBSERVE ok|FAIL ...
"""
import argparse, collections, json, os, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", required=True)
    p.add_argument("--stat", required=True, help="the uvmpool-stat program")
    p.add_argument("--out", required=True)
    p.add_argument("--limit", default="3422M", help="UVMPOOL_DEVICE_LIMIT (the model needs about 8.5 GiB)")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--timeout", type=int, default=180)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    trace = os.path.join(a.out, "trace-torch.json")
    stats_file = os.path.join(a.out, "stats-torch.json")
    env = dict(os.environ, LD_PRELOAD=os.path.abspath(a.lib), UVMPOOL_DEVICE_LIMIT=a.limit, UVMPOOL_TRACE=trace,
               UVMPOOL_STATS="1", UVMPOOL_STATS_FILE=stats_file)
    started = time.time()
    child = subprocess.Popen([sys.executable, os.path.join(HERE, "train_overcommit.py"), "--steps", str(a.steps),
                              "--label", "observed"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    live, table, prom = [], "", ""
    with open(os.path.join(a.out, "live.jsonl"), "w") as snapshots:
        while child.poll() is None and time.time() - started < a.timeout:
            time.sleep(0.5)
            r = subprocess.run([a.stat, str(child.pid), "--json"], capture_output=True, text=True)
            if r.returncode != 0:
                continue  # not published yet, or just exited
            report = json.loads(r.stdout)
            if not report["devices"]:
                continue
            d = report["devices"][0]
            live.append((time.time() - started, d["live_bytes"] - d["live_host_bytes"], d["live_host_bytes"]))
            snapshots.write(json.dumps(report) + "\n")
            if not table and d["live_host_bytes"] > 0:
                table = subprocess.run([a.stat, str(child.pid)], capture_output=True, text=True).stdout
                prom = subprocess.run([a.stat, "--prometheus", str(child.pid)], capture_output=True, text=True).stdout
    out, _ = child.communicate(timeout=max(1, a.timeout - (time.time() - started)))
    with open(os.path.join(a.out, "train.log"), "w") as f:
        f.write(out)
    with open(os.path.join(a.out, "uvmpool-stat.txt"), "w") as f:
        f.write(table)
    with open(os.path.join(a.out, "prometheus.txt"), "w") as f:
        f.write(prom)
    print(out[-3000:])
    print(table)
    problems = []
    if child.returncode != 0:
        problems.append(f"training exited {child.returncode}")
    try:
        with open(trace) as f:
            events = json.load(f)
    except (OSError, ValueError) as e:
        events = []
        problems.append(f"trace: {e}")
    kinds = collections.Counter((e.get("ph"), e.get("name")) for e in events)
    begins = sum(n for (ph, _), n in kinds.items() if ph == "b")
    spills = sum(n for (ph, name), n in kinds.items() if name == "spill")
    counters = sum(n for (ph, _), n in kinds.items() if ph == "C")
    maps = sum(n for (ph, _), n in kinds.items() if ph == "X")
    if begins == 0 or spills == 0 or counters == 0:
        problems.append(f"trace lacks events: {begins} allocations, {spills} spills, {counters} counter samples")
    try:
        with open(stats_file) as f:
            final = json.load(f)["devices"][0]
    except (OSError, ValueError, IndexError, KeyError) as e:
        final = {}
        problems.append(f"exit JSON: {e}")
    peak_host_seen = max((h for _, _, h in live), default=0)
    if not live:
        problems.append("uvmpool-stat never read the job")
    elif final and peak_host_seen > final.get("peak_live_host_bytes", 0):
        problems.append(f"live host bytes {peak_host_seen} above the exit report's peak {final.get('peak_live_host_bytes')}")
    if not prom.startswith("# HELP"):
        problems.append("no Prometheus text")
    mib = 1 << 20
    figures = (f"trace {len(events)} events ({begins} allocations, {spills} spills, {maps} new mappings, {counters} counter "
               f"samples, {os.path.getsize(trace) / mib if os.path.exists(trace) else 0:.1f} MiB); uvmpool-stat read "
               f"{len(live)} snapshots, at most {max((d for _, d, _ in live), default=0) / mib:.0f} MiB device + "
               f"{peak_host_seen / mib:.0f} MiB host live; exit report: peak {final.get('peak_live_device_bytes', 0) / mib:.0f} "
               f"MiB device + {final.get('peak_live_host_bytes', 0) / mib:.0f} MiB host, {final.get('spilled_allocations', 0)} spilled")
    print(("UVMPOOL_OBSERVE ok " if not problems else "UVMPOOL_OBSERVE FAIL ") + figures +
          ("" if not problems else "; problems: " + "; ".join(problems)))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
