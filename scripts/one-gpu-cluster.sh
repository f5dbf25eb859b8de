#!/usr/bin/env bash
# scripts/one-gpu-cluster.sh --ranks N [options] -- COMMAND [ARGS...]
#
# N ranks on one GPU as one command: starts COMMAND N times, each process a one-GPU "node" of a
# real NCCL communicator (its own NCCL_HOSTID) that reaches the others through our NCCL net + GIN
# plugin (gin/, a test transport), with an MPS control daemon of its own so the ranks' kernels run
# at once.  The daemon's pipe and log folders are private (under a temp folder) and it is always
# stopped at the end, also on failure or Ctrl-C; where nvidia-cuda-mps-control is missing (or with
# --no-mps) the ranks run time-sliced (~2.25 ms slices: correct but slow; deadlines must allow it).
#
# Each rank gets EEP_RANK, EEP_WORLD_SIZE, ONE_GPU_CLUSTER_DIR (a private folder for rendezvous files),
# EEP_BOOTSTRAP=tcp:127.0.0.1:PORT, NCCL_HOSTID, NCCL_NET_PLUGIN (absolute), and
# NCCL_NET_PLUGIN_REF_COUNT=1 NCCL_SOCKET_IFNAME=lo NCCL_MNNVL_ENABLE=0 NCCL_NVLS_ENABLE=0
# CUDA_MODULE_LOADING=EAGER.  Output of rank i goes to LOGS/rank<i>.log.
#
# Options:
#   --ranks N          number of rank processes (default 2)
#   --no-mps           do not start MPS (time-sliced)
#   --timeout S        wall-clock limit for the ranks, seconds (default 600)
#   --logs DIR         where the rank logs go (default: the temp folder, printed)
#   --plugin PATH      the plugin library (default $BUILD/lib/libnccl-net-eep-gin.so)
#   --allow-killed R   rank R may end by SIGKILL (a test that kills it on purpose)
#   --nccl-debug LVL   NCCL_DEBUG for the ranks (default INFO, subsystems INIT,NET)
#   --gpus G           spread the ranks over G GPUs (default 1: all on the current device):
#                      rank i on GPU i % G (EEP_DEVICE), for a machine of several GPUs
#   --node-gpus K      with --gpus: K consecutive ranks form one NCCL node (one NCCL_HOSTID,
#                      NVLink peers), the nodes reach each other through the plugin (GIN);
#                      K <= G, so no two ranks of a node share a GPU (default 1: every rank its
#                      own node).  E.g. 4 GPUs, --ranks 4 --gpus 4 --node-gpus 2: two nodes of
#                      2 GPUs; 2 GPUs, --ranks 2 --gpus 2: two one-GPU nodes on separate GPUs.
# Exit: 0 when every rank exited 0 (or, for the allowed one, was killed), 77 when every rank
# skipped, 1 otherwise.
set -u
ranks=2 mps=1 limit=600 logs="" own_logs=0 plugin="" allow_killed=-1 nccl_debug=INFO gpus=1
node_gpus=1
while [ $# -gt 0 ]; do
    case $1 in
        --ranks) ranks=$2; shift 2 ;;
        --no-mps) mps=0; shift ;;
        --timeout) limit=$2; shift 2 ;;
        --logs) logs=$2; own_logs=1; shift 2 ;;
        --plugin) plugin=$2; shift 2 ;;
        --allow-killed) allow_killed=$2; shift 2 ;;
        --nccl-debug) nccl_debug=$2; shift 2 ;;
        --gpus) gpus=$2; shift 2 ;;
        --node-gpus) node_gpus=$2; shift 2 ;;
        --) shift; break ;;
        *) echo "usage: $0 --ranks N [--no-mps] [--timeout S] [--logs DIR] [--plugin PATH]" \
                "[--allow-killed R] [--nccl-debug LVL] [--gpus G [--node-gpus K]]" \
                "-- COMMAND [ARGS...]" >&2; exit 2 ;;
    esac
done
[ $# -ge 1 ] || { echo "$0: no command (put it after --)" >&2; exit 2; }
for v in ranks gpus node_gpus; do
    case ${!v} in ''|*[!0-9]*|0) echo "$0: --${v//_/-} wants a number of 1 or more" >&2; exit 2 ;; esac
done
if [ "$node_gpus" -gt "$gpus" ]; then
    echo "$0: --node-gpus $node_gpus > --gpus $gpus: two ranks of one node would share a GPU" >&2
    exit 2
fi
if [ $((ranks % node_gpus)) -ne 0 ]; then
    echo "$0: --ranks $ranks is not a whole number of nodes of --node-gpus $node_gpus" >&2
    exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
plugin=${plugin:-$build/lib/libnccl-net-eep-gin.so}
case $plugin in /*) ;; *) plugin=$(pwd)/$plugin ;; esac
if [ ! -f "$plugin" ]; then
    echo "$0: no plugin at $plugin (make builds it)" >&2
    exit 2
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/eep-one-gpu.XXXXXX")
logs=${logs:-$tmp/logs}
mkdir -p "$logs" "$tmp/rdv"
pids=()
mps_up=0

stop_mps() {
    [ "$mps_up" -eq 1 ] || return 0
    mps_up=0
    echo quit | nvidia-cuda-mps-control >/dev/null 2>&1
    # the daemon exits once its clients are gone; give it a bounded while
    for _ in $(seq 1 50); do
        pgrep -u "$(id -u)" -f "nvidia-cuda-mps-control -d" >/dev/null 2>&1 || break
        [ -e "$CUDA_MPS_PIPE_DIRECTORY/control" ] || break
        sleep 0.2
    done
    echo "one-gpu-cluster: MPS daemon stopped (log: $tmp/mps/log)"
}

cleanup() {
    local pid
    for pid in "${pids[@]}"; do
        kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
    done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
    stop_mps
    if [ "$own_logs" -eq 1 ]; then # the logs live elsewhere: keep MPS's log beside them
        [ -d "$tmp/mps/log" ] && cp -r "$tmp/mps/log" "$logs/mps-log" 2>/dev/null
        rm -rf "$tmp"
    else
        rm -rf "$tmp/rdv" "$tmp/mps/pipe"
    fi
}
trap cleanup EXIT
trap 'echo "one-gpu-cluster: interrupted" >&2; exit 130' INT TERM

if [ "$mps" -eq 1 ]; then
    if command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
        export CUDA_MPS_PIPE_DIRECTORY=$tmp/mps/pipe CUDA_MPS_LOG_DIRECTORY=$tmp/mps/log
        mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
        if nvidia-cuda-mps-control -d; then
            mps_up=1
            echo "one-gpu-cluster: MPS daemon started (pipe $CUDA_MPS_PIPE_DIRECTORY)"
        else
            echo "one-gpu-cluster: MPS daemon failed to start; running time-sliced"
            unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
        fi
    else
        echo "one-gpu-cluster: nvidia-cuda-mps-control is missing; running time-sliced" \
             "(~2.25 ms slices)"
    fi
else
    echo "one-gpu-cluster: --no-mps: running time-sliced (~2.25 ms slices)"
fi
export ONE_GPU_MPS=$mps_up

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null || echo 29517)
export NCCL_NET_PLUGIN=$plugin NCCL_NET_PLUGIN_REF_COUNT=1 NCCL_SOCKET_IFNAME=lo \
       NCCL_MNNVL_ENABLE=0 NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER \
       EEP_WORLD_SIZE=$ranks ONE_GPU_CLUSTER_DIR=$tmp/rdv EEP_BOOTSTRAP=tcp:127.0.0.1:$port \
       NCCL_DEBUG=$nccl_debug NCCL_DEBUG_SUBSYS=${NCCL_DEBUG_SUBSYS:-INIT,NET}
runid=$$-$RANDOM
if [ "$gpus" -gt 1 ]; then
    echo "one-gpu-cluster: $ranks ranks on $gpus GPUs, nodes of $node_gpus: $*  (logs $logs)"
else
    echo "one-gpu-cluster: $ranks ranks of: $*  (logs $logs)"
fi
for ((i = 0; i < ranks; i++)); do
    if [ "$gpus" -gt 1 ]; then
        # a node: node_gpus consecutive ranks, one host id, each rank on a GPU of its own
        rank_env=("EEP_DEVICE=$((i % gpus))" "NCCL_HOSTID=eep-one-gpu-$runid-n$((i / node_gpus))")
    else
        rank_env=("NCCL_HOSTID=eep-one-gpu-$runid-$i")
    fi
    env EEP_RANK=$i "${rank_env[@]}" \
        setsid -w timeout --kill-after=10 "$limit" "$@" >"$logs/rank$i.log" 2>&1 &
    pids+=($!)
done

pass=0 skip=0 fail=0
for ((i = 0; i < ranks; i++)); do
    wait "${pids[$i]}"; rc=$?
    if [ "$rc" -eq 0 ] || { [ "$i" -eq "$allow_killed" ] && [ "$rc" -eq 137 ]; }; then
        pass=$((pass + 1)); what=ok
    elif [ "$rc" -eq 77 ]; then
        skip=$((skip + 1)); what=skip
    else
        fail=$((fail + 1)); what=FAIL
    fi
    [ "$rc" -eq 124 ] && what="FAIL (timed out after $limit s)"
    echo "  rank $i: exit $rc $what"
done
pids=()
grep -H -E '^(PASS|FAIL|BENCH|SKIP)' "$logs"/rank*.log | sed "s|^$logs/||"
if [ "$fail" -gt 0 ]; then
    for ((i = 0; i < ranks; i++)); do
        echo "---- rank $i (last 40 lines of $logs/rank$i.log)"
        tail -40 "$logs/rank$i.log"
    done
    exit 1
fi
[ "$pass" -eq 0 ] && exit 77
exit 0
