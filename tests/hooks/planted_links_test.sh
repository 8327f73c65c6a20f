#!/bin/sh
# usage: planted_links_test.sh CLIENT PRELOAD SIM_DIR
# UVMPOOL_TRACE, UVMPOOL_STATS_FILE and UVMPOOL_LOG_FILE each name a symbolic link someone planted,
# pointing at a file of ours: the program runs, and the file keeps its bytes (issue 17).
client=$1 preload=$2 sim=$3
dir=$(mktemp -d "${TMPDIR:-/tmp}/uvmpool-links-XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
printf 'precious\n' >"$dir/victim"
for name in trace.json stats.json uvmpool.log; do ln -s "$dir/victim" "$dir/$name"; done
out=$(env LD_PRELOAD="$preload" LD_LIBRARY_PATH="$sim" UVMPOOL_TRACE="$dir/trace.json" \
      UVMPOOL_STATS_FILE="$dir/stats.json" UVMPOOL_LOG_FILE="$dir/uvmpool.log" UVMPOOL_LOG_LEVEL=info \
      "$client" init 2>&1)
status=$?
printf '%s\n' "$out"
[ $status -eq 0 ] || { echo "FAILED: the program exited with $status"; exit 1; }
[ "$(cat "$dir/victim")" = "precious" ] || { echo "FAILED: the link's target was written: $(head -c 200 "$dir/victim")"; exit 1; }
for name in trace.json stats.json uvmpool.log; do
  [ -L "$dir/$name" ] || { echo "FAILED: $name is no longer the planted link"; exit 1; }
done
printf '%s\n' "$out" | grep -q "UVMPOOL_LOG_FILE.*symbolic link" || { echo "FAILED: no line says the log file was refused"; exit 1; }
echo "the planted links were refused; the target is untouched"
