#!/usr/bin/env bash
# deploy/launch.sh - the local launcher behind `make run`.
#
#   deploy/launch.sh [--seconds N] [--replicas R] [--agents A] [--ranks-per-gpu K]
#                    [--faults 1|FILE] [--seed S] [--steps moe|barrier] [--rank-args "ARGS"]
#                    [--allow-inject] [--mps]
#
# Starts a local etcd (127.0.0.1, free ports, a temp data dir), R eepd replicas (default 3, one
# leads) and then:
#   with GPUs: eep-rank processes running checked MoE steps (--steps moe, the default), one per
#     GPU, or K per GPU (--ranks-per-gpu; default 4 when there is one GPU, else 1) each its own
#     one-GPU NCCL "node" (its own NCCL_HOSTID) through our net + GIN test plugin
#     (build/lib/libnccl-net-eep-gin.so), time-sliced (the configuration measured in
#     bench/RESULTS.md); with --mps under an MPS control daemon of the launcher's own (private
#     folders, stopped at the end), so that the ranks' kernels run at once: the environment of
#     scripts/one-gpu-cluster.sh.  scripts/eep_run.py drives them: a live status
#     line, the fault schedule (--faults 1: seeded by --seed; --faults FILE: docs/fault-schedule.md),
#     and at the end summary.txt, summary.json, timeline.json and timeline.png in the run folder.
#   without a GPU: it says so and runs the control plane alone (plus A stand-in agents, default 0,
#     so that views can be watched with eepctl); --faults is ignored there (no ranks).
# With --faults or --allow-inject, eepd takes InjectFault (EEP_EEPD_FAULT_INJECTION=1) and the
# ranks arm what `eepctl inject-fault data-plane RANK SPEC` sends them (eep-rank --agent-faults).
# Runs N seconds (default 180; with ranks, counted from when all run), or until Ctrl-C; then stops
# everything it started, also on errors and signals: ranks, eepd, MPS daemon, etcd (and etcd's
# data dir).  The logs stay in the run folder (printed).  Exit: the rank driver's status with ranks
# (0: no wrong step, every fault recovered), else 0; 2 for usage (a bad schedule included).
# For tests: --rank-bin PATH --gpus G run PATH as the rank on G pretend GPUs (no nvidia-smi).
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$here/build}
seconds=180 replicas=3 agents=0 rank_args="" per_gpu="" faults="" seed=1 steps=moe
rank_bin="" gpus_forced="" allow_inject=0 mps=0
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) seconds=$2; shift 2 ;;
        --replicas) replicas=$2; shift 2 ;;
        --agents) agents=$2; shift 2 ;;
        --rank-args) rank_args=$2; shift 2 ;;
        --ranks-per-gpu) per_gpu=$2; shift 2 ;;
        --faults) faults=$2; shift 2 ;;
        --seed) seed=$2; shift 2 ;;
        --steps) steps=$2; shift 2 ;;
        --rank-bin) rank_bin=$2; shift 2 ;;
        --gpus) gpus_forced=$2; shift 2 ;;
        --allow-inject) allow_inject=1; shift ;;
        --mps) mps=1; shift ;;
        -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
        *) echo "launch.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
for v in "$seconds" "$replicas" "$agents" "$seed" ${per_gpu:+"$per_gpu"} ${gpus_forced:+"$gpus_forced"}; do
    case $v in ''|*[!0-9]*) echo "launch.sh: '$v' is not a whole number" >&2; exit 2 ;; esac
done
[ "$seconds" -ge 1 ] || { echo "launch.sh: --seconds wants N >= 1 (every run is bounded)" >&2; exit 2; }
[ "$replicas" -ge 1 ] || { echo "launch.sh: --replicas wants R >= 1" >&2; exit 2; }
case $per_gpu in 0) echo "launch.sh: --ranks-per-gpu wants a number >= 1" >&2; exit 2 ;; esac
case $steps in moe|barrier) ;; *) echo "launch.sh: --steps is moe or barrier" >&2; exit 2 ;; esac
for b in eepd eepctl eep-agent; do
    [ -x "$build/bin/$b" ] || { echo "launch.sh: $build/bin/$b is missing: run make first" >&2; exit 1; }
done

gpus=0 uuids=()
if [ -n "$gpus_forced" ]; then
    gpus=$gpus_forced
    for ((i = 0; i < gpus; i++)); do uuids+=("GPU-pretend-$i"); done
elif command -v nvidia-smi >/dev/null 2>&1; then
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
    mapfile -t uuids < <(nvidia-smi --query-gpu=uuid --format=csv,noheader 2>/dev/null)
fi
if [ -z "$per_gpu" ]; then
    per_gpu=1
    [ "$gpus" -eq 1 ] && [ -z "$gpus_forced" ] && per_gpu=4
fi
rank_bin=${rank_bin:-$build/bin/eep-rank}
nranks=$((gpus * per_gpu))
# MoE experts: 12, or the least multiple of 12 the starting world divides (8 ranks: 24)
experts=12
while [ "$nranks" -gt 0 ] && [ $((experts % nranks)) -ne 0 ]; do experts=$((experts + 12)); done
plugin=$build/lib/libnccl-net-eep-gin.so
if [ "$gpus" -gt 0 ] && [ "$per_gpu" -gt 1 ] && [ ! -f "$plugin" ]; then
    echo "launch.sh: $per_gpu ranks per GPU need the GIN test plugin $plugin: run make first" >&2
    exit 1
fi
# A bad schedule is a usage error before anything starts.
if [ -n "$faults" ] && [ "$faults" != 1 ] && [ "$faults" != 0 ] && [ "$gpus" -gt 0 ]; then
    python3 "$here/scripts/eep_run.py" check-schedule "$faults" --ranks "$nranks" --steps "$steps" \
        --experts "$experts" >/dev/null || exit 2
fi

# etcd: the same helper the tests use (free ports, health wait, cleanup trap).
. "$here/tests/control/etcd_server.sh"
run_dir=$(mktemp -d /tmp/eep-run.XXXXXX)
export EEP_JOB=${EEP_JOB:-local}
pids=()
driver=""
mps_up=0
# shellcheck disable=SC2317  # stop_pid and cleanup run from the traps
stop_pid() { # PID TENTHS: TERM, then KILL after TENTHS/10 s; reaped
    kill -TERM "$1" 2>/dev/null
    for ((t = 0; t < $2; t++)); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$1" 2>/dev/null
    wait "$1" 2>/dev/null
}
# shellcheck disable=SC2317
cleanup() {
    trap '' INT TERM # the clean-up runs to its end
    # the ranks first (their driver stops them, then exits), while the control plane still runs
    if [ -n "$driver" ]; then
        stop_pid "$driver" 400
        driver=""
    fi
    # a rank the driver could not stop (it was killed itself): by its recorded pid, its group
    if [ -f "$run_dir/rank-pids" ]; then
        while read -r p; do
            kill -CONT -- "-$p" 2>/dev/null
            kill -KILL -- "-$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null
        done <"$run_dir/rank-pids"
    fi
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do stop_pid "$p" 50; done
    pids=()
    if [ "$mps_up" -eq 1 ]; then # after its clients: it exits once they are gone
        echo quit | CUDA_MPS_PIPE_DIRECTORY=$run_dir/mps/pipe nvidia-cuda-mps-control >/dev/null 2>&1
        for _ in $(seq 50); do [ -e "$run_dir/mps/pipe/control" ] || break; sleep 0.1; done
        mps_up=0
    fi
    rm -rf "$run_dir/mps/pipe"
    eep_etcd_stop
}
eep_etcd_start 1 || { echo "launch.sh: etcd did not start (is etcd-server installed?)" >&2; exit 1; }
echo "etcd: $EEP_ETCD_ENDPOINTS (data dir $EEP_TEST_ETCD_DIR, removed at the end)"
# After eep_etcd_start, which installs its own traps: ours stops our processes, then etcd.
trap cleanup EXIT
trap 'exit 130' INT TERM

# With ranks, eepd and the agents detect and settle fast, and eepd places eep-rank's experts.
eepd_env=() agent_env=()
if [ "$gpus" -gt 0 ]; then
    eepd_env=(EEP_EEPD_SETTLE_MS=50 EEP_EEPD_LEASE_TTL_S=3 "EEP_EEPD_NUM_EXPERTS=$experts")
    agent_env=(EEP_AGENT_LEASE_TTL_S=3 EEP_INIT_TIMEOUT_MS=20000)
    if [ -n "$faults" ] && [ "$faults" != 0 ]; then allow_inject=1; fi
    [ "$allow_inject" -eq 1 ] && eepd_env+=(EEP_EEPD_FAULT_INJECTION=1)
fi
ports=()
for i in $(seq 0 $((replicas - 1))); do
    port=$(eep_free_port) mport=$(eep_free_port)
    ports+=("$port")
    # Its own session, as etcd's: a Ctrl-C reaches this script and the rank driver only, and the
    # clean-up stops the ranks, then eepd (which revokes its lease while etcd still answers),
    # then etcd.  The etcd helper's own variables are no eepd knobs.
    setsid env -u EEP_TEST_ETCD_DIR -u EEP_TEST_ETCD_CLIENT_PORTS \
        ${eepd_env[@]+"${eepd_env[@]}"} EEP_EEPD_ID="eepd-$i" EEP_EEPD_LISTEN="127.0.0.1:$port" \
        EEP_EEPD_METRICS_PORT="$mport" "$build/bin/eepd" >"$run_dir/eepd-$i.log" 2>&1 &
    pids+=($!)
    echo "eepd-$i: gRPC 127.0.0.1:$port, metrics http://127.0.0.1:$mport/metrics"
done
ctl=("$build/bin/eepctl" --addr "127.0.0.1:${ports[0]}")

if [ "$gpus" -eq 0 ]; then
    echo "no GPU visible (nvidia-smi lists none): running the control plane alone: etcd at" \
         "$EEP_ETCD_ENDPOINTS, $replicas eepd replicas$([ "$agents" -gt 0 ] && echo ", $agents stand-in agents")."
    [ -n "$faults" ] && echo "(--faults $faults ignored: there are no ranks to inject faults into)"
    for i in $(seq 1 "$agents"); do
        "$build/bin/eep-agent" >"$run_dir/agent-$i.log" 2>&1 &
        pids+=($!)
    done
    echo "logs in $run_dir; try: ${ctl[*]} status   (Ctrl-C stops everything)"
    start=$(date +%s)
    while :; do
        sleep 2
        "${ctl[@]}" status 2>/dev/null | head -20 > "$run_dir/status.txt"
        for p in "${pids[@]}"; do
            kill -0 "$p" 2>/dev/null || { echo "launch.sh: process $p exited; see $run_dir" >&2; exit 1; }
        done
        if [ $(( $(date +%s) - start )) -ge "$seconds" ]; then
            cat "$run_dir/status.txt"
            break
        fi
    done
    exit 0
fi

rank_env=()
if [ "$per_gpu" -gt 1 ]; then
    echo "$gpus GPU(s): $per_gpu ranks per GPU through the GIN test plugin (a test transport)"
    if [ "$mps" -eq 1 ] && command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
        mkdir -p "$run_dir/mps/pipe" "$run_dir/mps/log"
        if CUDA_MPS_PIPE_DIRECTORY=$run_dir/mps/pipe CUDA_MPS_LOG_DIRECTORY=$run_dir/mps/log \
            nvidia-cuda-mps-control -d; then
            mps_up=1
            rank_env+=(CUDA_MPS_PIPE_DIRECTORY="$run_dir/mps/pipe"
                       CUDA_MPS_LOG_DIRECTORY="$run_dir/mps/log")
        fi
    fi
    [ "$mps_up" -eq 1 ] || echo "no MPS daemon$([ "$mps" -eq 1 ] || echo " (--mps starts one)"): the ranks of a GPU run time-sliced (~2.25 ms slices)"
    rank_env+=(NCCL_NET_PLUGIN="$plugin" NCCL_NET_PLUGIN_REF_COUNT=1 NCCL_SOCKET_IFNAME=lo
               NCCL_MNNVL_ENABLE=0 NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER EEP_AGENT_RDMA=0
               # each rank a 12-SM budget (4 send + 8 copy): every rank's blocks resident at
               # once, as make gpu-elastic found (a rank filling the GPU starved its peer's combine)
               "EEP_EP_NUM_SMS=${EEP_EP_NUM_SMS:-12}" "EEP_EP_COPY_SMS=${EEP_EP_COPY_SMS:-8}")
else
    echo "$gpus GPU(s): one rank per GPU"
fi

if [ ! -x "$rank_bin" ]; then
    # No eep-rank in this build: the ranks' membership alone.
    echo "no $rank_bin in this build: stand-in agents in the ranks' place (no steps)"
    for r in $(seq 0 $((nranks - 1))); do
        "$build/bin/eep-agent" --gpu "${uuids[$((r / per_gpu))]:-GPU-$r}" >"$run_dir/rank-$r.log" 2>&1 &
        pids+=($!)
    done
    echo "logs in $run_dir; try: ${ctl[*]} status   (Ctrl-C stops everything)"
    sleep "$seconds"
    exit 0
fi

drv=(python3 "$here/scripts/eep_run.py" run --rank-bin "$rank_bin" --ranks "$nranks"
     --work "$run_dir" --build "$build" --seconds "$seconds" --steps "$steps" --gpus "$gpus"
     --per-gpu "$per_gpu" --uuids "$(IFS=,; echo "${uuids[*]}")" --seed "$seed"
     --experts "$experts")
[ -n "$faults" ] && [ "$faults" != 0 ] && drv+=(--faults "$faults")
for a in $rank_args; do drv+=("--rank-arg=$a"); done
[ "$allow_inject" -eq 1 ] && drv+=("--rank-arg=--agent-faults")
echo "logs in $run_dir; try: ${ctl[*]} status   (Ctrl-C stops everything)"
# The etcd helper's EEP_TEST_* are no knobs: not passed on (the driver drops them).
env ${rank_env[@]+"${rank_env[@]}"} ${agent_env[@]+"${agent_env[@]}"} "${drv[@]}" &
driver=$!
wait "$driver"
rc=$?
driver=""
echo "summary: $run_dir/summary.txt; timeline: $run_dir/timeline.png"
exit "$rc"
