#!/usr/bin/env bash
# deploy/launch.sh - the local launcher behind `make run`.
#
#   deploy/launch.sh [--seconds N] [--replicas R] [--agents A] [--rank-args "ARGS"]
#                    [--ranks-per-gpu K]
#
# Starts a local etcd (127.0.0.1, free ports, a temp dir), R eepd replicas (default 2, one leads),
# and one rank per visible GPU (eep-rank with EEP_DEVICE=i and that GPU's uuid; ARGS go to each,
# e.g. "--interval-ms 50").  Without a GPU it says so and runs the control plane alone (plus A
# stand-in agents, default 0, so that views can be watched).  Runs until Ctrl-C, or N seconds; then
# stops everything it started (a trap, also on errors).  Logs: $EEP_RUN_DIR (printed).
# --ranks-per-gpu K (default 1): K ranks on each GPU, each its own one-GPU "node" for NCCL (its own
# NCCL_HOSTID) reaching the others through our net + GIN plugin (gin/, a TEST transport:
# build/lib/libnccl-net-eep-gin.so), with an MPS control daemon of the launcher's own (private
# folders under the log dir, stopped at the end) so their kernels run at once; without
# nvidia-cuda-mps-control they run time-sliced.  The environment is scripts/one-gpu-cluster.sh's.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$here/build}
seconds=0 replicas=2 agents=0 rank_args="" per_gpu=1
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) seconds=$2; shift 2 ;;
        --replicas) replicas=$2; shift 2 ;;
        --agents) agents=$2; shift 2 ;;
        --rank-args) rank_args=$2; shift 2 ;;
        --ranks-per-gpu) per_gpu=$2; shift 2 ;;
        -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
        *) echo "launch.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
case $per_gpu in ''|*[!0-9]*|0) echo "launch.sh: --ranks-per-gpu wants a number >= 1" >&2; exit 2 ;; esac
plugin=$build/lib/libnccl-net-eep-gin.so
if [ "$per_gpu" -gt 1 ] && [ ! -f "$plugin" ]; then
    echo "launch.sh: --ranks-per-gpu needs the GIN test plugin $plugin: run make first" >&2
    exit 1
fi
for b in eepd eepctl eep-agent; do
    [ -x "$build/bin/$b" ] || { echo "launch.sh: $build/bin/$b is missing: run make first" >&2; exit 1; }
done

# etcd: the same helper the tests use (free ports, health wait, cleanup trap).
. "$here/tests/control/etcd_server.sh"
run_dir=$(mktemp -d /tmp/eep-run.XXXXXX)
export EEP_RUN_DIR=$run_dir EEP_JOB=${EEP_JOB:-local}
pids=()
mps_up=0
cleanup() {
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null
    done
    # reap them (our own background jobs): gone, not zombies, before the launcher itself exits
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    if [ "$mps_up" -eq 1 ]; then # after its clients: it exits once they are gone
        echo quit | CUDA_MPS_PIPE_DIRECTORY=$run_dir/mps/pipe nvidia-cuda-mps-control >/dev/null 2>&1
        for _ in $(seq 50); do [ -e "$run_dir/mps/pipe/control" ] || break; sleep 0.1; done
        mps_up=0
    fi
    eep_etcd_stop
}
eep_etcd_start 1 || { echo "launch.sh: etcd did not start (is etcd-server installed?)" >&2; exit 1; }
# After eep_etcd_start, which installs its own traps: ours stops our processes, then etcd.
trap cleanup EXIT
trap 'exit 130' INT TERM

ports=()
for i in $(seq 0 $((replicas - 1))); do
    port=$(eep_free_port) mport=$(eep_free_port)
    ports+=("$port")
    EEP_EEPD_ID=eepd-$i EEP_EEPD_LISTEN=127.0.0.1:$port EEP_EEPD_METRICS_PORT=$mport \
        "$build/bin/eepd" >"$run_dir/eepd-$i.log" 2>&1 &
    pids+=($!)
    echo "eepd-$i: gRPC 127.0.0.1:$port, metrics http://127.0.0.1:$mport/metrics"
done
ctl=("$build/bin/eepctl" --addr "127.0.0.1:${ports[0]}")

gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
fi
if [ "$gpus" -eq 0 ]; then
    echo "no GPU visible (nvidia-smi lists none): running the control plane alone: etcd at" \
         "$EEP_ETCD_ENDPOINTS, $replicas eepd replicas$([ "$agents" -gt 0 ] && echo ", $agents stand-in agents")."
    for i in $(seq 1 "$agents"); do
        "$build/bin/eep-agent" >"$run_dir/agent-$i.log" 2>&1 &
        pids+=($!)
    done
else
    rank_env=()
    if [ "$per_gpu" -gt 1 ]; then
        echo "$gpus GPU(s): $per_gpu ranks per GPU through the GIN test plugin (a test transport)"
        if command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
            mkdir -p "$run_dir/mps/pipe" "$run_dir/mps/log"
            if CUDA_MPS_PIPE_DIRECTORY=$run_dir/mps/pipe CUDA_MPS_LOG_DIRECTORY=$run_dir/mps/log \
                nvidia-cuda-mps-control -d; then
                mps_up=1
                rank_env+=(CUDA_MPS_PIPE_DIRECTORY="$run_dir/mps/pipe"
                           CUDA_MPS_LOG_DIRECTORY="$run_dir/mps/log")
            fi
        fi
        [ "$mps_up" -eq 1 ] || echo "no MPS daemon: the ranks of a GPU run time-sliced (~2.25 ms slices)"
        rank_env+=(NCCL_NET_PLUGIN="$plugin" NCCL_NET_PLUGIN_REF_COUNT=1 NCCL_SOCKET_IFNAME=lo
                   NCCL_MNNVL_ENABLE=0 NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER)
    else
        echo "$gpus GPU(s): one rank per GPU"
    fi
    rank_bin=$build/bin/eep-rank
    mapfile -t uuids < <(nvidia-smi --query-gpu=uuid --format=csv,noheader 2>/dev/null)
    for r in $(seq 0 $((gpus * per_gpu - 1))); do
        i=$((r / per_gpu))
        uuid=${uuids[$i]:-GPU-$i}
        # K ranks of one GPU: each its own NCCL "host" (NCCL refuses two ranks of one GPU and host)
        host_env=()
        [ "$per_gpu" -gt 1 ] && host_env=(NCCL_HOSTID="eep-launch-$$-$r")
        if [ -x "$rank_bin" ]; then
            # eep-rank reads EEP_JOB and EEP_ETCD_ENDPOINTS (exported above) and EEP_DEVICE; it
            # prints one JSON line per second (epoch, rank, barriers, status) to its log.
            # The launcher's own EEP_RUN_DIR / EEP_TEST_* are no knobs: not passed on.
            # shellcheck disable=SC2086  # rank_args is a list of flags
            env -u EEP_RUN_DIR -u EEP_TEST_ETCD_DIR -u EEP_TEST_ETCD_CLIENT_PORTS \
                ${rank_env[@]+"${rank_env[@]}"} ${host_env[@]+"${host_env[@]}"} \
                EEP_DEVICE="$i" EEP_AGENT_GPU_UUID="$uuid" "$rank_bin" $rank_args \
                >"$run_dir/rank-$r.log" 2>&1 &
        else
            # No eep-rank in this build: the rank's membership alone.
            "$build/bin/eep-agent" --gpu "$uuid" >"$run_dir/rank-$r.log" 2>&1 &
        fi
        pids+=($!)
    done
fi
echo "logs in $run_dir; try: ${ctl[*]} status   (Ctrl-C stops everything)"

start=$(date +%s)
while :; do
    sleep 2
    "${ctl[@]}" status 2>/dev/null | head -20 > "$run_dir/status.txt"
    for p in "${pids[@]}"; do
        kill -0 "$p" 2>/dev/null || { echo "launch.sh: process $p exited; see $run_dir" >&2; exit 1; }
    done
    if [ "$seconds" -gt 0 ] && [ $(( $(date +%s) - start )) -ge "$seconds" ]; then
        cat "$run_dir/status.txt"
        break
    fi
done
