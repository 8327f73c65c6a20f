#!/usr/bin/env python3
"""uvmpool-stat --snapshot: PyTorch memory snapshots of uvmpool traces, on the simulated driver.

- A preloaded program that spills past a small device limit holds its memory: `uvmpool-stat
  --snapshot OUT PID` finds its trace and writes a snapshot whose live blocks are exactly what the
  program holds, spilled parts on the host pseudo-device; once it has freed everything and exited,
  the snapshot of its finished trace has no live block and every allocation freed.
- The overcommit demo, and a program that churns (mappings built, reused, shrunk and taken apart;
  slabs made and given back; spills), convert with nothing left out, maps and unmaps on both devices.
- A process without UVMPOOL_TRACE, a missing pid and bad usage get clear errors.
- A hand-made trace whose threads' times disagree with causality, and one with an event missing.

Every snapshot is checked as PyTorch's viewer reads it: the keys and types of
torch.cuda.memory._snapshot(), only pickle opcodes the viewer's own unpickler (MemoryViz.js) knows,
blocks tiling their segments, and each device's trace replayed from empty to the final segments
(every alloc freed or live, inside a mapped range, maps and unmaps consistent). Where torch is
importable, torch.cuda._memory_viz renders it too (skipped, and said so, otherwise).

usage: snapshot_test.py PRELOAD SIM_DIR CLIENT_OBSERVE DEMO UVMPOOL_STAT PYTHON_SRC
"""
import json
import os
import pickle
import pickletools
import re
import subprocess
import sys
import tempfile
import time

# The opcodes MemoryViz.js's unpickle() handles (protocols 2 to 4).
VIEWER_OPCODES = {
    "PROTO", "FRAME", "STOP", "MARK", "APPEND", "APPENDS", "LIST", "EMPTY_LIST", "DICT", "EMPTY_DICT", "SETITEM",
    "SETITEMS", "TUPLE", "EMPTY_TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "NEWTRUE", "NEWFALSE", "NONE", "BININT",
    "BININT1", "BININT2", "LONG1", "BINFLOAT", "SHORT_BINUNICODE", "BINUNICODE", "MEMOIZE", "BINPUT",
    "LONG_BINPUT", "BINGET", "LONG_BINGET",
}
SEGMENT_KEYS = {"device", "address", "total_size", "allocated_size", "active_size", "requested_size", "stream",
                "segment_type", "segment_pool_id", "is_expandable", "frames", "blocks"}
BLOCK_KEYS = {"address", "size", "requested_size", "state", "frames"}
ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map",
           "segment_unmap", "snapshot", "oom"}


def fail(msg):
    print("FAILED: " + msg)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def check_frames(frames, where):
    check(isinstance(frames, list), f"{where}: frames is not a list")
    for f in frames:
        check(isinstance(f, dict) and {"filename", "line", "name"} <= set(f), f"{where}: frame {f!r}")


def check_snapshot(path, expect_live=None):
    """Checks the file as PyTorch's tools read it; returns the snapshot and its live blocks per device."""
    raw = open(path, "rb").read()
    ops = {op.name for op, _, _ in pickletools.genops(raw)}
    check(ops <= VIEWER_OPCODES, f"{path}: opcodes the viewer cannot read: {sorted(ops - VIEWER_OPCODES)}")
    proto = raw[1] if raw[:1] == b"\x80" else 0
    check(2 <= proto <= 4, f"{path}: pickle protocol {proto}, the viewer reads 2 to 4")
    snap = pickle.loads(raw)
    check(isinstance(snap, dict) and {"segments", "device_traces", "allocator_settings", "external_annotations"} <= set(snap),
          f"{path}: top-level keys {sorted(snap) if isinstance(snap, dict) else type(snap)}")
    traces, u = snap["device_traces"], snap["uvmpool"]
    check(isinstance(traces, list) and all(isinstance(t, list) for t in traces), "device_traces: a list of lists")
    host = u["host_device"]
    check(host == len(traces) - 1, f"host pseudo-device {host}, but {len(traces)} device traces")
    check(host == (max(u["devices"]) + 1 if u["devices"] else 1), f"host pseudo-device {host}, devices {u['devices']}")

    # Segments: PyTorch's keys, blocks tiling each segment, no two segments of a device overlapping.
    final = {}  # device -> {"mapped": [(start, end)], "live": {addr: size}}
    for seg in snap["segments"]:
        check(set(seg) >= SEGMENT_KEYS, f"segment keys {sorted(seg)}")
        dev = seg["device"]
        check(isinstance(dev, int) and 0 <= dev < len(traces), f"segment device {dev}")
        check(isinstance(seg["segment_pool_id"], tuple) and seg["is_expandable"] is True, "segment_pool_id / is_expandable")
        check(seg["segment_type"] in ("large", "small") and seg["stream"] == 0, "segment_type / stream")
        check_frames(seg["frames"], "segment")
        at, active = seg["address"], 0
        for b in seg["blocks"]:
            check(set(b) >= BLOCK_KEYS, f"block keys {sorted(b)}")
            check(b["address"] == at and b["size"] > 0, f"block at {b['address']:#x} of {b['size']}, expected at {at:#x}")
            check(b["state"] in ("active_allocated", "inactive"), f"block state {b['state']}")
            check_frames(b["frames"], "block")
            if b["state"] == "active_allocated":
                check(0 < b["requested_size"] <= b["size"], "requested_size")
                active += b["size"]
                final.setdefault(dev, {"mapped": [], "live": {}})["live"][b["address"]] = b["size"]
            at += b["size"]
        check(at == seg["address"] + seg["total_size"], f"blocks of segment {seg['address']:#x} add up to "
              f"{at - seg['address']}, not its total_size {seg['total_size']}")
        check(seg["allocated_size"] == active == seg["active_size"] == seg["requested_size"],
              f"segment {seg['address']:#x}: allocated_size {seg['allocated_size']}, active blocks {active}")
        final.setdefault(dev, {"mapped": [], "live": {}})["mapped"].append((seg["address"], seg["address"] + seg["total_size"]))
    for dev, f in final.items():
        m = sorted(f["mapped"])
        check(all(a[1] <= b[0] for a, b in zip(m, m[1:])), f"device {dev}: segments overlap")

    # Each device's trace replayed from nothing ends in the final segments.
    for dev, trace in enumerate(traces):
        mapped, live, freeing = [], {}, set()

        def covered(a, b):
            at = a
            for s, e in sorted(mapped):
                if s <= at < e:
                    at = e
            return at >= b

        for i, e in enumerate(trace):
            where = f"device {dev} entry {i} {e}"
            act = e.get("action")
            check(act in ACTIONS, where)
            # torch 2.11's own entries also carry compile_context and user_metadata (seen on the H200).
            check({"action", "size", "stream", "time_us", "frames", "compile_context", "user_metadata"} <= set(e),
                  f"{where}: keys")
            check_frames(e["frames"], where)
            if act == "oom":
                check("device_free" in e, where)
                continue
            a, b = e["addr"], e["addr"] + e["size"]
            check(isinstance(e["addr"], int) and e["size"] > 0, where)
            if act == "segment_map":
                check(not any(s < b and a < t for s, t in mapped), f"{where}: mapped twice")
                mapped.append((a, b))
            elif act == "segment_unmap":
                check(covered(a, b), f"{where}: unmapping what is not mapped")
                check(not any(a < p + n and p < b for p, n in live.items()), f"{where}: unmapping live memory")
                pieces = []
                for s, t in mapped:
                    if t <= a or s >= b:
                        pieces.append((s, t))
                    else:
                        pieces += [x for x in ((s, a), (b, t)) if x[0] < x[1]]
                mapped = pieces
            elif act == "alloc":
                check(covered(a, b), f"{where}: allocation outside mapped memory")
                check(not any(a < p + n and p < b for p, n in live.items()), f"{where}: overlaps a live allocation")
                live[a] = e["size"]
            elif act == "free_requested":
                check(live.get(a) == e["size"], f"{where}: free of what is not live")
                freeing.add(a)
            elif act == "free_completed":
                check(a in freeing and live.get(a) == e["size"], f"{where}: free_completed without free_requested")
                freeing.discard(a)
                del live[a]
        f = final.get(dev, {"mapped": [], "live": {}})
        check(live == f["live"], f"device {dev}: the trace leaves {len(live)} allocations live, the segments hold "
              f"{len(f['live'])}")
        union = lambda rs: [(s, e) for s, e in sorted(rs)]
        mm = union(mapped)
        check(sum(e - s for s, e in mm) == sum(e - s for s, e in f["mapped"]) and all(covered(s, e) for s, e in f["mapped"]),
              f"device {dev}: the trace leaves a different mapped range than the segments")
    live = {dev: sum(f["live"].values()) for dev, f in final.items()}
    if expect_live is not None:
        check(sum(live.values()) == expect_live, f"live blocks add up to {sum(live.values())}, expected {expect_live}")
    return snap, live


def torch_check(path, results):
    """torch.cuda._memory_viz on the file, where torch is importable."""
    code = ("import pickle,sys\nfrom torch.cuda import _memory_viz as v\n"
            "d=pickle.load(open(sys.argv[1],'rb'))\n"
            "for f in (v.trace_plot, v.segment_plot):\n  h=f(d)\n  assert 'snapshot.pickle' in h\n"
            "v.segsum(d); v.trace(d); print('torch ok')\n")
    probe = subprocess.run([sys.executable, "-c", "import torch.cuda._memory_viz"], capture_output=True, timeout=120)
    if probe.returncode != 0:
        results.append("torch not importable: torch.cuda._memory_viz not run")
        return
    r = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, f"torch.cuda._memory_viz on {path}:\n{r.stdout}{r.stderr}")
    results.append(f"torch.cuda._memory_viz rendered {os.path.basename(path)}")


def snapshot(tool, out, source, expect=0):
    r = subprocess.run([tool, "--snapshot", out, str(source)], capture_output=True, text=True, timeout=300)
    check(r.returncode == expect, f"--snapshot {out} {source}: exit {r.returncode}, expected {expect}\n{r.stdout}{r.stderr}")
    return r


def check_nothing_left_out(snap, what):
    u = snap["uvmpool"]
    check(u["events_left_out"] == 0 and u["host_split_mismatches"] == 0 and u["trace_dropped_events"] == 0,
          f"{what}: {json.dumps(u)}")


def check_live_process(tool, env, client, tmp, results):
    trace = os.path.join(tmp, "observe-%p.json")
    proc = subprocess.Popen([client, "--hold"], env=dict(env, UVMPOOL_TRACE=trace), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        m = re.match(r"ready (\d+) (\d+) (\d+)", proc.stdout.readline())
        check(m, "the client did not get ready")
        pid, live, count = (int(x) for x in m.groups())
        out = os.path.join(tmp, "live.pickle")
        # The writer drains every few ms and flushes every 100 ms: the last allocations reach the file soon,
        # but a sanitized build on a loaded 2-core machine can take seconds; wait up to a minute.
        deadline = time.monotonic() + 60
        while True:
            r = snapshot(tool, out, pid)
            snap, by_dev = check_snapshot(out)
            if sum(by_dev.values()) == live or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        check("pytorch.org/memory_viz" in r.stdout, f"the tool's output: {r.stdout}")
        snap, by_dev = check_snapshot(out, expect_live=live)
        u = snap["uvmpool"]
        check(u["source"].endswith(f"observe-{pid}.json") and not u["trace_complete"], f"source {u}")
        check_nothing_left_out(snap, "live snapshot")
        host = u["host_device"]
        check(host == 1 and by_dev.get(host, 0) > 0 and by_dev.get(0, 0) > 0,
              f"spilled: expected live blocks on device 0 and on the host pseudo-device 1, got {by_dev}")
        check(any(s["device"] == host for s in snap["segments"]), "no host segment")
        results.append(f"live pid {pid}: {live} bytes live, {by_dev[0]} on device 0, {by_dev[host]} on host device {host}")
    finally:
        proc.communicate("go\n", timeout=120)
    check(proc.returncode == 0, f"the client failed: {proc.returncode}")
    out = os.path.join(tmp, "ended.pickle")
    snapshot(tool, out, trace.replace("%p", str(pid)))
    snap, by_dev = check_snapshot(out, expect_live=0)
    check(snap["uvmpool"]["trace_complete"], "the finished trace reads as unfinished")
    check_nothing_left_out(snap, "finished trace")
    frees = sum(e["action"] == "free_completed" for t in snap["device_traces"] for e in t)
    allocs = sum(e["action"] == "alloc" for t in snap["device_traces"] for e in t)
    check(allocs == frees and allocs >= count, f"{allocs} allocs, {frees} frees")
    results.append(f"finished trace: {allocs} allocs, all freed")
    return out


def check_demo(tool, env, demo, tmp, results):
    trace = os.path.join(tmp, "demo.json")
    e = dict(env, UVMPOOL_TRACE=trace, UVMPOOL_SIM_DEVICE_MEMORY="512M", UVMPOOL_SIM_HOST_MEMORY="1G",
             UVMPOOL_DEVICE_LIMIT="128M", UVMPOOL_HOST_LIMIT="512M")
    r = subprocess.run([demo], env=e, capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, f"the demo failed:\n{r.stdout}{r.stderr}")
    out = os.path.join(tmp, "demo.pickle")
    snapshot(tool, out, trace)
    snap, _ = check_snapshot(out, expect_live=0)
    check_nothing_left_out(snap, "demo")
    actions = {}
    for t in snap["device_traces"]:
        for x in t:
            actions[x["action"]] = actions.get(x["action"], 0) + 1
    for a in ("alloc", "free_completed", "segment_map"):
        check(actions.get(a, 0) > 0, f"demo: no {a} entries ({actions})")
    host = snap["uvmpool"]["host_device"]
    check(any(x["action"] == "alloc" for x in snap["device_traces"][host]), "demo: nothing on the host pseudo-device")
    results.append(f"demo: {actions}")
    return out


# A driver-API program through ctypes (the hooks come from uvmpool's dlsym): fills the device past its
# limit, frees, then asks for another size, so that cached mappings are shrunk and taken apart, and
# empties many slabs: every kind of map and unmap.
CHURN = """
import ctypes
cu = ctypes.CDLL("libcuda.so.1")
MB = 1 << 20
def ok(r, what):
    assert r == 0, f"{what}: {r}"
ok(cu.cuInit(0), "cuInit")
ctx = ctypes.c_void_p()
ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0), "retain")
ok(cu.cuCtxSetCurrent(ctx), "set current")
def alloc(n):
    p = ctypes.c_uint64()
    ok(cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n)), f"cuMemAlloc of {n}")
    return p.value
def free(p):
    ok(cu.cuMemFree_v2(ctypes.c_uint64(p)), "cuMemFree")
big = [alloc(16 * MB) for _ in range(24)]              # 384 MiB past a 256 MiB limit: a third spills
small = [alloc(1000 + 977 * i) for i in range(400)]    # slabs of many classes
for p in big + small:
    free(p)
mid = [alloc(24 * MB) for _ in range(12)]              # another size: cached mappings give up chunks
for p in mid:
    free(p)
print("churn ok")
"""


def check_churn(tool, env, tmp, results):
    trace = os.path.join(tmp, "churn.json")
    r = subprocess.run([sys.executable, "-c", CHURN], env=dict(env, UVMPOOL_TRACE=trace), capture_output=True,
                       text=True, timeout=300)
    check(r.returncode == 0 and "churn ok" in r.stdout, f"the churn program failed:\n{r.stdout}{r.stderr}")
    out = os.path.join(tmp, "churn.pickle")
    snapshot(tool, out, trace)
    snap, _ = check_snapshot(out, expect_live=0)
    check_nothing_left_out(snap, "churn")
    host = snap["uvmpool"]["host_device"]
    count = lambda dev, act: sum(x["action"] == act for x in snap["device_traces"][dev])
    for dev in (0, host):
        for act in ("alloc", "free_completed", "segment_map", "segment_unmap"):
            check(count(dev, act) > 0, f"churn: no {act} on device {dev}")
    check(count(0, "alloc") + count(host, "alloc") >= 436, "churn: allocations missing")
    results.append(f"churn: {count(0, 'segment_unmap')} unmaps on device 0, {count(host, 'segment_unmap')} on the host")
    return out


def check_errors(tool, tmp):
    env = {k: v for k, v in os.environ.items() if not k.startswith("UVMPOOL_")}
    sleeper = subprocess.Popen(["sleep", "60"], env=env)
    try:
        r = snapshot(tool, os.path.join(tmp, "x.pickle"), sleeper.pid, expect=1)
        check("UVMPOOL_TRACE" in r.stderr, f"no UVMPOOL_TRACE advice: {r.stderr}")
    finally:
        sleeper.kill()
        sleeper.wait()
    r = snapshot(tool, os.path.join(tmp, "x.pickle"), os.path.join(tmp, "no-such-trace.json"), expect=1)
    check("cannot read" in r.stderr, r.stderr)
    for bad in ([tool, "--snapshot", "x.pickle"], [tool, "--snapshot", "x.pickle", "1", "2"],
                [tool, "--snapshot", "x.pickle", "1", "--json"]):
        r = subprocess.run(bad, capture_output=True, text=True, timeout=30)
        check(r.returncode == 2, f"{bad[1:]}: exit {r.returncode}, expected 2")
    r = subprocess.run([tool, "--help"], capture_output=True, text=True, timeout=30)
    check("--snapshot" in r.stdout, "--help does not mention --snapshot")


def check_out_of_order(tool, tmp, results):
    """Two threads whose times disagree with what must have happened first; then a free whose
    allocation the trace lost."""
    def line(**e):
        return json.dumps(e)
    mb = 1 << 20
    events = [
        line(ph="M", name="process_name", pid=1, tid=1, ts=0, args={"name": "made up"}),
        # thread 2 (the reserve) maps a host run; thread 1 allocates in it "before" (times 50 us apart)
        line(ph="X", cat="device0", name="mapping", pid=1, tid=2, ts=100, dur=60, args={"bytes": 8 * mb, "host_bytes": 8 * mb, "address": "0x10000000"}),
        line(ph="b", cat="device0", name="allocation", pid=1, tid=1, ts=120, id="0x10000000", args={"bytes": 4 * mb, "host_bytes": 4 * mb, "address": "0x10000000"}),
        # thread 3 frees it "before" it was allocated, then a mapping straddling both tiers
        line(ph="e", cat="device0", name="allocation", pid=1, tid=3, ts=110, id="0x10000000", args={"bytes": 4 * mb}),
        line(ph="X", cat="device0", name="mapping", pid=1, tid=1, ts=200, dur=10, args={"bytes": 6 * mb, "host_bytes": 2 * mb, "address": "0x20000000"}),
        line(ph="b", cat="device0", name="allocation", pid=1, tid=1, ts=211, id="0x20000000", args={"bytes": 5 * mb, "host_bytes": mb, "address": "0x20000000"}),
        # the middle of the run given back, then a free nobody allocated (lost)
        line(ph="i", cat="device0", name="unmap", pid=1, tid=2, ts=300, s="t", args={"bytes": 2 * mb, "host_bytes": 2 * mb, "address": "0x10200000"}),
        line(ph="e", cat="device0", name="allocation", pid=1, tid=1, ts=400, id="0x30000000", args={"bytes": mb}),
        line(ph="i", cat="device0", name="out of memory", pid=1, tid=1, ts=500, s="p", args={"bytes": 1 << 40}),
    ]
    trace = os.path.join(tmp, "made-up.json")
    with open(trace, "w") as f:
        f.write("[\n" + ",\n".join(events) + "\n]\n")
    out = os.path.join(tmp, "made-up.pickle")
    snapshot(tool, out, trace)
    snap, by_dev = check_snapshot(out, expect_live=5 * mb)
    u = snap["uvmpool"]
    check(u["events_left_out"] == 1 and u["events_left_out_by_kind"]["free"] == 1, f"left out: {u}")
    check(by_dev == {0: 4 * mb, 1: mb}, f"the straddling allocation: {by_dev}")
    host_segs = sorted((s["address"], s["total_size"]) for s in snap["segments"] if s["device"] == 1)
    check(host_segs == [(0x10000000, 2 * mb), (0x10400000, 4 * mb), (0x20400000, 2 * mb)], f"host segments {host_segs}")
    check(any(x["action"] == "oom" for x in snap["device_traces"][0]), "no oom entry")
    results.append("made-up trace: reordered across threads, one lost event left out")


def main():
    preload, sim_dir, client, demo, tool, python_src = sys.argv[1:7]
    env = dict(os.environ, LD_PRELOAD=preload, LD_LIBRARY_PATH=sim_dir, UVMPOOL_DRIVER_PATH=os.path.join(sim_dir, "libcuda.so.1"),
               UVMPOOL_DEVICE_LIMIT="256M", UVMPOOL_SIM_DEVICE_MEMORY="1G")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        check_errors(tool, tmp)
        check_out_of_order(tool, tmp, results)
        ended = check_live_process(tool, env, client, tmp, results)
        demo_out = check_demo(tool, env, demo, tmp, results)
        churn_out = check_churn(tool, env, tmp, results)
        # The package's entry point writes the same file.
        again = os.path.join(tmp, "again.pickle")
        r = subprocess.run([sys.executable, "-m", "uvmpool", "snapshot", again, os.path.join(tmp, "demo.json")],
                           env=dict(os.environ, PYTHONPATH=python_src), capture_output=True, text=True, timeout=300)
        check(r.returncode == 0, f"python -m uvmpool snapshot: {r.stdout}{r.stderr}")
        a, b = pickle.load(open(again, "rb")), pickle.load(open(demo_out, "rb"))
        check(a["segments"] == b["segments"] and a["device_traces"] == b["device_traces"], "python -m uvmpool differs")
        for path in (ended, demo_out, churn_out, os.path.join(tmp, "live.pickle")):
            torch_check(path, results)
    print("snapshot: ok\n  " + "\n  ".join(results))


if __name__ == "__main__":
    main()
