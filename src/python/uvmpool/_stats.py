"""uvmpool's figures from Python: this process's through the C API (ctypes), another's through
uvmpool-stat --json, which reads the segment it publishes (docs/observability.md)."""
import ctypes
import json
import os
import subprocess

from ._locate import tool_path


def _api():
    """uvmpool's exported API in this process (preloaded, or the drop-in libcuda.so.1), or None."""
    scopes = [lambda: ctypes.CDLL(None)]
    # The drop-in is usually opened privately (RTLD_LOCAL) by the CUDA runtime: look it up by name,
    # without loading it if it is not there.
    scopes.append(lambda: ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD))
    for scope in scopes:
        try:
            lib = scope()
            lib.uvmpool_stats_json  # noqa: B018 (raises AttributeError when absent)
            return lib
        except (OSError, AttributeError):
            continue
    return None


def loaded():
    """Whether uvmpool serves this process's device memory."""
    return _api() is not None


def version():
    """uvmpool's version in this process, or None when it is not loaded."""
    lib = _api()
    if lib is None:
        return None
    lib.uvmpool_version.restype = ctypes.c_char_p
    return lib.uvmpool_version().decode()


def stats(pid=None):
    """The live figures as a dict (the shape of UVMPOOL_STATS_FILE's JSON).

    pid None: this process's, or None when uvmpool is not loaded here. Another pid: read from the
    segment it publishes; ProcessLookupError when there is none (not a uvmpool process, or another
    user's without root).
    """
    if pid is None or pid == os.getpid():
        lib = _api()
        if lib is None:
            return None
        f = lib.uvmpool_stats_json
        f.restype, f.argtypes = ctypes.c_ulonglong, [ctypes.c_char_p, ctypes.c_ulonglong]
        buf = ctypes.create_string_buffer(f(None, 0) + 4096)  # figures may grow between the two calls
        f(buf, len(buf))
        return json.loads(buf.value)
    r = subprocess.run([tool_path("uvmpool-stat"), "--json", str(int(pid))], capture_output=True, text=True,
                       timeout=30)
    if r.returncode != 0:
        raise ProcessLookupError(r.stderr.strip() or f"uvmpool-stat exited {r.returncode}")
    return json.loads(r.stdout)


def _size(n):
    for unit, scale in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return f"{n}B"


def postfix(figures=None):
    """One line for a progress bar: "gpu 12.3G · host 1.1G · spilled 3" (live bytes in device memory,
    in host memory, allocations spilled), summed over devices; figures: a stats() dict (default: this
    process's). With tqdm: bar.set_postfix_str(uvmpool.postfix())."""
    if figures is None:
        figures = stats()
    if figures is None:
        return "uvmpool not loaded"
    devices = figures.get("devices", [])
    live = sum(d.get("live_bytes", 0) for d in devices)
    host = sum(d.get("live_host_bytes", 0) for d in devices)
    spilled = sum(d.get("spilled_allocations", 0) for d in devices)
    return f"gpu {_size(live - host)} · host {_size(host)} · spilled {spilled}"
