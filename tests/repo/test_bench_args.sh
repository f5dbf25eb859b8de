#!/usr/bin/env bash
# test_bench_args.sh - eep-bench ep's argument checks, which need no GPU: buffers smaller than
# the call (--max-tokens below --tokens) are refused with a message naming both, before any GPU
# or bootstrap work; --help lists --max-tokens.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
bench=$build/bin/eep-bench
[ -x "$bench" ] || { echo "SKIP test_bench_args: $bench is not built"; exit 77; }
failed=0

out=$(timeout 20 "$bench" ep --tokens 128 --max-tokens 64 2>&1)
rc=$?
if [ $rc -eq 0 ] || [ $rc -eq 124 ] ||
   ! printf '%s\n' "$out" | grep -q -- '--max-tokens 64 is below --tokens 128'; then
    echo "FAIL: --max-tokens below --tokens: exit $rc, output: $out"
    failed=1
fi
if ! timeout 20 "$bench" ep --help 2>&1 | grep -q -- '--max-tokens M'; then
    echo "FAIL: --help does not list --max-tokens"
    failed=1
fi
[ $failed -eq 0 ] && echo "PASS test_bench_args"
exit $failed
