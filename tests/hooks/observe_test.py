#!/usr/bin/env python3
"""End to end on the simulated driver: a preloaded program that spills publishes live statistics that
uvmpool-stat reads (list, table, JSON, Prometheus) while it runs; at exit its segment goes away, the
table goes to stderr and the JSON file holds the same figures the program saw through the API.

usage: observe_test.py PRELOAD SIM_DIR CLIENT UVMPOOL_STAT
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time


def fail(msg):
    print("FAILED: " + msg)
    sys.exit(1)


def stat(tool, *args):
    r = subprocess.run([tool, *args], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        fail(f"uvmpool-stat {' '.join(args)} exited {r.returncode}: {r.stdout}{r.stderr}")
    return r.stdout


def main():
    # Removed however the test ends (fail() raises SystemExit through the with).
    with tempfile.TemporaryDirectory(prefix="uvmpool-observe-") as tmp:
        observe(tmp, *sys.argv[1:5])


def observe(tmp, preload, sim_dir, client, tool):
    env = dict(os.environ, LD_PRELOAD=preload, LD_LIBRARY_PATH=sim_dir, UVMPOOL_DEVICE_LIMIT="256M",
               UVMPOOL_SIM_DEVICE_MEMORY="1G", UVMPOOL_STATS="1", UVMPOOL_STATS_INTERVAL="10",
               UVMPOOL_STATS_FILE=os.path.join(tmp, "stats-%p.json"))
    proc = subprocess.Popen([client, "--hold"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        m = re.match(r"ready (\d+) (\d+) (\d+)", line)
        if not m:
            fail(f"the client did not get ready: {line!r} {proc.stderr.read() if proc.poll() is not None else ''}")
        pid, live, count = (int(x) for x in m.groups())
        segment = f"/dev/shm/uvmpool-{os.getuid()}/uvmpool-{os.getuid()}-{pid}"
        if not os.path.exists(segment):
            fail(f"no segment {segment}")
        if os.stat(segment).st_mode & 0o777 != 0o600:
            fail(f"segment mode {oct(os.stat(segment).st_mode & 0o777)}, expected 0600")

        listing = stat(tool)
        if not re.search(rf"^\s*{pid}\b.*client_observe", listing, re.M):
            fail(f"pid {pid} not in the list:\n{listing}")
        # The publisher refreshes every 10 ms: the last allocations show within a refresh or two.
        for _ in range(300):
            report = json.loads(stat(tool, str(pid), "--json"))
            dev = report["devices"][0] if report["devices"] else {}
            if dev.get("live_bytes") == live:
                break
            time.sleep(0.01)
        if report["pid"] != pid or dev["device"] != 0:
            fail(f"wrong process or device: {report['pid']} {dev['device']}")
        if dev["live_bytes"] != live:
            fail(f"live_bytes {dev['live_bytes']}, the program holds {live}")
        if dev["live_allocations"] != count or dev["allocations"] != count:
            fail(f"{dev['allocations']} allocations, {dev['live_allocations']} live; the program made {count}")
        if not 0 < dev["live_host_bytes"] < live:
            fail(f"live_host_bytes {dev['live_host_bytes']}: expected part of {live} in host memory")
        if sum(dev["allocations_by_size"].values()) != count:
            fail(f"allocations_by_size {dev['allocations_by_size']} does not add up to {count}")
        table = stat(tool, str(pid))
        if "host" not in table or f"pid {pid}" not in table:
            fail(f"table:\n{table}")
        prom = stat(tool, "--prometheus", str(pid))
        want = re.compile(rf'^uvmpool_live_bytes\{{[^}}]*pid="{pid}"[^}}]*device="0"[^}}]*\}} {live}$', re.M)
        if not want.search(prom):
            fail(f"no uvmpool_live_bytes sample of {live} for pid {pid}:\n{prom[:2000]}")
    finally:
        out, err = proc.communicate("go\n", timeout=60)
    if proc.returncode != 0 or "observe client: ok" not in out:
        fail(f"client exited {proc.returncode}: {out}{err}")
    if os.path.exists(segment):
        fail(f"{segment} still there after exit")
    if not re.search(rf"^\[uvmpool\] pid {pid} .*\(exited\)", err, re.M):
        fail(f"no exit table on stderr:\n{err}")
    with open(os.path.join(tmp, f"stats-{pid}.json")) as f:
        final = json.load(f)
    dev = final["devices"][0]
    if not final["exited"] or dev["frees"] != count or dev["live_bytes"] != 0:
        fail(f"exit JSON: exited={final['exited']} frees={dev['frees']} live={dev['live_bytes']}")
    if final["process"]["hook_calls"].get("cuMemAlloc_v2") != count:
        fail(f"hook_calls {final['process']['hook_calls']}")
    wrapped(tmp, env, client, count)
    print(f"observe: ok (pid {pid}, {live} bytes live, {dev['peak_live_host_bytes']} at most in host memory)")


def wrapped(tmp, env, client, count):
    # The program run by `timeout` under the same LD_PRELOAD and a file name without %p: the wrapper
    # never reaches CUDA and exits last; it must neither write the file over the program's report nor
    # print a table of its own.
    path = os.path.join(tmp, "wrapped.json")
    r = subprocess.run(["timeout", "60", client], env=dict(env, UVMPOOL_STATS_FILE=path),
                       capture_output=True, text=True, timeout=90)
    if r.returncode != 0 or "observe client: ok" not in r.stdout:
        fail(f"wrapped client exited {r.returncode}: {r.stdout}{r.stderr}")
    tables = re.findall(r"^\[uvmpool\] pid \d+ .*\(exited\)", r.stderr, re.M)
    if len(tables) != 1:
        fail(f"{len(tables)} exit tables on stderr, expected the client's alone:\n{r.stderr}")
    with open(path) as f:
        report = json.load(f)
    if report["process"]["hook_calls"].get("cuMemAlloc_v2") != count or report["command"].startswith("timeout"):
        fail(f"{path} is not the client's report: command {report['command']!r}, "
             f"hook_calls {report['process']['hook_calls'].get('cuMemAlloc_v2')}")


if __name__ == "__main__":
    main()
