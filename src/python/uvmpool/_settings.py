"""uvmpool.environ(): settings checked by the library's own parser (uvmpool-options --validate reads
src/config/options.def through the same code the library runs), so a typo or a malformed value fails
here, in the parent, and not in the child."""
import json
import os
import subprocess

from ._locate import library_path, tool_path


def _variable(key):
    name = key.upper()
    return name if name.startswith("UVMPOOL_") else "UVMPOOL_" + name


def _text(value):
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def check_settings(variables):
    """Raises ValueError with the library's own messages unless every UVMPOOL_* setting is known and valid."""
    if not variables:
        return
    args = [f"{name}={value}" for name, value in variables.items()]
    r = subprocess.run([tool_path("uvmpool-options"), "--validate", *args], capture_output=True, text=True,
                       timeout=30)
    try:
        verdict = json.loads(r.stdout)
    except ValueError:
        raise RuntimeError(f"uvmpool-options --validate failed: {r.stdout}{r.stderr}") from None
    problems = verdict.get("errors", []) + verdict.get("unknown", [])
    if problems:
        raise ValueError("; ".join(problems))


def environ(base=None, dropin=False, **settings):
    """An environment for subprocess that runs the child on uvmpool.

    Each keyword is a setting of docs/configuration.md, lower case without its prefix
    (device_limit="40G", stats=True, set as UVMPOOL_DEVICE_LIMIT=40G, UVMPOOL_STATS=1); None leaves a
    setting out. base is the environment to start from (os.environ by default). The child is preloaded
    with libuvmpool.so, or with dropin=True finds the drop-in libcuda.so.1 first on its library path.
    """
    variables = {_variable(k): _text(v) for k, v in settings.items() if v is not None}
    check_settings(variables)
    env = dict(os.environ if base is None else base)
    env.update(variables)
    if dropin:
        folder = os.path.dirname(library_path(dropin=True))
        env["LD_LIBRARY_PATH"] = folder + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    else:
        lib = library_path()
        env["LD_PRELOAD"] = lib + (":" + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
    return env
