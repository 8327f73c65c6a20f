#!/bin/sh
# usage: expect_failure.sh REGEX COMMAND...  passes when COMMAND exits non-zero and its output matches REGEX.
regex=$1; shift
out=$("$@" 2>&1); status=$?
printf '%s\n' "$out"
[ $status -ne 0 ] || { echo "expected a non-zero exit status, got 0"; exit 1; }
printf '%s\n' "$out" | grep -Eq -- "$regex" || { echo "output does not match: $regex"; exit 1; }
echo "exited with status $status as expected"
