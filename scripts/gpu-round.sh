#!/usr/bin/env bash
# scripts/gpu-round.sh [check] [bench] [jit] [membw] [trace] | digest - one device call's worth
# of GPU work, with every log under $OUT (the device tool brings $OUT back), so a session spends
# device time on runs, not on calls.  Default: check bench jit.
#
#   check  make gpu-check (one process per visible GPU); stops the round when it fails, since
#          benchmarks of kernels that fail their checks mean nothing
#   bench  make bench-ep-modes at every visible GPU (T 4096 and 128, bf16 and fp8, three modes,
#          beside the NCCL baseline), then make bench-barrier
#   jit    eep-jit-bench --gpu (cold/warm JIT, the EP pair per rank count, the shrink prefetch)
#   membw  make bench-membw (per-SM HBM and NVLink copy rates)
#   budget checked dispatch/combine at SM budgets 2, 8, 24 and the device (T 512), both layouts,
#          make bench-ep-budgets, and with BUDGET_SPLIT=1 the sender/copier split at budgets 8
#          and 24 (EEP_EP_COPY_SMS)
#   digest (alone) print the kernel sources' digest that a round's summary.txt shows, and stop
#   trace  eep-bench ep --trace at 2 ranks (1 on a one-GPU machine): where the time goes (phase
#          stamps per block group) at T 128 alignment 1 and T 4096 alignment 1 and 128
#          (no-cpu-sync, cached), bf16, H 7168, K 8
#   ncu    Nsight Compute on one rank's no-cpu-sync EP launches 3-6 (dispatches and combines:
#          both kernels are eep_jit_entry with the same grid; a dispatch writes the rows, a
#          combine reads them) at T 4096 and T 128 alignment 1, bf16: time, DRAM bytes,
#          instructions, occupancy and the warp stall reasons per issued instruction.  ncu locks
#          the SM clock at base and flushes the caches before each kernel, so its times exceed
#          eager ones.
#
# Example: run(command="scripts/gpu-round.sh check bench", kind="nvidia-h200-x2").  Each part's
# wall time and exit status go to $OUT/summary.txt; its full output to $OUT/<part>.log.
set -u
out=${OUT:-/tmp/eep-gpu-round}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(check bench jit)
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
# The device tool copies the working tree, but its .git may be an older one (HEAD read 7c33326
# all day on 2026-11-30 while later trees ran): the kernel sources' digest names what ran.
# Compare with `scripts/gpu-round.sh digest` here.
digest=$(cat kernels/ep/*.cuh kernels/ep/*.h kernels/common/*.cuh barrier/*.cuh barrier/*.h \
         2>/dev/null | sha256sum | cut -c1-12)
if [ "${1:-}" = digest ]; then
    echo "$digest"
    exit 0
fi
echo "gpu-round $(date -u +%FT%TZ): ${ngpu} GPU(s), parts: ${parts[*]}, kernel sources $digest" \
    | tee "$out/summary.txt"
[ "$ngpu" -ge 1 ] || { echo "no GPU visible" | tee -a "$out/summary.txt"; exit 1; }
export trace_ranks=$(( ngpu < 2 ? ngpu : 2 ))
# Each make target builds only what it needs (libeep, the GPU tests, eep-bench): the GPU machine
# has no gRPC or etcd and no network to install them.
export MAKEFLAGS="-j$(nproc)"

run_part() {
    local name=$1 start rc
    shift
    start=$(date +%s)
    "$@" >"$out/$name.log" 2>&1
    rc=$?
    echo "$name: exit $rc after $(( $(date +%s) - start )) s" | tee -a "$out/summary.txt"
    tail -15 "$out/$name.log"
    return $rc
}

for part in "${parts[@]}"; do
    case $part in
    check) run_part gpu-check make gpu-check || exit 1 ;;
    bench)
        run_part bench-ep-modes make bench-ep-modes EEP_BENCH_NRANKS="$ngpu"
        if [ "$ngpu" -ge 2 ]; then
            run_part bench-barrier make bench-barrier
        else
            echo "bench-barrier: skipped (it needs 2 GPUs, have $ngpu)" | tee -a "$out/summary.txt"
        fi ;;
    budget) # issue 27: checked rows at small budgets, the budget table, the split sweep
        run_part budget-check sh -c 'make build/bin/eep-bench &&
            for l in expert rank; do for m in cpu-sync no-cpu-sync cached; do
            build/bin/eep-bench ep --nranks 1 --experts 256 --hidden 7168 --topk 8 --tokens 512 \
                --dtype bf16 --mode $m --layout $l --num-sms 2,8,24,0 --iters 3 || exit 1;
            done; done; build/bin/eep-bench ep --nranks 1 --experts 256 --hidden 7168 --topk 8 \
                --tokens 128 --dtype fp8 --mode cached --layout rank --num-sms 24,0 --iters 3'
        run_part bench-ep-budgets make bench-ep-budgets EEP_BENCH_NRANKS="$ngpu"
        run_part budget-no-ce sh -c 'for m in cpu-sync cached; do for ce in 0 1; do
            echo "== T 4096 rank-major $m EEP_EP_COPY_ENGINE=$ce"; EEP_EP_COPY_ENGINE=$ce \
            build/bin/eep-bench ep --nranks 1 --experts 256 --hidden 7168 --topk 8 --tokens 4096 \
                --dtype bf16 --mode $m --layout rank --num-sms 8,24,0 --no-check --iters 50 |
            grep "^| ours"; done; done'
        [ -n "${BUDGET_SPLIT:-}" ] && run_part budget-split-rank sh -c 'for b in 24 8; do for s in 1 2 3 4 6 8 12; do
            [ $s -lt $b ] || continue; echo "== T 4096 rank-major budget $b senders $s"
            EEP_EP_COPY_SMS=$((b - s)) build/bin/eep-bench ep --nranks 1 --experts 256 --hidden 7168 \
                --topk 8 --tokens 4096 --dtype bf16 --mode no-cpu-sync --layout rank --num-sms $b \
                --no-check --iters 50 | grep "^| ours"; done; done'
        [ -n "${BUDGET_SPLIT:-}" ] && run_part budget-split sh -c 'for t in 4096 128; do for b in 8 24; do for s in 1 2 3 4 6; do
            echo "== T $t budget $b senders $s"; EEP_EP_COPY_SMS=$((b - s)) build/bin/eep-bench ep \
                --nranks 1 --experts 256 --hidden 7168 --topk 8 --tokens $t --dtype bf16 \
                --mode no-cpu-sync --num-sms $b --no-check --iters 50 | grep "^| ours"; done; done; done' ;;
    jit) run_part jit-bench sh -c 'make build/bin/eep-jit-bench && build/bin/eep-jit-bench --gpu' ;;
    membw) run_part membw make bench-membw ;;
    trace) run_part trace sh -c 'make build/bin/eep-bench &&
        a="ep --nranks $trace_ranks --baseline nccl --experts 256 --hidden 7168 --topk 8" &&
        a="$a --dtype bf16 --trace" &&
        for m in no-cpu-sync cached; do echo "== T 128 align 1 $m";
            build/bin/eep-bench $a --tokens 128 --align 1 --mode $m || exit 1; done &&
        for al in 1 128; do for m in no-cpu-sync cached; do echo "== T 4096 align $al $m";
            build/bin/eep-bench $a --tokens 4096 --align $al --mode $m || exit 1; done; done' ;;
    ncu) run_part ncu sh -c 'make build/bin/eep-bench &&
        m="gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum" &&
        m="$m,smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active" &&
        m="$m,regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio" &&
        for t in 4096 128; do
            echo "== T $t";
            /usr/local/cuda/bin/ncu --target-processes all -k regex:eep_jit_entry \
                --launch-skip 2 --launch-count 4 --metrics "$m" build/bin/eep-bench ep \
                --nranks 1 --experts 256 --hidden 7168 --topk 8 --no-check --iters 3 \
                --warmup 1 --tokens $t --align 1 --mode no-cpu-sync 2>&1 |
                grep -E "^ +(eep_jit_entry|gpu__|dram__|smsp__|sm__)" || exit 1; done' ;;
    *) echo "gpu-round.sh: unknown part '$part' (check, bench, jit, membw, trace, ncu)" >&2; exit 2 ;;
    esac
done
