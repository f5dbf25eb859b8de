#!/usr/bin/env bash
# scripts/gin-round.sh - the GPU machine's round for our NCCL net + GIN plugin (make gpu-gin):
# the plugin's CPU tests, then tests/gpu/gin/test_gin_gpu at N = 2, 4 and 8 ranks on one GPU,
# each with MPS and time-sliced (--no-mps), through scripts/one-gpu-cluster.sh; the N = 2 runs
# also measure put bandwidth and the signal round trip (--bench).  Logs go under
# $OUT/gin-round (or $BUILD/gin-round), with summary.txt holding one line per run and the BENCH
# lines to paste into bench/RESULTS.md (labelled: a test transport, not NCCL's GIN).
# Knobs: GIN_ROUND_RANKS ("2 4 8"), GIN_ROUND_MODES ("mps no-mps"), GIN_ROUND_TIMEOUT (s, 420).
# Exit 0 when every run passed.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
build=${BUILD:-build}
out=${OUT:-$build}/gin-round
mkdir -p "$out"
summary=$out/summary.txt
: >"$summary"
test_bin=$build/tests/gpu/gin/test_gin_gpu
if [ ! -x "$test_bin" ] || [ ! -f "$build/lib/libnccl-net-eep-gin.so" ]; then
    make --no-print-directory BUILD="$build" gin-gpu-test || exit 1
fi
{
    echo "# gin-round $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname)"
    nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv,noheader 2>/dev/null |
        sed 's/^/# GPU: /'
    command -v nvidia-cuda-mps-control >/dev/null 2>&1 || echo "# no nvidia-cuda-mps-control: the mps runs are time-sliced"
} | tee -a "$summary"

failed=0
if ! make --no-print-directory BUILD="$build" gin-test >"$out/cpu-tests.log" 2>&1; then
    failed=$((failed + 1))
    echo "FAIL cpu tests ($out/cpu-tests.log)" | tee -a "$summary"
else
    echo "ok   cpu tests: $(tail -1 "$out/cpu-tests.log")" | tee -a "$summary"
fi

for n in ${GIN_ROUND_RANKS:-2 4 8}; do
    for mode in ${GIN_ROUND_MODES:-mps no-mps}; do
        logs=$out/n$n-$mode
        flags=(--ranks "$n" --allow-killed $((n - 1)) --logs "$logs"
               --timeout "${GIN_ROUND_TIMEOUT:-420}")
        [ "$mode" = no-mps ] && flags+=(--no-mps)
        args=()
        [ "$n" -eq 2 ] && args+=(--bench)
        start=$(date +%s)
        # time-sliced runs wait longer on the device (each cross-rank step costs ~2.25 ms slices)
        EEP_GIN_GPU_WAIT_S=$([ "$mode" = no-mps ] && echo 180 || echo 60) \
            scripts/one-gpu-cluster.sh "${flags[@]}" -- "$test_bin" "${args[@]}" \
            >"$logs.log" 2>&1
        rc=$?
        secs=$(($(date +%s) - start))
        npass=$(grep -c '^rank.*PASS' "$logs.log")
        nfail=$(grep -c '^rank.*FAIL' "$logs.log")
        mps_note=$(grep -m1 -E 'MPS daemon started|time-sliced' "$logs.log" | sed 's/^one-gpu-cluster: //')
        if [ "$rc" -eq 0 ] && [ "$nfail" -eq 0 ]; then
            what=ok
        elif [ "$rc" -eq 77 ]; then
            what=SKIP # no GPU
        else
            what=FAIL
            failed=$((failed + 1))
        fi
        printf '%-4s N=%d %-7s %4ds  %3d checks passed, %d failed  (%s; %s)\n' "$what" "$n" \
            "$mode" "$secs" "$npass" "$nfail" "$mps_note" "$logs.log" | tee -a "$summary"
        grep -h 'BENCH' "$logs"/rank*.log 2>/dev/null | sed "s/^/    N=$n $mode: /" | tee -a "$summary"
        grep -h 'Assigned NET plugin\|Assigned GIN plugin' "$logs/rank0.log" 2>/dev/null |
            sort -u | head -2 | sed 's/^/    /' >>"$summary"
    done
done
echo "gin-round: $failed failed run(s); summary $summary" | tee -a "$summary"
[ "$failed" -eq 0 ]
