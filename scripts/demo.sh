#!/usr/bin/env bash
# The main job: builds uvmpool and runs the demo under LD_PRELOAD=libuvmpool.so, on the real GPU
# when this machine has one, otherwise on the simulated driver.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
export UVMPOOL_STATS=${UVMPOOL_STATS:-1}
if nvidia-smi -L >/dev/null 2>&1; then
  echo "== uvmpool demo on the real GPU"
else
  echo "== uvmpool demo on the simulated driver (no GPU on this machine)"
  export LD_LIBRARY_PATH="$PWD/build/sim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export UVMPOOL_SIM_DEVICE_MEMORY=${UVMPOOL_SIM_DEVICE_MEMORY:-4G}
fi
exec build/bin/uvmpool-run -- build/bin/uvmpool-demo "${@:-1024}"
