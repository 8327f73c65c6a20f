#!/usr/bin/env bash
# Copies what the GPU suite needs from a build made here into .carry/build (stripped, a few MiB), to
# be carried to a GPU machine: bin/, lib/, dropin/, share/ (the snapshot converter), sim/ (the simulated driver, which
# uvmpool-sim-calibrate runs on beside the GPU) and the GPU test sources. The benchmarks in bin/
# need Google Benchmark's shared library, which the GPU machine lacks: it goes into lib/, where their
# RUNPATH ($ORIGIN/../lib) finds it.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
# The trace's cost benchmark is left out of the default build (tests/trace/CMakeLists.txt); the suite
# runs it, so that the recorder's cost on the GPU machine's CPU is measured, not inferred.
cmake --build "$build" --target uvmpool-trace-cost >/dev/null
rm -rf .carry/build && mkdir -p .carry/build
cp -a "$build/bin" "$build/lib" "$build/dropin" "$build/sim" "$build/share" .carry/build/
# The unit tests run on the simulator (CI); of them the suite runs only the fidelity and driver
# tests on the GPU. The rest stay here: with them the carried tree passed the device tool's 64 MiB.
find .carry/build/bin -maxdepth 1 -type f \( -name '*-tests' -o -name '*_tests' -o -name 'hello_*' -o -name '*_child' \) \
  ! -name uvmpool-fidelity-tests ! -name uvmpool-driver-tests -delete
benches=(.carry/build/bin/uvmpool-bench-*)
if [ -e "${benches[0]}" ]; then
  # The library the build linked them with, by its soname (libbenchmark.so.1debian on Debian).
  lib=$(ldd "${benches[0]}" | awk '/libbenchmark/ { print $3; exit }')
  [ -n "$lib" ] && [ -f "$lib" ] || { echo "gpu-pack: cannot find the benchmarks' libbenchmark" >&2; exit 1; }
  cp -L "$lib" .carry/build/lib/
fi
# uvmpool-stat serves HTTP with Debian's cpp-httplib, a shared library GPU hosts rarely have (or in
# another version): it goes into lib/ with what it needs beyond the C runtime.
for dep in $(ldd "$build/bin/uvmpool-stat" | awk '/libcpp-httplib|libbrotli/ { print $3 }'); do cp -L "$dep" .carry/build/lib/; done
find .carry/build -type f -perm -u+x -exec strip --strip-debug {} + 2>/dev/null || true
strip --strip-debug .carry/build/lib/libbenchmark* 2>/dev/null || true
for b in "${benches[@]}"; do
  [ -e "$b" ] || continue
  # Each must find libbenchmark in the carried lib/, not in this machine's system folders.
  found=$(env -u LD_LIBRARY_PATH ldd "$b" | awk '/libbenchmark/ { print $3 }')
  case "$found" in
    "$PWD/.carry/build/lib/"* | "$PWD/.carry/build/bin/../lib/"*) ;;
    *) echo "gpu-pack: $b finds libbenchmark at '$found', not in .carry/build/lib" >&2; exit 1 ;;
  esac
done
du -sh .carry/build
