"""What the scoreboard's Python benchmarks share (tests/gpu/score_*.py, run by scripts/scoreboard.sh).

Each benchmark runs its baselines and uvmpool as child processes of itself (uvmpool must be preloaded
from the start, so a child per configuration), and prints one line per scoreboard row:

  UVMPOOL_SCORE {"row": "4a", "what": ..., "uvmpool": ..., "baseline": ..., "ratio": 1.01,
                 "ratio_is": "uvmpool / native step time", "target": "<= 1.02", "met": true,
                 "ceiling": ...}

scripts/scoreboard_table.py gathers those lines into the one table. A child reports with one line
"UVMPOOL_CHILD_RESULT <json>"; run_child() finds it.

Device memory and fairness: PyTorch's caps (set_per_process_memory_fraction, accelerate's max_memory)
bound the memory of PyTorch's allocator; UVMPOOL_DEVICE_LIMIT bounds everything the process holds on
the device, the CUDA context and libraries included. So where uvmpool is given "the same device
memory" as a baseline, its limit is the baseline's cap plus the context overhead measured in the same
run (device memory in use minus what PyTorch's allocator reserved, in a native child): both get the
same bytes for tensors.
"""
import ctypes, json, os, subprocess, sys, threading, time

MIB = 1 << 20
GIB = 1 << 30
CHILD_RESULT = "UVMPOOL_CHILD_RESULT "
SCORE = "UVMPOOL_SCORE "


def score(row, what, uvmpool, baseline, ratio, ratio_is, target, met, ceiling):
    """One scoreboard row. ratio: a number or None (not measured); met: True, False or None."""
    line = {"row": row, "what": what, "uvmpool": uvmpool, "baseline": baseline,
            "ratio": None if ratio is None else round(float(ratio), 4), "ratio_is": ratio_is,
            "target": target, "met": met, "ceiling": ceiling}
    print(SCORE + json.dumps(line), flush=True)


def child_result(result):
    print(CHILD_RESULT + json.dumps(result), flush=True)


def base_env():
    """The environment without uvmpool or PyTorch allocator settings: the native baseline's."""
    return {k: v for k, v in os.environ.items()
            if k not in ("LD_PRELOAD", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_NO_CUDA_MEMORY_CACHING")
            and not k.startswith("UVMPOOL_")}


def uvmpool_env(lib, limit_bytes=None, spill=True, **extra):
    env = dict(base_env(), LD_PRELOAD=os.path.abspath(lib), UVMPOOL_LOG_LEVEL="error")
    # The tiering, carving and trace settings come from the caller (UVMPOOL_TIERING=auto bash
    # scripts/scoreboard.sh; UVMPOOL_CARVE_MAX=0 for the stitched pool; UVMPOOL_EXTENT_SIZE=64M;
    # UVMPOOL_TRACE=f-%p.json to record the launch sequences; UVMPOOL_STATS_FILE=st-%p.json to read what
    # tiering did; UVMPOOL_LOG_LEVEL=info with UVMPOOL_LOG_FILE=f for its decisions): every uvmpool run of
    # the scoreboard uses them.
    env.update({k: v for k, v in os.environ.items()
                if k.startswith(("UVMPOOL_TIERING", "UVMPOOL_TRACE", "UVMPOOL_CARVE", "UVMPOOL_EXTENT", "UVMPOOL_STATS_FILE",
                                 "UVMPOOL_LOG"))})
    if limit_bytes is not None:
        env["UVMPOOL_DEVICE_LIMIT"] = f"{int(limit_bytes) // MIB}M"
    if not spill:
        env["UVMPOOL_SPILL"] = "0"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_child(cmd, env, timeout, label, echo=True):
    """Runs one child; returns (result dict or None, exit status or 'timeout', wall seconds, output)."""
    desc = " ".join(f"{k}={env[k]}" for k in ("LD_PRELOAD", "UVMPOOL_DEVICE_LIMIT", "UVMPOOL_SPILL", "UVMPOOL_TIERING",
                                               "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_NO_CUDA_MEMORY_CACHING")
                    if k in env)
    print(f"== {label}: {desc or 'native'}", flush=True)
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
        out, code = p.stdout, p.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        code = "timeout"
    wall = time.perf_counter() - t0
    result = None
    for line in out.splitlines():
        if line.startswith(CHILD_RESULT):
            result = json.loads(line[len(CHILD_RESULT):])
    if echo:
        kept = [l for l in out.splitlines() if not l.startswith(CHILD_RESULT)]
        sys.stdout.write("\n".join(kept[-25:]) + "\n")
        print(f"== {label}: exit {code}, {wall:.1f} s", flush=True)
    return result, code, wall, out


def run_mode(cmd, mode, env, timeout):
    """Runs `cmd --child mode` (run_child): (its result, None), or (None, why not) when it printed none or
    a uvmpool mode ran without uvmpool loaded."""
    r, code, wall, out = run_child(cmd + ["--child", mode], env, timeout, mode)
    if r is None:
        tail = (out.strip().splitlines() or [""])[-1][:160]
        return None, f"{mode} failed (exit {code}): {tail}"
    if mode.startswith("uvmpool") and not r["uvmpool"]:
        return None, f"{mode}: uvmpool was not loaded"
    return r, None


def uvmpool_report():
    """uvmpool's figures in this process (uvmpool_stats_json), or None when uvmpool is not loaded."""
    for lib in (None, "libcuda.so.1"):
        try:
            handle = ctypes.CDLL(lib, mode=os.RTLD_NOLOAD) if lib else ctypes.CDLL(None)
            fn = handle.uvmpool_stats_json
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_ulonglong
        fn.argtypes = [ctypes.c_char_p, ctypes.c_ulonglong]
        # The figures change while the program runs (the mover's thread counts on): a number may gain a
        # digit between the two calls, and a text cut short is not JSON. Asked again until it fits.
        n = fn(None, 0)
        while True:
            buf = ctypes.create_string_buffer(n + 4096)
            n = fn(buf, len(buf))
            if n < len(buf):
                return json.loads(buf.value.decode())
    return None


def device_figures(report, device=0):
    """The device entry of a uvmpool report (dict), or {}."""
    if not report:
        return {}
    for d in report.get("devices", []):
        if d.get("device", 0) == device:
            return d
    return {}


def context_overhead_bytes(torch):
    """Device memory this process holds beyond PyTorch's allocator (context, libraries): call it in a
    native child with the GPU otherwise idle, after the work ran."""
    free, total = torch.cuda.mem_get_info()
    return max(0, total - free - torch.cuda.memory_reserved())


class PcieMeter:
    """Bytes over PCIe (both directions) while running, from NVML's throughput counters: each
    nvmlDeviceGetPcieThroughput call reads a byte counter over 20 ms, so the sampler integrates
    KB/s x elapsed time; good to a few percent for phases of a second or more. None if NVML is missing."""

    def __init__(self, index=0):
        self.tx = self.rx = 0.0
        self.ok = False
        try:
            import pynvml
            pynvml.nvmlInit()
            self._nvml = pynvml
            self._h = pynvml.nvmlDeviceGetHandleByIndex(index)
            pynvml.nvmlDeviceGetPcieThroughput(self._h, pynvml.NVML_PCIE_UTIL_TX_BYTES)
            self.ok = True
        except Exception as e:  # no pynvml, no NVML, no permission: the figure is left out
            self.error = f"{type(e).__name__}: {e}"

    def _loop(self):
        n = self._nvml
        last = time.perf_counter()
        while not self._stop.is_set():
            tx = n.nvmlDeviceGetPcieThroughput(self._h, n.NVML_PCIE_UTIL_TX_BYTES)
            rx = n.nvmlDeviceGetPcieThroughput(self._h, n.NVML_PCIE_UTIL_RX_BYTES)
            now = time.perf_counter()
            self.tx += tx * 1024.0 * (now - last)
            self.rx += rx * 1024.0 * (now - last)
            last = now

    def __enter__(self):
        self.tx = self.rx = 0.0
        if self.ok:
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self.ok:
            self._stop.set()
            self._thread.join()

    def total(self):
        return self.tx + self.rx if self.ok else None


def fmt_bytes(b):
    if b is None:
        return "n/a"
    return f"{b / GIB:.2f} GiB" if b >= GIB else f"{b / MIB:.0f} MiB"


def lib_path(arg):
    lib = arg or os.environ.get("UVMPOOL_LIB") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                              "build", "lib", "libuvmpool.so")
    lib = os.path.abspath(lib)
    if not os.path.isfile(lib):
        sys.exit(f"no libuvmpool.so at {lib} (use --lib or UVMPOOL_LIB)")
    return lib


class Phases:
    """Where a training step's time goes: with SCORE_PHASES=1 in a child's environment, the step
    waits for the GPU after each phase (forward, backward, optimizer) and prints one line a step with
    each phase's milliseconds and, under uvmpool, what tiering did in it (launches that read spilled
    memory in place, bytes promoted and demoted, epochs, and the mover's milliseconds at each step of
    its epochs: tiering_mover_time). The waits cost a little overlap between phases, so step times
    printed with phases on are not the row's figures. Off (the default), mark() does nothing."""

    KEYS = (("launches_in_place", "in_place"), ("tiering_promoted_bytes", "promoted"),
            ("tiering_demoted_bytes", "demoted"), ("tiering_epochs", "epochs"), ("launches_read", "launches"))

    def __init__(self, torch):
        self.on = os.environ.get("SCORE_PHASES") == "1"
        self._torch = torch
        self._rows = []

    def _now(self):
        self._torch.cuda.synchronize()
        report = uvmpool_report()
        return time.perf_counter(), (report or {}).get("process", {})

    def start(self):
        if self.on:
            self._rows = []
            self._last = self._now()

    def mark(self, name):
        if not self.on:
            return
        now = self._now()
        (t0, s0), (t1, s1) = self._last, now
        row = [f"{name} {(t1 - t0) * 1e3:.0f} ms"]
        for key, label in self.KEYS:
            if key in s1:
                d = s1[key] - s0.get(key, 0)
                row.append(f"{label} {fmt_bytes(d) if key.endswith('bytes') else d}")
        t1s, t0s = s1.get("tiering_mover_time", {}), s0.get("tiering_mover_time", {})
        for step in ("preparing", "draining", "copying", "remapping", "waiting_for_pool", "closing_gate"):
            ms = (t1s.get(step, 0) - t0s.get(step, 0)) / 1e3
            if ms >= 1:
                row.append(f"{step} {ms:.0f} ms")
        self._rows.append(", ".join(row))
        self._last = now

    def print(self, step):
        if self.on:
            print(f"phases of step {step}: " + " | ".join(self._rows), flush=True)
