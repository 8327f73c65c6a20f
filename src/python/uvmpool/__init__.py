"""uvmpool from Python: run programs on it, and read what it does.

    import subprocess, uvmpool
    subprocess.run(cmd, env=uvmpool.environ(device_limit="40G", stats=True))
    uvmpool.stats(pid)             # a running process's figures (this process's with no pid)
    bar.set_postfix_str(uvmpool.postfix())
    uvmpool.snapshot("trace.json", "snap.pickle")   # a PyTorch memory snapshot (pytorch.org/memory_viz)

Pure Python: ctypes for this process's figures, uvmpool's own tools for everything else. No torch
needed; prefetch/advise take torch tensors, or a pointer and a size.
"""
from ._locate import library_path
from ._settings import environ
from ._snapshot import snapshot
from ._stats import loaded, postfix, stats, version
from ._tiering import advise, prefetch

__all__ = ["advise", "environ", "library_path", "loaded", "postfix", "prefetch", "snapshot", "stats", "version"]
