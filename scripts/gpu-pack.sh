#!/usr/bin/env bash
# Copies what the GPU suite needs from a build made here into .carry/build (stripped, a few MiB), to
# be carried to a GPU machine: bin/, lib/, dropin/ and the GPU test sources.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rm -rf .carry/build && mkdir -p .carry/build
cp -a "$build/bin" "$build/lib" "$build/dropin" .carry/build/
find .carry/build -type f -perm -u+x -exec strip --strip-debug {} + 2>/dev/null || true
du -sh .carry/build
