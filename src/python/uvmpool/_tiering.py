"""prefetch() and advise(): the interface tiering will fill. Tiering (moving chunks between device
and host memory) has not landed in uvmpool yet, so both check their arguments and do nothing, with a
warning that says so once per process."""
import warnings

_TIERS = ("device", "host")
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


def _not_yet(what):
    if what not in _warned:
        _warned.add(what)
        warnings.warn(f"uvmpool.{what}: tiering has not landed in uvmpool yet, so nothing is moved "
                      "(memory stays where it was placed)", RuntimeWarning, stacklevel=3)


def prefetch(x, size=None, to="device", stream=None):
    """Move a range to a tier ahead of use (once tiering exists; a no-op with a warning until then)."""
    _range(x, size)
    if to not in _TIERS:
        raise ValueError(f"to={to!r}: expected 'device' or 'host'")
    _not_yet("prefetch")


def advise(x, size=None, prefer="device"):
    """Say where a range should live (once tiering exists; a no-op with a warning until then)."""
    _range(x, size)
    if prefer not in _TIERS:
        raise ValueError(f"prefer={prefer!r}: expected 'device' or 'host'")
    _not_yet("advise")
