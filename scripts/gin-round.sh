#!/usr/bin/env bash
# scripts/gin-round.sh - the GPU machine's round for our NCCL net + GIN plugin (make gpu-gin), made
# to be short and to bring back few files.  In order:
#   cpu      the plugin's CPU tests (make gin-test)
#   gin      tests/gpu/gin/test_gin_gpu at N = 2, 4, 8 ranks on one GPU with MPS, then N = 2
#            time-sliced (--no-mps); the N = 2 runs also measure (--bench); putValue is not run
#            (NCCL 2.28.9 bug: test_gin_gpu --put-value, gin/README.md)
#   runtime  tests/gpu/test_one_gpu_runtime (eep_runtime_create with GIN, 20,000 barriers per
#            mode - issue 22 asks 100,000: GIN_ROUND_RT_COUNT=100000 takes ~5x longer - and the
#            SIGSTOPped-peer timeout) at N = 2, 4, 8 with MPS
# Two device calls of at most 500 s each (the build included):
#   GIN_ROUND_PARTS="cpu gin" make gpu-gin      (worst case ~120 + 3 x 80 + 120 s)
#   GIN_ROUND_PARTS=runtime make gpu-gin        (worst case ~120 + 3 x 110 s)
# each through scripts/one-gpu-cluster.sh.  Under $OUT (else $BUILD/gin-round) it writes ONLY
# summary.txt (one line per run, the BENCH rows for bench/RESULTS.md, the first failures) and one
# combined log per run (gin-n<N>-<mode>.log) plus runtime.log (its runs one after the other): every
# rank's lines prefixed "[rank i] ", NCCL's INFO lines kept only where they name plugins or GIN.
# Knobs: GIN_ROUND_PARTS ("cpu gin runtime"), GIN_ROUND_RANKS (MPS runs, "2 4 8"),
# GIN_ROUND_NOMPS_RANKS ("2"; "" for none), GIN_ROUND_MODES ("mps no-mps"),
# GIN_ROUND_TIMEOUT_MPS (80 s a run), GIN_ROUND_TIMEOUT_NOMPS (120), GIN_ROUND_RT_RANKS ("2 4 8"),
# GIN_ROUND_RT_COUNT (20000), GIN_ROUND_RT_TIMEOUT (110: the first run JIT-compiles the GIN
# barrier with nvcc; later runs hit the shared cache), GIN_ROUND_NCCL_DEBUG (INFO),
# GIN_ROUND_CLUSTER_ARGS (more launcher flags for every run, e.g. "--gpus 2" for one-GPU nodes
# on separate GPUs, "--gpus 4 --node-gpus 2" for two nodes of 2 GPUs: GIN across, NVLink within).
#   hybrid   issue 23: hybrid dispatch/combine (every peer a GIN peer, lsaSize 1) at N = 2, 4, 8
#            with MPS: eep-bench ep (--baseline nccl: NCCL's send/recv over the same plugin)
#            against the CPU reference in the three modes, bf16 and fp8, -1 ids, a hotspot, a rank
#            with no tokens (fresh inputs, outputs poisoned, every element, combine bit-equal to the
#            reference twice); tests/gpu/test_ep (a NO_CPU_SYNC pair captured in a graph: 2 kernel
#            nodes, 5 replays bit-identical; bad expert id; a peer that stops calling); and
#            tests/gpu/test_ep_hybrid kill|stop dispatch|combine (all four: a rank SIGKILLed or
#            SIGSTOPped mid-call: the others get EEP_ERR_PEER_TIMEOUT naming it, then shrink and
#            run checked pairs on a fresh runtime).  nvcc JIT-compiles each hybrid variant once per N (~10
#            variants, 10-30 s each) into EEP_JIT_CACHE_DIR (default: the round's temp folder),
#            so one N is about one device call of 10 minutes:
#              make gpu-hybrid                                  (N = 2, 4, 8 in one go)
#              GIN_ROUND_HY_RANKS=2 make gpu-hybrid             (one N a call; set
#                                                              EEP_JIT_CACHE_DIR=/tmp/eep-jit to
#                                                              keep the cubins between calls)
#            Knobs: GIN_ROUND_HY_RANKS ("2 4 8"), GIN_ROUND_HY_TIMEOUT (150 s a run),
#            GIN_ROUND_HY_MPS (mps: the runs that kill nothing share the GPU through MPS; no-mps:
#            every run time-sliced).
# Exit 0 when every run passed (or skipped: no GPU).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
build=${BUILD:-build}
out=${OUT:-$build/gin-round}
mkdir -p "$out"
summary=$out/summary.txt
: >"$summary"
parts=${GIN_ROUND_PARTS:-cpu gin runtime}
gin_bin=$build/tests/gpu/gin/test_gin_gpu
rt_bin=$build/tests/gpu/test_one_gpu_runtime
work=$(mktemp -d "${TMPDIR:-/tmp}/eep-gin-round.XXXXXX") # rank logs, MPS logs: never under $OUT
trap 'rm -rf "$work"' EXIT
export EEP_JIT_CACHE_DIR=${EEP_JIT_CACHE_DIR:-$work/jit-cache}

say() { echo "$*" | tee -a "$summary"; }

hy_bins=("$build/bin/eep-bench" "$build/tests/gpu/test_ep" "$build/tests/gpu/test_ep_hybrid")
if ! make --no-print-directory BUILD="$build" gin-gpu-test "$rt_bin" "${hy_bins[@]}" \
        >"$work/build.log" 2>&1; then
    say "FAIL build"
    tail -30 "$work/build.log" >>"$summary"
    exit 1
fi
# the device's copy carries uncommitted files too: say so, or the commit named is not what ran
dirty=$(git status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo " + uncommitted changes")
say "# gin-round $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname), commit $(git rev-parse --short HEAD 2>/dev/null)${dirty}"
nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv,noheader 2>/dev/null |
    sed 's/^/# GPU: /' | tee -a "$summary"
command -v nvidia-cuda-mps-control >/dev/null 2>&1 ||
    say "# no nvidia-cuda-mps-control: the mps runs are time-sliced"

failed=0
case " $parts " in *" cpu "*)
    if make --no-print-directory BUILD="$build" gin-test >"$work/cpu.log" 2>&1; then
        say "ok   cpu tests: $(tail -1 "$work/cpu.log")"
    else
        failed=$((failed + 1))
        say "FAIL cpu tests: $(tail -1 "$work/cpu.log")"
        grep -E 'FAIL|check failed' "$work/cpu.log" | head -20 | sed 's/^/    /' >>"$summary"
    fi ;;
esac

# combine DIR RANKS > file: every rank's log, prefixed; NCCL's INFO lines only where they matter.
combine() {
    local dir=$1 n=$2 i
    for ((i = 0; i < n; i++)); do
        [ -f "$dir/rank$i.log" ] || continue
        awk -v p="[rank $i] " '!/NCCL INFO/ || /Assigned|GIN|[Pp]lugin|rror|WARN|abort|Abort/ {
            print p $0 }' "$dir/rank$i.log"
    done
}

# run NAME LOG N TIMEOUT MODE -- COMMAND...: one cluster run, appended to LOG, a summary line.
run() {
    local name=$1 log=$2 n=$3 limit=$4 mode=$5 start rc secs npass nfail what note
    shift 6
    local logs=$work/$name
    local flags=(--ranks "$n" --allow-killed $((n - 1)) --logs "$logs"
                                  --timeout "$limit" --nccl-debug "${GIN_ROUND_NCCL_DEBUG:-INFO}")
    [ "$mode" = no-mps ] && flags+=(--no-mps)
    # shellcheck disable=SC2206  # a list of flags
    [ -n "${GIN_ROUND_CLUSTER_ARGS:-}" ] && flags+=(${GIN_ROUND_CLUSTER_ARGS})
    start=$(date +%s)
    echo "==== $name: $n ranks, $mode, limit $limit s, $(date -u '+%H:%M:%S UTC')" >>"$log"
    # the launcher's own lines; its copies of the rank logs are left out (combined below)
    scripts/one-gpu-cluster.sh "${flags[@]}" -- "$@" >"$work/$name.cluster" 2>&1
    rc=$?
    awk '/^---- rank/ { exit } !/^rank[0-9]+\.log:/' "$work/$name.cluster" >>"$log"
    # this run's sharing (its launcher's line; the log holds every run before it too)
    note=$(grep -m1 -h -E 'MPS daemon started|time-sliced' "$work/$name.cluster" |
        sed 's/^one-gpu-cluster: //;s/ (pipe .*//')
    rm -f "$work/$name.cluster"
    secs=$(($(date +%s) - start))
    combine "$logs" "$n" >>"$log"
    npass=$(cat "$logs"/rank*.log 2>/dev/null | grep -c '^PASS')
    nfail=$(cat "$logs"/rank*.log 2>/dev/null | grep -c '^FAIL')
    if [ "$rc" -eq 0 ] && [ "$nfail" -eq 0 ]; then
        what=ok
    elif [ "$rc" -eq 77 ]; then
        what=SKIP
    else
        what=FAIL
        failed=$((failed + 1))
    fi
    [ "$rc" -ne 0 ] && grep -q 'timed out' "$log" && note="$note; TIMED OUT"
    printf '%-4s %-16s %4ds  %3d passed, %d failed  (%s; %s)\n' "$what" "$name" "$secs" \
        "$npass" "$nfail" "$note" "$(basename "$log")" | tee -a "$summary"
    cat "$logs"/rank*.log 2>/dev/null | grep -h '^BENCH' | sed 's/^BENCH /    /' | tee -a "$summary"
    if [ "$what" = FAIL ]; then
        # the first failures, and each rank's last step (what a hang was doing)
        cat "$logs"/rank*.log 2>/dev/null | grep -h '^FAIL' | head -8 | sed 's/^/    /' >>"$summary"
        for f in "$logs"/rank*.log; do
            [ -f "$f" ] || continue
            echo "    $(basename "$f" .log) last: $(grep -E '^BEGIN' "$f" | tail -1)" >>"$summary"
        done
        grep -h -E 'WARN|GIN Progress' "$logs"/rank*.log 2>/dev/null | sort | uniq -c | sort -rn |
            head -6 | sed 's/^/    /' >>"$summary"
    fi
    rm -rf "$logs"
}

case " $parts " in *" gin "*)
    for mode in ${GIN_ROUND_MODES:-mps no-mps}; do
        if [ "$mode" = mps ]; then
            ranks=${GIN_ROUND_RANKS:-2 4 8} limit=${GIN_ROUND_TIMEOUT_MPS:-80} wait_s=20
        else
            ranks=${GIN_ROUND_NOMPS_RANKS-2} limit=${GIN_ROUND_TIMEOUT_NOMPS:-120} wait_s=60
        fi
        for n in $ranks; do
            args=()
            [ "$n" -eq 2 ] && args+=(--bench)
            EEP_GIN_GPU_WAIT_S=$wait_s run "gin-n$n-$mode" "$out/gin-n$n-$mode.log" "$n" \
                "$limit" "$mode" -- "$gin_bin" "${args[@]}"
        done
    done ;;
esac

case " $parts " in *" runtime "*)
    : >"$out/runtime.log"
    for n in ${GIN_ROUND_RT_RANKS:-2 4 8}; do
        EEP_GIN=require run "runtime-n$n-mps" "$out/runtime.log" "$n" \
            "${GIN_ROUND_RT_TIMEOUT:-110}" mps -- "$rt_bin" "${GIN_ROUND_RT_COUNT:-20000}"
    done ;;
esac
case " $parts " in *" hybrid "*)
    : >"$out/hybrid.log"
    hy_limit=${GIN_ROUND_HY_TIMEOUT:-150}
    hy_mode=${GIN_ROUND_HY_MPS:-mps} # mps, or no-mps: the runs that kill nothing time-sliced too
    # N processes share the GPU's 132 SMs and their kernels wait for one another: every block of
    # every rank must be resident at once, so each rank takes 4 sending + 8 copying blocks (8 x
    # 12 = 96 at N = 8; a rank that filled the GPU would keep the others' blocks from starting)
    # (EEP_EP_NUM_SMS is the call's whole budget: 12 = 4 sending + the 8 EEP_EP_COPY_SMS copying)
    # (at 6 and 8 ranks under MPS this timed out in every rank while kernels launched with PDL:
    # each rank then held 24 blocks; the runtime now launches plainly when processes share the
    # GPU through MPS, eep_runtime_gpu_sharers; bench/RESULTS.md 2026-12-02 20:55 UTC)
    export EEP_EP_NUM_SMS=${EEP_EP_NUM_SMS:-12} EEP_EP_COPY_SMS=${EEP_EP_COPY_SMS:-8}
    # GIN_ROUND_HY_CASES: a subset of the runs below by name suffix (e.g. "no-cpu-sync
    # kill-dispatch"), for a device call that must be short; default all
    want() { [ -z "${GIN_ROUND_HY_CASES:-}" ] || case " $GIN_ROUND_HY_CASES " in *" $1 "*) true ;; *) false ;; esac; }
    # eep-bench ep: one rank of the cluster's job per process (no --nranks); rank 0 prints the
    # table, whose rows go to the summary labelled as the test transport's speed
    bench() {
        local n=$1 name=$2
        shift 2
        EEP_GIN=require EEP_EP_PREFETCH_SHRINK=0 run "$name" "$out/hybrid.log" "$n" "$hy_limit" \
            "$hy_mode" -- "$build/bin/eep-bench" ep --baseline nccl --experts $((8 * n)) --iters 3 \
            --warmup 1 "$@"
        awk -v c="$name" '/^==== /{ s = index($0, c) > 0 } s && /^\[rank 0\] (\| (ours|nccl)|ours:)/ {
            sub(/^\[rank 0\] /, ""); print "    " $0 }' "$out/hybrid.log" | tail -4 | tee -a "$summary"
    }
    for n in ${GIN_ROUND_HY_RANKS:-2 4 8}; do
        common=(--tokens 256 --hidden 2048 --topk 8 --align 16)
        ! want no-cpu-sync ||
            bench "$n" "hy-n$n-no-cpu-sync" "${common[@]}" --mode no-cpu-sync --dtype bf16
        ! want cpu-sync-hotspot ||
            bench "$n" "hy-n$n-cpu-sync-hotspot" "${common[@]}" --mode cpu-sync --gating hotspot
        ! want cached-silent ||
            bench "$n" "hy-n$n-cached-silent" "${common[@]}" --mode cached --gating silent
        ! want fp8-masked || bench "$n" "hy-n$n-fp8-masked" "${common[@]}" --mode no-cpu-sync \
            --dtype fp8 --gating masked
        ! want test_ep || EEP_GIN=require run "hy-n$n-test_ep" "$out/hybrid.log" "$n" \
            "$hy_limit" "$hy_mode" -- "$build/tests/gpu/test_ep"
        # a SIGKILLed MPS client takes its MPS peers' contexts down with it (MPS delivers the
        # fault to every client of the GPU: bench/RESULTS.md), so the kills run time-sliced
        for k in "kill dispatch" "kill combine" "stop dispatch" "stop combine"; do
            km=$hy_mode
            [ "${k%% *}" = kill ] && km=no-mps
            ! want "${k// /-}" || EEP_GIN=require EEP_TIMEOUT_MS=4000 run "hy-n$n-${k// /-}" \
                "$out/hybrid.log" "$n" "$hy_limit" "$km" -- "$build/tests/gpu/test_ep_hybrid" $k
        done
        # the transport each rank's runtime chose (eep_ep_transport): hybrid everywhere
        say "    hy-n$n transport: $(grep -h -o -E 'ours: [a-z]+ mode|PASS transport [^:]*: [a-z]+' \
            "$out/hybrid.log" | sed 's/PASS transport \[rank [0-9]*\]: /rank: /' | sort | uniq -c |
            tr -s ' ' | tr '\n' ';')"
    done
    say "hybrid: speeds above are over the eep-gin plugin (a test transport: copies between processes on one GPU), beside NCCL's send/recv over the same plugin; not RDMA" ;;
esac
say "gin-round: $failed failed run(s); $(date -u '+%H:%M:%S UTC')"
case " $parts " in *" runtime "*) ;; *)
    say "gin-round: the runtime part is the second call: GIN_ROUND_PARTS=runtime make gpu-gin" ;;
esac
[ "$failed" -eq 0 ]
