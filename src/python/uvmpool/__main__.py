"""python -m uvmpool run [flags] -- command [args...]   (the uvmpool-run of the wheel)
python -m uvmpool stat [uvmpool-stat's arguments]      (the bundled uvmpool-stat)
python -m uvmpool path [--dropin]                      (where libuvmpool.so is)
python -m uvmpool snapshot OUT (TRACE.json | PID)      (a PyTorch memory snapshot of a uvmpool trace)

run's flags are uvmpool-run's, each a setting of docs/configuration.md; they are checked before the
command starts, so a bad one stops here with status 2."""
import argparse
import os
import sys

from ._locate import library_path, tool_path
from ._settings import environ

# Flag -> setting, as uvmpool-run has them (src/tools/uvmpool-run), plus the limits users reach for.
_VALUE_FLAGS = {
    "--device-limit": "device_limit", "--host-limit": "host_limit", "--stats-file": "stats_file",
    "--trace": "trace", "--log-level": "log_level", "--log-file": "log_file", "--driver": "driver_path",
}


def _run_parser():
    p = argparse.ArgumentParser(prog="python -m uvmpool run", description="Run a command on uvmpool.")
    for flag, setting in _VALUE_FLAGS.items():
        p.add_argument(flag, dest=setting, metavar="VALUE", help=f"UVMPOOL_{setting.upper()}")
    p.add_argument("--stats", action="store_true", help="UVMPOOL_STATS=1 (table at exit)")
    p.add_argument("--disable", action="store_true", help="UVMPOOL_DISABLE=1 (transparent pass-through)")
    p.add_argument("--dropin", action="store_true", help="the drop-in libcuda.so.1 instead of LD_PRELOAD")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="any UVMPOOL_* setting")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- command [args...]")
    return p


def run_main(argv=None):
    p = _run_parser()
    a = p.parse_args(sys.argv[1:] if argv is None else argv)
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not command:
        p.error("no command (put it after --)")
    settings = {s: getattr(a, s) for s in _VALUE_FLAGS.values()}
    settings.update(stats=True if a.stats else None, disable=True if a.disable else None)
    for item in a.set:
        name, eq, value = item.partition("=")
        if not eq or not name.startswith("UVMPOOL_"):
            p.error(f"--set takes UVMPOOL_NAME=VALUE, not {item!r}")
        settings[name] = value
    try:
        env = environ(dropin=a.dropin, **settings)
    except (ValueError, FileNotFoundError) as e:
        print(f"uvmpool: {e}", file=sys.stderr)
        return 2
    try:
        os.execvpe(command[0], command, env)
    except OSError as e:
        print(f"uvmpool: cannot run {command[0]}: {e.strerror}", file=sys.stderr)
        return 127


def stat_main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    tool = tool_path("uvmpool-stat")
    os.execv(tool, [tool, *args])


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["run"]:
        return run_main(args[1:])
    if args[:1] == ["stat"]:
        return stat_main(args[1:])
    if args[:1] == ["snapshot"]:
        from ._snapshot import main as snapshot_main
        return snapshot_main(args[1:])
    if args[:1] == ["path"]:
        print(library_path(dropin="--dropin" in args[1:]))
        return 0
    print(__doc__, file=sys.stderr if args[:1] not in (["-h"], ["--help"]) else sys.stdout)
    return 0 if args[:1] in (["-h"], ["--help"]) else 2


if __name__ == "__main__":
    sys.exit(main())
