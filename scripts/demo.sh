#!/usr/bin/env bash
# The main job: builds uvmpool and runs the overcommit demo under LD_PRELOAD=libuvmpool.so, on the
# real GPU when this machine has one, otherwise on the simulated driver. The demo allocates three
# times the device limit (UVMPOOL_DEVICE_LIMIT; what lies past it spills to pinned host memory),
# computes on all of it and verifies every byte.
#   bash scripts/demo.sh [TOTAL_MIB]     (default: 3x the limit)
# Settings already in the environment win: e.g. UVMPOOL_DEVICE_LIMIT=8G bash scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null  # into BUILD_DIR, default build/
build=$(readlink -f "${BUILD_DIR:-build}")
export UVMPOOL_STATS=${UVMPOOL_STATS:-1}
if nvidia-smi -L >/dev/null 2>&1; then
  echo "== uvmpool overcommit demo on the real GPU"
  export UVMPOOL_DEVICE_LIMIT=${UVMPOOL_DEVICE_LIMIT:-4G}
else
  echo "== uvmpool overcommit demo on the simulated driver (no GPU on this machine)"
  export LD_LIBRARY_PATH="$build/sim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # A small simulated device, so that three times its limit stays small here.
  export UVMPOOL_SIM_DEVICE_MEMORY=${UVMPOOL_SIM_DEVICE_MEMORY:-1G}
  export UVMPOOL_SIM_HOST_MEMORY=${UVMPOOL_SIM_HOST_MEMORY:-4G}
  export UVMPOOL_DEVICE_LIMIT=${UVMPOOL_DEVICE_LIMIT:-512M}
  export UVMPOOL_HOST_LIMIT=${UVMPOOL_HOST_LIMIT:-2G}  # the simulated host memory is this machine's RAM
fi
env | grep -E '^UVMPOOL_(DEVICE_LIMIT|HOST_LIMIT|SIM_DEVICE_MEMORY|SIM_HOST_MEMORY)=' | sort | tr '\n' ' '; echo
exec "$build/bin/uvmpool-run" -- "$build/bin/uvmpool-demo" "$@"
