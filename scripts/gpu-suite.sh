#!/usr/bin/env bash
# Runs uvmpool's GPU suite on a machine with an NVIDIA GPU, using a build made elsewhere:
#   bash scripts/gpu-suite.sh [BUILD_DIR]      (default .carry/build, made by scripts/gpu-pack.sh)
# It runs the GPU test binaries against the real driver, builds and runs the nvcc/cuBLAS programs,
# runs PyTorch (three allocators), CuPy and JAX under uvmpool preloaded and as the drop-in driver,
# runs the overcommit programs (the demo, tests/gpu/overcommit.cu and tests/gpu/train_overcommit.py,
# needing 2-3x the device limit they are given), runs the benchmarks (tests/benchmarks/), compares the
# simulated driver's clock with the GPU, and prints one summary table last. Logs go to /tmp/uvmpool-gpu
# (and, packed, to $OUT when set). Each step has a timeout; the whole suite is meant to take about 6
# minutes on an H200.
set -uo pipefail
cd "$(dirname "$0")/.."
build=$(readlink -f "${1:-.carry/build}")
logs=/tmp/uvmpool-gpu; rm -rf "$logs"; mkdir -p "$logs"
work=$(mktemp -d)
rows=()
row() { rows+=("$(printf '| %-34s | %-10s | %s |' "$1" "$2" "$3")"); }

echo "== machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$logs/gpu.txt"
python3 -c 'import torch; print("torch", torch.__version__)' 2>/dev/null | tee -a "$logs/gpu.txt"
ldconfig -p | grep -m1 'libcuda.so.1 ' | tee -a "$logs/gpu.txt"
date -u +%Y-%m-%dT%H:%MZ | tee -a "$logs/gpu.txt"

# 1. Test binaries against the real driver (no UVMPOOL_DRIVER_PATH: the system's libcuda.so.1).
for t in uvmpool-fidelity-tests uvmpool-driver-tests; do
  echo "== $t"
  "$build/bin/$t" --gtest_brief=1 >"$logs/$t.log" 2>&1; status=$?
  tail -n 40 "$logs/$t.log"
  summary=$(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$logs/$t.log" | tr '\n' ' ')
  row "$t" "$([ $status -eq 0 ] && echo pass || echo FAIL)" "$summary"
done

# 2. Route programs and the demo, preloaded and as the drop-in driver.
run_case() {  # name route command...
  local name=$1 route=$2; shift 2
  local log="$logs/$name.$route.log" status
  if [ "$route" = preload ]; then
    env LD_PRELOAD="$build/lib/libuvmpool.so" timeout 300 "$@" >"$log" 2>&1; status=$?
  else
    env LD_LIBRARY_PATH="$build/dropin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout 300 "$@" >"$log" 2>&1; status=$?
  fi
  local probe allocations
  probe=$(grep -m1 -oE '(UVMPOOL_PROBE.*|uvmpool [0-9.]+ intercepted [0-9]+ allocations|(linked|runtime-like) client: ok.*)' "$log")
  probe+=$(grep -m1 -oE '; the pool served [0-9]+ of them \([0-9]+ went to the driver\)' "$log")
  allocations=$(grep -m1 -oE '(allocations=[0-9]+|[0-9]+ allocations)' <<<"$probe" | grep -oE '[0-9]+' | head -n1)
  if [ $status -ne 0 ]; then
    row "$name ($route)" "FAILED" "exit $status: $(tail -n 1 "$log" | cut -c1-100)"
  elif [ -n "$allocations" ] && [ "$allocations" -eq 0 ]; then
    row "$name ($route)" "MISSED" "${probe#UVMPOOL_PROBE }"
  else
    row "$name ($route)" "reached" "${probe#UVMPOOL_PROBE }"
  fi
  echo "-- $name ($route): exit $status; $probe"
}

echo "== route programs"
for route in preload dropin; do
  run_case client_linked "$route" "$build/bin/client_linked" --expect-uvmpool
  flags=(--expect-uvmpool --check-routes); [ "$route" = dropin ] && flags+=(--dropin)
  run_case client_runtime_like "$route" "$build/bin/client_runtime_like" "${flags[@]}"
done

# 3. nvcc programs (static and shared cudart) and cuBLAS, built here with the GPU machine's nvcc.
echo "== building nvcc programs"
inc=(-I"$PWD/include" -I"$PWD/tests/gpu")
nvcc -O2 -arch=native "${inc[@]}" tests/gpu/cudart_program.cu -o "$work/cudart_static" -ldl &&
nvcc -O2 -arch=native -cudart shared "${inc[@]}" tests/gpu/cudart_program.cu -o "$work/cudart_shared" -ldl &&
nvcc -O2 -arch=native "${inc[@]}" tests/gpu/cublas_matmul.cu -o "$work/cublas_matmul" -lcublas -ldl ||
  row "nvcc programs" "FAILED" "build failed"
nvcc -O2 -arch=native "${inc[@]}" tests/gpu/overcommit.cu -o "$work/overcommit" -ldl ||
  row "overcommit.cu" "FAILED" "build failed"
for route in preload dropin; do
  [ -x "$work/cudart_static" ] && run_case nvcc-static-cudart "$route" "$work/cudart_static" static-cudart
  [ -x "$work/cudart_shared" ] && run_case nvcc-shared-cudart "$route" "$work/cudart_shared" shared-cudart
  [ -x "$work/cublas_matmul" ] && run_case cublas-sgemm "$route" "$work/cublas_matmul"
done

# 4. Frameworks.
echo "== frameworks"
for mode in torch-default torch-expandable torch-async cupy jax; do
  for route in preload dropin; do
    run_case "$mode" "$route" python3 tests/gpu/frameworks.py "$mode"
  done
done

# 5. Overcommit: programs that need 2-3x the device limit they are given (the rest spills to pinned
# host memory). One row each with its key figures: the tier split, bandwidth, step times.
echo "== overcommit (UVMPOOL_DEVICE_LIMIT=4G)"
overcommit_case() {  # name route key seconds command... (the row: the last line starting with key, and
                    # the first line matching the regex $also when set)
  local name=$1 route=$2 key=$3 seconds=$4; shift 4
  local log="$logs/$name.$route.log" status line
  if [ "$route" = preload ]; then
    env LD_PRELOAD="$build/lib/libuvmpool.so" timeout "$seconds" "$@" >"$log" 2>&1; status=$?
  elif [ "$route" = dropin ]; then
    env LD_LIBRARY_PATH="$build/dropin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout "$seconds" "$@" >"$log" 2>&1; status=$?
  else
    timeout "$seconds" "$@" >"$log" 2>&1; status=$?
  fi
  line=$(grep -E "^$key" "$log" | tail -n 1)
  [ -n "${also:-}" ] && [ -n "$line" ] && line+=" / $(grep -m1 -E "$also" "$log" | cut -c1-140)"
  tail -n 12 "$log"
  if [ $status -eq 0 ] && [ -n "$line" ]; then
    row "$name ($route)" "ok" "${line#"$key"}"
  else
    row "$name ($route)" "FAILED" "exit $status: ${line:-$(tail -n 1 "$log" | cut -c1-160)}"
  fi
  echo "-- $name ($route): exit $status"
}
# The demo: no argument = 3x the limit (12 GiB), kernels writing and checking every word.
for route in preload dropin; do
  also='^[0-9]+ buffers, ' overcommit_case uvmpool-demo "$route" "tier split while live: " 120 \
    env UVMPOOL_DEVICE_LIMIT=4G "$build/bin/uvmpool-demo"
done
# A graph built node by node on spilled memory through every node call (client_graph_nodes.cpp):
# each buffer it writes is one host pointer of its launches (8, then 12), every value checked, and its
# three stream memory operations on host memory shown.
for route in preload dropin; do
  overcommit_case graph-nodes "$route" "graph nodes client: ok; " 60 \
    env UVMPOOL_DEVICE_LIMIT=64M UVMPOOL_DEVICE_HEADROOM=0 "$build/bin/client_graph_nodes"
done
# The program's own VMM beside the pool (client_hardening vmm): cuMemUnmap and cuMemMap of pool memory
# refused and the memory intact; a cuMemCreate made in host memory past the limit counted until NCCL's
# free's last release, and until a handle released while mapped is unmapped.
for route in preload dropin; do
  overcommit_case program-vmm "$route" "vmm: " 60 \
    env UVMPOOL_DEVICE_LIMIT=64M UVMPOOL_DEVICE_HEADROOM=0 UVMPOOL_HOST_RESERVE=0 "$build/bin/client_hardening" vmm
done
# Pointer queries on freed memory (client_hardening freed): the driver's own answers for a freed
# cuMemAlloc pointer (plain), and the same through uvmpool, which keeps the memory mapped for reuse.
for route in plain preload dropin; do
  overcommit_case freed-pointers "$route" "freed 6291456 bytes: " 60 "$build/bin/client_hardening" freed
done
# NCCL's own cuMem buffers (one rank of torch.distributed): counted while they live, back to the
# start once the process group is destroyed (retain, release, unmap, release).
overcommit_case nccl-vmm preload "UVMPOOL_NCCL_VMM " 120 python3 tests/gpu/nccl_vmm_count.py
[ -x "$work/overcommit" ] &&
  overcommit_case overcommit-12g preload "UVMPOOL_OVERCOMMIT " 120 env UVMPOOL_DEVICE_LIMIT=4G "$work/overcommit" 12288
# PyTorch training: reference, then uvmpool at need/2.5, then uvmpool + expandable segments; the
# losses must be identical. It sets LD_PRELOAD for its own children.
overcommit_case train-overcommit compare "UVMPOOL_TRAIN_OVERCOMMIT " 420 \
  python3 tests/gpu/train_overcommit.py --compare --lib "$build/lib/libuvmpool.so" --timeout 130

# 5b. Observability on PyTorch: a trace, the exit report and uvmpool-stat reading the running job.
# The trace and what uvmpool-stat printed go to $OUT/observe (scripts/uvmpool-timeline.py renders it).
observe_dir="${OUT:-$logs}/observe"
overcommit_case observe-torch plain "UVMPOOL_OBSERVE " 240 \
  python3 tests/gpu/observe_torch.py --lib "$build/lib/libuvmpool.so" --stat "$build/bin/uvmpool-stat" --out "$observe_dir"
# 5c. That job's trace as a PyTorch memory snapshot, opened with torch's own viewer functions.
overcommit_case snapshot-viz torch "UVMPOOL_SNAPSHOT_VIZ " 120 \
  sh -c "'$build/bin/uvmpool-stat' --snapshot '$observe_dir/snapshot-torch.pickle' '$observe_dir/trace-torch.json' &&
         python3 tests/gpu/snapshot_viz.py '$observe_dir/snapshot-torch.pickle' '$observe_dir/viz'"

# 6. Benchmarks, against the real driver: one row each with its key figures (targets in the text;
# docs/benchmarks.md). Figures, not pass/fail: "ran" only says the program finished.
echo "== benchmarks"
bench() {  # name args...
  local name=$1 log="$logs/$1.log" status line; shift
  if [ ! -x "$build/bin/$name" ]; then row "$name" "MISSING" "not in $build/bin"; return; fi
  timeout 300 "$build/bin/$name" "$@" >"$log" 2>&1; status=$?
  sed -n '/^== /,$p' "$log"
  if [ $status -ne 0 ] || ! grep -q '^UVMPOOL_BENCH ' "$log"; then
    row "$name" "FAILED" "exit $status: $(tail -n 1 "$log" | cut -c1-100)"
    return
  fi
  while read -r line; do  # one row per figure line ("UVMPOOL_BENCH <what>: <text>")
    row "$name (${line%%:*})" "ran" "${line#*: }"
  done < <(grep '^UVMPOOL_BENCH ' "$log" | sed 's/^UVMPOOL_BENCH //')
}
bench uvmpool-bench-alloc
bench uvmpool-trace-cost  # the recorder alone, per event: what the alloc bench's trace figure is made of
bench uvmpool-bench-stitch
bench uvmpool-bench-bandwidth
bench uvmpool-bench-fragmentation --scale=4
bench uvmpool-bench-spill
bench uvmpool-bench-move
bench uvmpool-bench-move --unit=2M --bytes=256M

# 7. The simulated driver's clock against the GPU: one fixed mix on both (the simulator from the
# build's sim/, chosen by UVMPOOL_DRIVER_PATH), modeled beside measured; rows off by more than 25% are
# marked in $logs/sim-calibration.md. Figures, not pass/fail.
echo "== simulator calibration"
cal="$build/bin/uvmpool-sim-calibrate"
if [ -x "$cal" ] && [ -f "$build/sim/libcuda.so.1" ]; then
  timeout 120 "$cal" >"$logs/sim-calibration.gpu.log" 2>&1 &&
    UVMPOOL_DRIVER_PATH="$build/sim/libcuda.so.1" timeout 300 "$cal" >"$logs/sim-calibration.sim.log" 2>&1 &&
    python3 scripts/sim-calibration-compare.py "$logs/sim-calibration.sim.log" "$logs/sim-calibration.gpu.log" \
      >"$logs/sim-calibration.md"; status=$?
  cat "$logs/sim-calibration.md" 2>/dev/null
  line=$(grep -m1 '^UVMPOOL_CALIBRATION ' "$logs/sim-calibration.md" 2>/dev/null)
  if [ $status -eq 0 ] && [ -n "$line" ]; then
    row "uvmpool-sim-calibrate" "ran" "${line#UVMPOOL_CALIBRATION } (sim-calibration.md)"
  else
    row "uvmpool-sim-calibrate" "FAILED" "exit $status: $(tail -q -n 1 "$logs"/sim-calibration.*.log | cut -c1-100)"
  fi
else
  row "uvmpool-sim-calibrate" "MISSING" "no bin/uvmpool-sim-calibrate or sim/libcuda.so.1 in $build"
fi

echo
echo "== summary ($(head -n1 "$logs/gpu.txt"))"
printf '| %-34s | %-10s | %s |\n' "what" "outcome" "details"
printf '|%s|%s|%s|\n' "------------------------------------" "------------" "---------"
printf '%s\n' "${rows[@]}" | tee "$logs/summary.md"
rm -rf "$work"
if [ -n "${OUT:-}" ]; then tar czf "$OUT/gpu-logs.tgz" -C "$logs" . && cp "$logs/summary.md" "$OUT/"; fi
