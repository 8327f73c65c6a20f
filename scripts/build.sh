#!/usr/bin/env bash
# Installs the dependencies and builds uvmpool into build/ (BUILD_DIR to change).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
build=${BUILD_DIR:-build}
mkdir -p "$build"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} \
      -DCUDAToolkit_ROOT="${CUDA_HOME:-/usr/local/cuda}" "$@" >"$build/configure.log" 2>&1 \
  || { cat "$build/configure.log"; exit 1; }
# BUILD_TARGETS (space-separated) builds only those targets and what they need.
cmake --build "$build" -j"$(nproc)" ${BUILD_TARGETS:+--target $BUILD_TARGETS}
