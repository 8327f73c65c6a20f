#!/usr/bin/env python3
"""Fails when a shared object exports anything but what it should.
usage: check_exports.py preload LIBUVMPOOL DRIVER_FUNCTIONS_TXT
       check_exports.py dropin  LIBCUDA_DROPIN STUB_LIBCUDA
       check_exports.py sim     LIBCUDA_SIM DRIVER_FUNCTIONS_TXT"""
import re, subprocess, sys

def exports(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True, capture_output=True, text=True).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}

def listed(path, hooked_only):
    rows = [l.split("#", 1)[0].split() for l in open(path)]
    return {r[2] for r in rows if r and (r[3] == "Hook" or not hooked_only)}

mode, lib, ref = sys.argv[1:4]
have = exports(lib)
public_api = {s for s in have if s.startswith("uvmpool_")}
if mode == "preload":
    want = listed(ref, hooked_only=True) | {"dlsym"}
elif mode == "dropin":
    want = exports(ref)
elif mode == "sim":
    want = listed(ref, hooked_only=False)
    public_api = {s for s in have if s.startswith("uvmpool_sim_")}
else:
    sys.exit(f"unknown mode {mode}")
if mode != "sim" and not {"uvmpool_version", "uvmpool_get_stats", "uvmpool_hook_calls"} <= public_api:
    sys.exit(f"{lib}: public C API missing, exported: {sorted(public_api)}")
extra = have - want - public_api
missing = want - have
for name, items in (("exports what it should not", extra), ("does not export", missing)):
    if items:
        print(f"{lib} {name}: {' '.join(sorted(items)[:40])}{' ...' if len(items) > 40 else ''}")
if extra or missing:
    sys.exit(1)
print(f"{lib}: exports exactly the {len(want)} expected symbols and {len(public_api)} of the public API")
