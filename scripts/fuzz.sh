#!/usr/bin/env bash
# Bounded fuzzing with clang's libFuzzer (tests/fuzz): the option parser and the reader of statistics
# segments, each for FUZZ_SECONDS (default 60), starting from the seed corpora committed under
# tests/fuzz/*_corpus/, built with ASan+UBSan into build-fuzz/ (FUZZ_BUILD_DIR). New inputs go to a
# scratch folder; a crashing input is kept in build-fuzz/fuzz-artifacts/ and the status is non-zero.
# scripts/test.sh runs it after the test suites.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
dir=${FUZZ_BUILD_DIR:-build-fuzz}
seconds=${FUZZ_SECONDS:-60}
mkdir -p "$dir/fuzz-artifacts"
CC=clang CXX=clang++ cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUVMPOOL_FUZZ=ON \
  -DUVMPOOL_SANITIZE=address -DUVMPOOL_BUILD_BENCHMARKS=OFF \
  -DCUDAToolkit_ROOT="${CUDA_HOME:-/usr/local/cuda}" >"$dir/configure.log" 2>&1 \
  || { cat "$dir/configure.log"; exit 1; }
targets=(options segment)
cmake --build "$dir" -j"$(nproc)" --target "${targets[@]/#/uvmpool-fuzz-}"
status=0
for t in "${targets[@]}"; do
  scratch=$(mktemp -d)
  echo "== fuzzing $t for $seconds s (seeds: tests/fuzz/${t}_corpus) =="
  if ! UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
       "$dir/bin/uvmpool-fuzz-$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="$dir/fuzz-artifacts/$t-" "$scratch" "tests/fuzz/${t}_corpus" 2>&1 | tail -n 40; then
    echo "== fuzzing $t: FAILED (input in $dir/fuzz-artifacts/) =="
    status=1
  fi
  rm -rf "$scratch"
done
exit $status
