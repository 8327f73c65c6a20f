#!/bin/sh
# usage: expect_output.sh REGEX... -- COMMAND...  passes when COMMAND exits 0 (not killed, not hung:
# ctest's timeout) and its output (stdout and stderr together) matches every REGEX.
n=0
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do n=$((n + 1)); eval "re_$n=\$1"; shift; done
[ "$1" = "--" ] || { echo "usage: expect_output.sh REGEX... -- COMMAND..."; exit 2; }
shift
out=$("$@" 2>&1); status=$?
printf '%s\n' "$out"
[ $status -eq 0 ] || { echo "expected exit status 0, got $status"; exit 1; }
i=1
while [ $i -le $n ]; do
  eval "re=\$re_$i"
  printf '%s\n' "$out" | grep -Eq -- "$re" || { echo "output does not match: $re"; exit 1; }
  i=$((i + 1))
done
echo "exited with status 0 and matched $n patterns"
