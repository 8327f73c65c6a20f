"""Advice and prefetches on a GPU (docs/tiering.md "Advice and prefetches").

    python3 tests/gpu/advice_check.py --lib .carry/build/lib/libuvmpool.so

Three children: the driver alone answers cuMemPrefetchAsync / cuMemAdvise on cudaMalloc'd memory (no
managed memory: the answer the simulated driver copies); under uvmpool with UVMPOOL_TIERING=auto a
1 GiB tensor is prefetched to host memory and back through cuMemPrefetchAsync_v2, its values checked
after each move and a sum over it timed in each tier; with remote the same calls are accepted and
nothing moves. Prints one JSON line per child.
"""
import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import ctypes, json, os, sys, time
import torch

class Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]

HOST, DEVICE = Location(2, 0), Location(1, 0)
cu = ctypes.CDLL("libcuda.so.1")
prefetch = cu.cuMemPrefetchAsync_v2
prefetch.argtypes = [ctypes.c_ulonglong, ctypes.c_size_t, Location, ctypes.c_uint, ctypes.c_void_p]
advise = cu.cuMemAdvise_v2
advise.argtypes = [ctypes.c_ulonglong, ctypes.c_size_t, ctypes.c_int, Location]
out = {"child": sys.argv[1]}

def figure(name):
    try:
        f = ctypes.CDLL(None).uvmpool_stats_json
    except AttributeError:
        return None
    f.restype = ctypes.c_ulonglong
    n = f(None, 0) + 4096
    buf = ctypes.create_string_buffer(n)
    f(buf, n)
    j = json.loads(buf.value.decode())
    return j.get("process", j).get(name)

def wait_figure(name, at_least):
    # (the figure, seconds waited): until it reaches at_least (auto), or at once (otherwise)
    t = time.perf_counter()
    deadline = time.time() + 20
    while sys.argv[1] == "auto" and time.time() < deadline and (figure(name) or 0) < at_least:
        torch.cuda.synchronize()
        time.sleep(0.005)
    return figure(name), round(time.perf_counter() - t, 3)

def timed_sum(x, reps=5):
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        s = x.sum()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / reps * 1e3, float(s)

n = 1 << 28  # 1 GiB of float32
x = torch.full((n,), 0.5, device="cuda")
ptr, size = x.data_ptr(), x.nbytes
timed_sum(x)  # warm-up
out["sum_ms_start"], s = timed_sum(x)
out["prefetch_host"] = prefetch(ptr, size, HOST, 0, None)
out["advise_read_mostly"] = advise(ptr, size, 1, DEVICE)
if figure("tiering_demoted_bytes") is not None:
    out["demoted_bytes"], out["demotion_s"] = wait_figure("tiering_demoted_bytes", size)
    out["sum_ms_in_host"], s = timed_sum(x)
    out["values_after_demotion"] = s == 0.5 * n
    out["prefetch_device"] = prefetch(ptr, size, DEVICE, 0, None)
    out["promoted_bytes"], out["promotion_s"] = wait_figure("tiering_promoted_bytes", size)
    out["sum_ms_back_on_device"], s = timed_sum(x)
    out["values_after_promotion"] = s == 0.5 * n
    out["epochs"] = figure("tiering_epochs")
    out["prefetches"] = figure("tiering_prefetches")
print(json.dumps(out))
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    args = ap.parse_args()
    lib = os.path.abspath(args.lib)
    for name, env in [("driver", {}),
                      ("auto", {"LD_PRELOAD": lib, "UVMPOOL_TIERING": "auto"}),
                      ("remote", {"LD_PRELOAD": lib, "UVMPOOL_TIERING": "remote"})]:
        r = subprocess.run([sys.executable, "-c", CHILD, name], env={**os.environ, **env}, capture_output=True,
                           text=True, timeout=240)
        line = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
        print(line if r.returncode == 0 else json.dumps({"child": name, "exit": r.returncode, "stderr": r.stderr[-2000:]}))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
