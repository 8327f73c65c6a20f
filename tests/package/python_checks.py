"""The uvmpool package as a user meets it, run with the Python of a fresh venv that holds only the
wheel (python_wheel_test.sh), on the simulated driver (LD_LIBRARY_PATH).

usage: python_checks.py CLIENT SITE_DIR
"""
import os
import re
import subprocess
import sys
import time
import warnings

import uvmpool


def fail(msg):
    print("FAILED: " + msg)
    sys.exit(1)


def expect_refused(why, **settings):
    try:
        uvmpool.environ(**settings)
    except ValueError as e:
        if why not in str(e):
            fail(f"environ({settings}) refused with {e!r}, expected {why!r}")
        return
    fail(f"environ({settings}) was accepted")


def run(*args, **kw):
    return subprocess.run([sys.executable, "-m", "uvmpool", "run", *args], capture_output=True, text=True,
                          timeout=60, **kw)


def main():
    client, site = sys.argv[1:3]
    lib = uvmpool.library_path()
    if not os.path.realpath(lib).startswith(os.path.realpath(site)):
        fail(f"library_path() is {lib}, not the wheel's")
    if uvmpool.loaded() or uvmpool.stats() is not None or uvmpool.postfix() != "uvmpool not loaded":
        fail("uvmpool reported as loaded in a process that did not load it")

    # Names and values go through the library's own table and parser.
    expect_refused("did you mean UVMPOOL_DEVICE_LIMIT", device_limt="4G")
    expect_refused("UVMPOOL_DEVICE_LIMIT='12X' is not valid", device_limit="12X")
    expect_refused("UVMPOOL_STATS_INTERVAL", stats_interval=5)
    env = uvmpool.environ(base={}, device_limit="40G", stats=True, trace=None)
    if env != {"UVMPOOL_DEVICE_LIMIT": "40G", "UVMPOOL_STATS": "1", "LD_PRELOAD": lib}:
        fail(f"environ() gave {env}")
    r = run("--set", "UVMPOOL_DEVICE_LIMIT=12X", "--", "true")
    if r.returncode != 2 or "is not valid" not in r.stderr:
        fail(f"a bad --set: exit {r.returncode}, {r.stderr!r}")

    # A child through `python -m uvmpool run`, its figures read back from its segment.
    child = subprocess.Popen([sys.executable, "-m", "uvmpool", "run", "--device-limit", "256M", "--set",
                              "UVMPOOL_SIM_DEVICE_MEMORY=1G", "--set", "UVMPOOL_STATS_INTERVAL=10", "--", client,
                              "--hold"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        m = re.match(r"ready (\d+) (\d+) (\d+)", child.stdout.readline())
        if not m:
            fail(f"the child did not get ready: {child.stderr.read() if child.poll() is not None else ''}")
        pid, live = int(m.group(1)), int(m.group(2))
        for _ in range(300):
            figures = uvmpool.stats(pid)
            dev = figures["devices"][0] if figures["devices"] else {}
            if dev.get("live_bytes") == live:
                break
            time.sleep(0.01)
        if figures["pid"] != pid or dev.get("live_bytes") != live or not 0 < dev["live_host_bytes"] < live:
            fail(f"stats({pid}): {figures}")
        line = uvmpool.postfix(figures)
        if not re.fullmatch(r"gpu \d+\.\dM · host \d+\.\d[MG] · spilled [1-9]\d*", line):
            fail(f"postfix: {line!r}")
    finally:
        out, err = child.communicate("go\n", timeout=60)
    if child.returncode != 0:
        fail(f"the child exited {child.returncode}: {out}{err}")
    try:
        uvmpool.stats(pid)
        fail("stats() of an ended process answered")
    except ProcessLookupError:
        pass

    # Inside a process that runs on uvmpool: loaded, its own figures, prefetch and advise on pool memory
    # (UVMPOOL_TIERING=auto, the default: a move asked), refused on memory not the pool's.
    inner = ("import ctypes, os, uvmpool\n"
             "assert uvmpool.loaded() and uvmpool.version()\n"
             "assert uvmpool.stats()['pid'] == os.getpid()\n"
             "cu = ctypes.CDLL('libcuda.so.1')\n"
             "ctx, p = ctypes.c_void_p(), ctypes.c_ulonglong()\n"
             "assert cu.cuInit(0) == 0 and cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0\n"
             "assert cu.cuCtxSetCurrent(ctx) == 0 and cu.cuMemAlloc_v2(ctypes.byref(p), 1 << 20) == 0\n"
             "assert uvmpool.prefetch((p.value, 1 << 20), to='host') is True\n"
             "assert uvmpool.advise((p.value, 1 << 20), prefer='host') is True\n"
             "assert uvmpool.advise((p.value, 1 << 20), prefer=None) is True\n"
             "try:\n"
             "    uvmpool.prefetch((4096, 1 << 20)); raise SystemExit('a range not the pool\\'s accepted')\n"
             "except ValueError:\n"
             "    pass\n"
             "assert cu.cuMemFree_v2(p) == 0\n"
             "print('inner ok', uvmpool.postfix())\n")
    r = run("--", sys.executable, "-c", inner)
    if r.returncode != 0 or "inner ok gpu 0B · host 0B · spilled 0" not in r.stdout:
        fail(f"inside uvmpool: exit {r.returncode}: {r.stdout}{r.stderr}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for bad in [dict(x="tensor"), dict(x=(1, 2), to="gpu")]:
            try:
                uvmpool.prefetch(**bad)
                fail(f"prefetch({bad}) accepted")
            except (TypeError, ValueError):
                pass
    print(f"python package: ok (child {pid}, {live} bytes live; {line})")


if __name__ == "__main__":
    main()
