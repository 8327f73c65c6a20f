"""prefetch() and advise(): uvmpool_prefetch and uvmpool_advise of the C API (include/uvmpool/uvmpool.h,
docs/tiering.md "Advice and prefetches"), for torch tensors or a pointer and a size."""
import ctypes
import warnings

from ._stats import _api

_TIERS = {"device": 0, "host": 1}  # UVMPOOL_TIER_DEVICE, UVMPOOL_TIER_HOST
_warned = set()


def _range(x, size):
    """(pointer, bytes) from a pointer and a size, or from anything with data_ptr() and nbytes (a torch tensor)."""
    if hasattr(x, "data_ptr"):
        return int(x.data_ptr()), int(x.nbytes if size is None else size)
    if isinstance(x, tuple) and len(x) == 2 and size is None:
        x, size = x
    if not isinstance(x, int) or not isinstance(size, int) or x < 0 or size < 0:
        raise TypeError("expected a pointer and a size, or an object with data_ptr() and nbytes (a torch tensor)")
    return x, size


def _warn_once(what, why):
    if what not in _warned:
        _warned.add(what)
        warnings.warn(f"uvmpool.{what}: {why}", RuntimeWarning, stacklevel=3)


def _call(name, ptr, size, value):
    """The C function's answer: 0 acted, 1 accepted without effect, -1 refused; None without uvmpool."""
    lib = _api()
    if lib is None:
        _warn_once(name, "uvmpool is not loaded in this process, so nothing is moved")
        return None
    fn = getattr(lib, f"uvmpool_{name}", None)
    if fn is None:
        _warn_once(name, "this uvmpool predates tiering (0.5), so nothing is moved")
        return None
    fn.argtypes = [ctypes.c_ulonglong, ctypes.c_ulonglong, ctypes.c_int]
    fn.restype = ctypes.c_int
    answer = fn(ptr, size, value)
    if answer < 0:
        raise ValueError(f"uvmpool.{name}: [{ptr:#x}, +{size}) is not all live memory of uvmpool's pool")
    return answer


def prefetch(x, size=None, to="device", stream=None):
    """Move a range of pool memory to a tier at the mover's next epoch, after the work queued so far
    (as cuMemPrefetchAsync). True when a move was asked for; False when none was needed or can be
    made (already there, UVMPOOL_TIERING not auto); None when uvmpool is not loaded. `stream` is
    accepted for symmetry with torch APIs: the epoch comes after the work of every stream."""
    ptr, size = _range(x, size)
    if to not in _TIERS:
        raise ValueError(f"to={to!r}: expected 'device' or 'host'")
    answer = _call("prefetch", ptr, size, _TIERS[to])
    return None if answer is None else answer == 0


def advise(x, size=None, prefer="device"):
    """Say where a range of pool memory should lie: 'device' (never demoted to make room), 'host'
    (never promoted: read in place), or None (the policy decides again). True when kept; False when
    tiering is off; None when uvmpool is not loaded."""
    ptr, size = _range(x, size)
    if prefer is not None and prefer not in _TIERS:
        raise ValueError(f"prefer={prefer!r}: expected 'device', 'host' or None")
    answer = _call("advise", ptr, size, -1 if prefer is None else _TIERS[prefer])
    return None if answer is None else answer == 0
