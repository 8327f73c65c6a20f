#!/usr/bin/env bash
# Builds uvmpool and writes the Python wheel into dist/ (DIST_DIR to change): the package of
# src/python with libuvmpool.so, the drop-in libcuda.so.1 and the tools bundled as an installation
# under uvmpool/_native (bin/, lib/). --no-build packages an existing build (BUILD_DIR, default build).
# The wheel is tagged for this platform; uvmpool-stat needs libcpp-httplib's own libraries (OpenSSL,
# zlib, brotli) on the machine, as any Debian or Ubuntu has them.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${1:-}" = "--no-build" ] || bash scripts/build.sh
build=${BUILD_DIR:-build}
dist=$(realpath -m "${DIST_DIR:-dist}")
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

cp -r src/python/. "$stage/"
rm -rf "$stage"/build "$stage"/*.egg-info "$stage"/uvmpool/__pycache__
native=$stage/uvmpool/_native
cmake --install "$build" --prefix "$native" --strip >/dev/null
# What a Python user runs: the libraries and the tools, not the headers, CMake/pkg-config files or the demo.
rm -rf "$native/include" "$native"/lib*/cmake "$native"/lib*/pkgconfig "$native/bin/uvmpool-demo"
# uvmpool-stat's HTTP library is not on every machine: it travels along (found through $ORIGIN/../lib).
httplib=$(ldd "$native/bin/uvmpool-stat" | awk '/libcpp-httplib/ { print $3 }')
[ -n "$httplib" ] && cp -L "$httplib" "$native/lib/"
"$native/bin/uvmpool-stat" --version | awk '{ print $NF }' >"$native/VERSION"

mkdir -p "$dist"
# Debian's Python has the setuptools and wheel that install-deps.sh installs; another python3 first on
# PATH (pyenv, conda) may have neither, and nothing may be downloaded.
python=${PYTHON:-$(command -v /usr/bin/python3 || command -v python3)}
"$python" -m pip wheel --quiet --no-build-isolation --no-deps --wheel-dir "$dist" "$stage"
ls "$dist"/uvmpool-"$(cat "$native/VERSION")"-py3-none-*.whl
