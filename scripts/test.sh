#!/usr/bin/env bash
# Builds uvmpool and runs the whole test suite (simulated driver; GPU-only tests skip without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j"$(nproc)" --timeout 300
