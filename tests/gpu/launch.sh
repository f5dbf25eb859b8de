#!/usr/bin/env bash
# tests/gpu/launch.sh [-n N] PROGRAM [ARGS...] - run PROGRAM once per GPU, joined by the
# standalone TCP bootstrap on a free local port.
#
# Rank i gets EEP_RANK=i, EEP_WORLD_SIZE=N, EEP_BOOTSTRAP=tcp:127.0.0.1:PORT (and EEP_DEVICE is
# left to the default, rank modulo visible GPUs).  N defaults to the number of visible GPUs.
# Output lines are prefixed with the rank.  Exit: 0 when every rank passed, 77 when every rank
# skipped (or there is no GPU), 1 otherwise.  Bounded by EEP_GPU_TEST_TIMEOUT seconds (300).
set -u
n=""
if [ "${1:-}" = "-n" ]; then n=$2; shift 2; fi
[ $# -ge 1 ] || { echo "usage: $0 [-n N] PROGRAM [ARGS...]" >&2; exit 2; }
if [ -z "$n" ]; then
    if ! command -v nvidia-smi >/dev/null 2>&1; then
        echo "SKIP $(basename "$1"): no nvidia-smi, no GPU"; exit 77
    fi
    n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
        n=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .)
    fi
fi
if [ "$n" -lt 1 ]; then echo "SKIP $(basename "$1"): no GPU"; exit 77; fi
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
limit=${EEP_GPU_TEST_TIMEOUT:-300}
export NCCL_NVLS_ENABLE=0 EEP_WORLD_SIZE=$n EEP_BOOTSTRAP=tcp:127.0.0.1:$port
pids=()
for ((i = 0; i < n; i++)); do
    ( EEP_RANK=$i timeout --kill-after=10 "$limit" "$@" 2>&1 | sed -u "s/^/[$i] /" ;
      exit "${PIPESTATUS[0]}" ) &
    pids+=($!)
done
pass=0 skip=0 fail=0
for pid in "${pids[@]}"; do
    wait "$pid"; rc=$?
    case $rc in 0) pass=$((pass + 1)) ;; 77) skip=$((skip + 1)) ;; *) fail=$((fail + 1)) ;; esac
done
if [ "$fail" -gt 0 ]; then exit 1; fi
if [ "$pass" -eq 0 ]; then exit 77; fi
exit 0
