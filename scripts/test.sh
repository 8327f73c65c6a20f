#!/usr/bin/env bash
# Builds uvmpool and runs the whole test suite (simulated driver; GPU-only tests skip without a GPU)
# three ways, each in its own build folder: normal (build/), ASan+UBSan (build-asan/) and TSan
# (build-tsan/). Tests that cannot run instrumented carry the ctest label no_sanitize (or no_asan,
# no_tsan) and are left out of the sanitized runs by label: tests/sanitizer/README.md says which and why.
# UVMPOOL_TEST_SANITIZERS="address thread" is the default; set it empty for the normal run alone.
# TSan runs the suites whose code runs threads of its own or is called from many threads (pool,
# trace writer, statistics, stress), built alone: the whole suite under TSan would take CI past its
# limit on 2 cores. UVMPOOL_TEST_TSAN_ALL=1 builds and runs everything under TSan.
# Then the lock annotations checked by clang (-Werror=thread-safety over the library's code, in
# build-clang/; UVMPOOL_TEST_CLANG=0 skips it) and bounded fuzzing (scripts/fuzz.sh, FUZZ_SECONDS per
# target, 30 by default; UVMPOOL_TEST_FUZZ=0 skips it).
# Every run is made even when one fails; the status is non-zero when any did.
set -euo pipefail
cd "$(dirname "$0")/.."
base=${BUILD_DIR:-build}
sanitizers=${UVMPOOL_TEST_SANITIZERS-address thread}
tsan_all=${UVMPOOL_TEST_TSAN_ALL:-0}
fuzz=${UVMPOOL_TEST_FUZZ:-1}
clang_check=${UVMPOOL_TEST_CLANG:-1}
# They are this script's settings, not uvmpool's: left in the environment, every program the tests
# run under uvmpool would warn of an unknown UVMPOOL_ setting (and tests that read its output fail).
unset UVMPOOL_TEST_SANITIZERS UVMPOOL_TEST_TSAN_ALL UVMPOOL_TEST_FUZZ UVMPOOL_TEST_CLANG
failed=()

# Sanitizer reports fail the test that has them. Leak checking: see tests/sanitizer/lsan.supp.
# verify_asan_link_order=0: hooks tests preload the (instrumented) libuvmpool.so ahead of the runtime.
# intercept_tls_get_addr=0: GCC 12's sanitizer runtime guesses a glibc 2.19 dynamic-TLS header from an
# address's alignment (google/sanitizers#1322) and, on some memory layouts, LeakSanitizer's tracer then
# crashes at exit reading the dlopen'ed simulator's TLS ("Tracer caught signal 11"): here
# pool.SpillReserve.ASpillLargerThanAnyRunPinsNothingWhileEnoughIsReady, 20 runs in 20 with these
# options and none without the suppressions option (the environment's size moves the layout).
export ASAN_OPTIONS="detect_leaks=1:verify_asan_link_order=0:detect_odr_violation=0:intercept_tls_get_addr=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$PWD/tests/sanitizer/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/sanitizer/tsan.supp${TSAN_OPTIONS:+:$TSAN_OPTIONS}"

# What failed, said again at the very end: CI keeps only the tail of this script's output, and a
# failing test's own output is printed where it failed, thousands of lines before.
failures=()

run() {  # run NAME BUILD_DIR CTEST_ARGS... -- CMAKE_ARGS...
  local name=$1 dir=$2; shift 2
  local ctest_args=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do ctest_args+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  local start=$SECONDS
  echo "== uvmpool tests, $name ($dir) =="
  if ! BUILD_DIR=$dir BUILD_TARGETS=${targets:-} bash scripts/build.sh "$@"; then
    echo "== $name: FAILED to build after $((SECONDS - start)) s =="
    failed+=("$name"); failures+=("$name: the build failed (its output is above)")
    return
  fi
  rm -f "$dir/Testing/Temporary/LastTestsFailed.log"
  if ctest --test-dir "$dir" --output-on-failure -j"$(nproc)" --timeout 300 "${ctest_args[@]}"; then
    echo "== $name: passed in $((SECONDS - start)) s =="
  else
    echo "== $name: FAILED after $((SECONDS - start)) s =="
    failed+=("$name")
    record_failed_tests "$name" "$dir"
  fi
}

# Each failed test of a run: the end of its output in the run, and whether it passes when run again
# alone (one that fails only under load is still a failure, and says so). Bounded, so that many
# failures cannot take CI past its limit or push the first ones out of the tail CI keeps: the first
# 5 are run again, the first 10 shown with their output, the rest named.
record_failed_tests() {  # record_failed_tests NAME BUILD_DIR
  local name=$1 temp=$2/Testing/Temporary line test verdict pattern shown=0
  if [ ! -s "$temp/LastTestsFailed.log" ]; then
    failures+=("$name: ctest failed without naming a test (its output is above)")
    return
  fi
  # Running a test again rewrites both of ctest's logs.
  cp "$temp/LastTestsFailed.log" "$temp/RunFailed.log"
  cp "$temp/LastTest.log" "$temp/RunOutput.log" 2>/dev/null || : >"$temp/RunOutput.log"
  while IFS= read -r line <&3; do
    test=${line#*:}  # "N:name"; N is not the test's number once -E alone filtered the run
    shown=$((shown + 1))
    if [ "$shown" -gt 10 ]; then
      failures+=("$name: $test failed")
      continue
    fi
    verdict="was not run again"
    if [ "$shown" -le 5 ]; then
      pattern="^$(printf '%s' "$test" | sed 's/[][\\.^$*+?(){}|/]/\\&/g')\$"
      if ctest --test-dir "$2" --timeout 300 --no-tests=error -R "$pattern" </dev/null >/dev/null 2>&1; then
        verdict="passed when run again alone"
      else
        verdict="failed again alone"
      fi
    fi
    failures+=("$name: $test failed, and $verdict; the end of its output in the run:
$(TEST="$test" awk '
    index($0, " Testing: ") && substr($0, index($0, " Testing: ") + 10) == ENVIRON["TEST"] { mine = 1; next }
    mine && $0 == "<end of output>" { exit }
    mine && output { print }
    mine && !output && $0 == "Output:" { output = 1; getline }' "$temp/RunOutput.log" | tail -n 40 | sed 's/^/    /')")
  done 3< "$temp/RunFailed.log"
}

# The TSan run's programs and the tests they make (every name the regex matches must come from them).
tsan_targets="uvmpool-pool-tests uvmpool-pool-budget-tests uvmpool-pool-spill-tests uvmpool-pool-multi-device-tests
  uvmpool-trace-tests uvmpool-trace-timeline-tests uvmpool-trace-e2e-tests uvmpool_stats_tests
  uvmpool_stats_publisher_tests uvmpool-bench-stress"
tsan_tests='^(pool|trace|stats)\.|^stress_'
# Left out of TSan by name: the fault-injection suites (FaultInjection, SpillFault, SpillMapFault,
# MoveFault: one thread failing each driver call in turn, up to 80 s a case under TSan) and the
# one-thread walks (the cut-and-join walk, 448 s under TSan; the carved range's random walk, 139 s;
# the random moves with the pool's threads stopped, 87 s; one 512 MiB allocation, 68 s). One thread
# gives TSan nothing the pool's thread tests (Threads, SpillThreads, Moves, Carve.Threads...) do not;
# ASan+UBSan runs them all. tests/sanitizer/README.md lists this with the labels.
tsan_skip='Fault(Injection)?\.|Carve\.NoChunkIsLostAfterManyCutsAndJoins|CarvedRangeTest\.RandomAllocationsAndFreesKeepTheirBytes|Moves\.RandomMovesAndFreesKeepEveryFigureExact|Extents\.AColdLargeAllocationIsOneHandleAndOneMappingPerExtent'

run normal "$base" -- -DUVMPOOL_SANITIZE=
for s in $sanitizers; do
  case $s in
    address) run "ASan+UBSan" "$base-asan" -LE 'no_sanitize|no_asan' -- -DUVMPOOL_SANITIZE=address ;;
    thread)
      if [ "$tsan_all" = 1 ]; then
        run TSan "$base-tsan" -E "$tsan_skip" -LE 'no_sanitize|no_tsan' -- -DUVMPOOL_SANITIZE=thread
      else
        targets=$tsan_targets run TSan "$base-tsan" -R "$tsan_tests" -E "$tsan_skip" -LE 'no_sanitize|no_tsan' \
          -- -DUVMPOOL_SANITIZE=thread
      fi ;;
    undefined) run UBSan "$base-ubsan" -LE 'no_sanitize' -- -DUVMPOOL_SANITIZE=undefined ;;
    *) echo "unknown sanitizer '$s' in UVMPOOL_TEST_SANITIZERS" >&2; exit 2 ;;
  esac
done
if [ "$clang_check" != 0 ]; then
  start=$SECONDS
  echo "== uvmpool lock annotations, clang -Werror=thread-safety ($base-clang) =="
  if cmake -S . -B "$base-clang" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug \
       -DUVMPOOL_SANITIZE= -DUVMPOOL_BUILD_TESTS=OFF -DUVMPOOL_BUILD_BENCHMARKS=OFF \
       -DCMAKE_CXX_FLAGS=-Werror=thread-safety >/dev/null \
     && cmake --build "$base-clang" -j"$(nproc)" --target uvmpool_pool uvmpool_hooks; then
    echo "== lock annotations: passed in $((SECONDS - start)) s =="
  else
    echo "== lock annotations: FAILED after $((SECONDS - start)) s =="
    failed+=("lock annotations"); failures+=("lock annotations: clang's errors are above")
  fi
fi
if [ "$fuzz" != 0 ]; then
  start=$SECONDS
  echo "== uvmpool fuzzing (build-fuzz) =="
  if FUZZ_SECONDS=${FUZZ_SECONDS:-30} bash scripts/fuzz.sh; then
    echo "== fuzzing: passed in $((SECONDS - start)) s =="
  else
    echo "== fuzzing: FAILED after $((SECONDS - start)) s =="
    failed+=(fuzzing); failures+=("fuzzing: the crashing input and its stack are above")
  fi
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "== what failed =="
  for f in "${failures[@]}"; do echo "$f"; done
  echo "uvmpool tests FAILED: ${failed[*]}"
  exit 1
fi
extra=""; [ "$clang_check" != 0 ] && extra=", lock annotations"
echo "uvmpool tests: all runs passed (normal${sanitizers:+, $sanitizers}$extra) in $SECONDS s"
