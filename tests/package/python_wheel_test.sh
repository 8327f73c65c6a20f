#!/bin/sh
# usage: python_wheel_test.sh BUILD_DIR SIM_DIR CLIENT
# Builds the wheel from this build (scripts/wheel.sh --no-build), installs it into a fresh virtual
# environment with nothing else, and runs python_checks.py there on the simulated driver. Then
# installs src/python from the source tree (no binaries) and checks that it finds the build's files.
set -eu
build=$(realpath "$1") sim=$(realpath "$2") client=$(realpath "$3")
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

BUILD_DIR=$build DIST_DIR=$tmp/dist bash "$root/scripts/wheel.sh" --no-build >"$tmp/wheel.log" 2>&1 ||
  { cat "$tmp/wheel.log"; exit 1; }
wheel=$(ls "$tmp"/dist/uvmpool-*-py3-none-linux_*.whl)
for f in uvmpool/__init__.py uvmpool/_native/lib/libuvmpool.so uvmpool/_native/lib/uvmpool/dropin/libcuda.so.1 \
         uvmpool/_native/bin/uvmpool-stat uvmpool/_native/bin/uvmpool-run uvmpool/_native/bin/uvmpool-options; do
  python3 -m zipfile -l "$wheel" | grep -q " *$f " || { echo "not in the wheel: $f"; exit 1; }
done

python3 -m venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install --quiet --no-index --no-deps "$wheel"
"$tmp/venv/bin/uvmpool-stat" --version
LD_LIBRARY_PATH=$sim "$tmp/venv/bin/python" "$here/python_checks.py" "$client" "$tmp/venv/lib"

# From the source tree: pure Python, finding uvmpool through its tools on PATH (here the build's bin/).
# A copy, with the CMakeLists.txt its version comes from: pip builds in the tree it is given.
mkdir -p "$tmp/tree/src" && cp "$root/CMakeLists.txt" "$tmp/tree/" && cp -r "$root/src/python" "$tmp/tree/src/"
python=$(command -v /usr/bin/python3 || command -v python3)  # with Debian's setuptools and wheel (wheel.sh)
"$python" -m pip install --quiet --no-build-isolation --no-deps --target "$tmp/src-install" "$tmp/tree/src/python" \
  >"$tmp/pip.log" 2>&1 || { cat "$tmp/pip.log"; exit 1; }
found=$(cd "$tmp" && PYTHONPATH=$tmp/src-install PATH=$build/bin:$PATH python3 -m uvmpool path)
[ "$(realpath "$found")" = "$(realpath "$build/lib/libuvmpool.so")" ] || { echo "source install found $found"; exit 1; }
echo "wheel and source install: ok"
