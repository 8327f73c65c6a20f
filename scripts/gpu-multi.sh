#!/usr/bin/env bash
# Runs uvmpool's two-GPU checks (issue 20) on a machine with two NVIDIA GPUs of one host, using a
# build made elsewhere (scripts/gpu-pack.sh):
#   bash scripts/gpu-multi.sh [BUILD_DIR] [PARTS]     PARTS: a comma list of
#     peer_ipc   tests/clients/client_peer (native, preloaded, drop-in) and tests/gpu/peer_ipc.py: peer
#                access in one process, CUDA IPC between processes
#     nccl       tests/gpu/nccl_check.py: all-reduce bandwidth, NCCL's own cuMemCreate, peer queries
#     kill       tests/gpu/ddp_train.py --parts kill: one rank killed in the middle of a step
#     ddp        tests/gpu/ddp_train.py --parts fits,overcommit: DDP fitting and at a third of its need
#     fits       tests/gpu/ddp_train.py --parts fits alone (ddp takes about 9 minutes on two H200s)
#     overcommit tests/gpu/ddp_train.py --parts overcommit alone (with one native run for its need)
#   (default: all). Logs go to $OUT when set, else to /tmp/uvmpool-multi.
# NVLink multicast stays off in every process (NCCL_NVLS_ENABLE=0 and the like): the shared machines
# this runs on require it.
set -uo pipefail
cd "$(dirname "$0")/.."
build=$(readlink -f "${1:-.carry/build}")
parts=${2:-peer_ipc,nccl,kill,ddp}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
logs=${OUT:-/tmp/uvmpool-multi}; mkdir -p "$logs"
lib="$build/lib/libuvmpool.so"
status=0

echo "== machine"
{
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
  nvidia-smi topo -m
  python3 -c 'import torch, cupy; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), "cupy", cupy.__version__, "gpus", torch.cuda.device_count())'
  date -u +%Y-%m-%dT%H:%MZ
} 2>&1 | tee "$logs/machine.txt"

step() {  # name timeout command...
  local name=$1 limit=$2; shift 2
  echo "== $name"
  timeout "$limit" "$@" 2>&1 | tee "$logs/$name.log"
  local s=${PIPESTATUS[0]}
  [ "$s" -eq 0 ] || { echo "== $name: exit $s"; status=1; }
}
for part in ${parts//,/ }; do
  case $part in
    peer_ipc)
      for route in native preload dropin; do
        case $route in
          native) env=() ;; preload) env=(LD_PRELOAD="$lib") ;; dropin) env=(LD_LIBRARY_PATH="$build/dropin") ;;
        esac
        echo "UVMPOOL_PEER_IPC_ROW client_peer $route: $(env "${env[@]}" timeout 60 "$build/bin/client_peer" linked 2>&1 | tail -n 1)" |
          tee -a "$logs/peer_ipc.log"
      done
      step peer_ipc_py 420 python3 tests/gpu/peer_ipc.py --lib "$lib" ;;
    nccl) step nccl 420 python3 tests/gpu/nccl_check.py --lib "$lib" --tiering-off ;;
    kill) step kill 300 python3 tests/gpu/ddp_train.py --lib "$lib" --parts kill ;;
    ddp) step ddp 560 python3 tests/gpu/ddp_train.py --lib "$lib" --dropin "$build/dropin" --parts fits,overcommit ;;
    fits|overcommit) step "$part" 560 python3 tests/gpu/ddp_train.py --lib "$lib" --dropin "$build/dropin" --parts "$part" ;;
    *) echo "gpu-multi: unknown part '$part'"; status=2 ;;
  esac
done
echo "== summary"
grep -h -E '^UVMPOOL_(DDP|NCCL|PEER_IPC)' "$logs"/*.log
exit $status
