#!/bin/sh
# usage: install_and_run.sh BUILD_DIR SIM_DIR CLIENT
# Installs the build into a temporary prefix and runs a client through the installed uvmpool-run,
# preloaded and as the drop-in, checking that its allocations reach uvmpool both ways.
set -eu
build=$1 sim=$2 client=$3
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in bin/uvmpool-run bin/uvmpool-demo include/uvmpool/uvmpool.h; do
  [ -e "$prefix/$f" ] || { echo "not installed: $f"; exit 1; }
done
ls "$prefix"/lib*/libuvmpool.so "$prefix"/lib*/uvmpool/dropin/libcuda.so.1 >/dev/null
LD_LIBRARY_PATH=$sim "$prefix/bin/uvmpool-run" --stats -- "$client" --expect-uvmpool
"$prefix/bin/uvmpool-run" --dropin --driver "$sim/libcuda.so.1" -- "$client" --expect-uvmpool
echo "installed layout works preloaded and as the drop-in"
