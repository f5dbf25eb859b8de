#!/usr/bin/env bash
# test_bench_programs.sh - the standalone nvcc programs of bench/ (eep-membw, eep-copy-sm) still
# compile: they run only on the GPU machine (make bench), so a break would otherwise show there
# first, in device time.  Needs nvcc (CUDA_HOME, default /usr/local/cuda), not a GPU.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
nvcc=${CUDA_HOME:-/usr/local/cuda}/bin/nvcc
[ -x "$nvcc" ] || { echo "SKIP test_bench_programs: no nvcc at $nvcc"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
for src in bench/membw/membw.cu bench/copysm/copy_sm.cu; do
    if out=$(cd "$root" && timeout 300 "$nvcc" -O2 -std=c++17 -arch=sm_90 -o "$tmp/prog" "$src" 2>&1) &&
        [ -x "$tmp/prog" ]; then
        echo "PASS $src compiles"
    else
        echo "FAIL $src does not compile: $out"
        failed=1
    fi
    rm -f "$tmp/prog"
done
exit $failed
