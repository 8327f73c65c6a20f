"""Where uvmpool's files are: bundled in the wheel (uvmpool/_native, laid out as an installation),
else an installation found through the tools on PATH (bin/ beside lib/), else the usual prefixes."""
import os
import shutil

_NATIVE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native")
_PREFIXES = ("/usr/local", "/usr")
_LIBDIRS = ("lib", "lib64", "lib/x86_64-linux-gnu")


def _prefixes():
    yield _NATIVE
    for tool in ("uvmpool-stat", "uvmpool-options"):
        found = shutil.which(tool)
        if found:
            yield os.path.dirname(os.path.dirname(os.path.realpath(found)))
    yield from _PREFIXES


def library_path(dropin=False):
    """The absolute path of libuvmpool.so (dropin=True: of the drop-in libcuda.so.1)."""
    name = os.path.join("uvmpool", "dropin", "libcuda.so.1") if dropin else "libuvmpool.so"
    for prefix in _prefixes():
        for libdir in _LIBDIRS:
            path = os.path.join(prefix, libdir, name)
            if os.path.isfile(path):
                return path
    raise FileNotFoundError(
        f"cannot find {os.path.basename(name)}: install the uvmpool wheel (scripts/wheel.sh), or uvmpool "
        "itself (cmake --install) with its bin/ on PATH")


def tool_path(name):
    """The absolute path of one of uvmpool's programs (uvmpool-stat, uvmpool-options, uvmpool-run)."""
    bundled = os.path.join(_NATIVE, "bin", name)
    if os.path.isfile(bundled):
        return bundled
    for prefix in _prefixes():
        path = os.path.join(prefix, "bin", name)
        if os.access(path, os.X_OK):
            return path
    raise FileNotFoundError(f"cannot find {name}: install the uvmpool wheel, or put uvmpool's bin/ on PATH")
