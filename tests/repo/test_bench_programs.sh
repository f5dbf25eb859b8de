#!/usr/bin/env bash
# test_bench_programs.sh - the standalone nvcc programs of bench/ (eep-membw, eep-copy-sm) still
# compile: they run only on the GPU machine (make bench), so a break would otherwise show there
# first, in device time.  Builds them with bench/module.mk's own rules into a scratch BUILD.
# Needs nvcc (CUDA_HOME, default /usr/local/cuda), not a GPU.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
[ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ] ||
    { echo "SKIP test_bench_programs: no nvcc under ${CUDA_HOME:-/usr/local/cuda}"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
for prog in eep-membw eep-copy-sm; do
    if out=$(cd "$root" && timeout 300 make -s BUILD="$tmp" "$tmp/bin/$prog" 2>&1) &&
        [ -x "$tmp/bin/$prog" ]; then
        echo "PASS $prog compiles"
    else
        echo "FAIL $prog does not compile: $out"
        failed=1
    fi
done
exit $failed
