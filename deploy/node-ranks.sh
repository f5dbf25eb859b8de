#!/usr/bin/env bash
# deploy/node-ranks.sh [--max-restarts N] [-- EEP_RANK_ARGS...] - the entry point of a worker pod
# that holds all the GPUs of its node (deploy/k8s/workers.yaml): one eep-rank per visible GPU,
# with EEP_DEVICE=i and that GPU's uuid (EEP_AGENT_GPU_UUID).  Each rank carries its own agent
# in-process (libeep_agent): it joins etcd, waits for a view holding it, and follows the views.
#
# All ranks of the node share one container, so they reach each other over NVLink (CUDA P2P
# inside one IPC namespace).  A rank that dies on its own is started again (it rejoins as a new
# member; the survivors shrink, then grow back) up to --max-restarts times (default 3) per GPU;
# past that the pod exits non-zero and the Job replaces it.  SIGTERM (a drain, a node
# maintenance) goes to every rank, which leave gracefully (a new view at once); exit 0 then.
set -u
max_restarts=3
while [ $# -gt 0 ]; do
    case $1 in
        --max-restarts=*) max_restarts=${1#*=} ;;
        --max-restarts) shift; max_restarts=${1:-} ;;
        --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        --) shift; break ;;
        *) echo "node-ranks.sh: unknown argument '$1' (rank flags go after --)" >&2; exit 2 ;;
    esac
    shift
done
case $max_restarts in
    ''|*[!0-9]*) echo "node-ranks.sh: --max-restarts needs a whole number, not '$max_restarts'" >&2
                 exit 2 ;;
esac
rank_bin=${EEP_RANK_BIN:-eep-rank}
command -v "$rank_bin" >/dev/null || { echo "node-ranks.sh: $rank_bin is not on PATH" >&2; exit 1; }

mapfile -t uuids < <(nvidia-smi --query-gpu=uuid --format=csv,noheader 2>/dev/null)
n=${EEP_NODE_GPUS:-${#uuids[@]}}
[ "$n" -ge 1 ] 2>/dev/null || { echo "node-ranks.sh: no GPU visible (nvidia-smi -L)" >&2; exit 80; }

pids=() restarts=() stopping=0
start() { # GPU-INDEX RANK-ARGS...
    local g=$1
    shift
    EEP_DEVICE=$g EEP_AGENT_GPU_UUID=${uuids[$g]:-GPU-$g} "$rank_bin" "$@" &
    pids[$g]=$!
    echo "node-ranks: GPU $g (${uuids[$g]:-?}): eep-rank pid ${pids[$g]}"
}
stop() {
    stopping=1
    local p
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
}
trap stop TERM INT

for ((i = 0; i < n; i++)); do
    restarts[$i]=0
    start "$i" "$@"
done
rc=0
while [ ${#pids[@]} -gt 0 ]; do
    done_pid=
    wait -n -p done_pid
    code=$?
    # a signal interrupts wait: go on waiting for the ranks to leave
    [ -n "${done_pid:-}" ] || continue
    for ((i = 0; i < n; i++)); do
        [ "${pids[$i]:-}" = "$done_pid" ] || continue
        unset "pids[$i]"
        if [ $stopping -eq 1 ]; then
            :
        elif [ $code -ne 0 ] && [ "${restarts[$i]}" -lt "$max_restarts" ]; then
            restarts[$i]=$((restarts[$i] + 1))
            echo "node-ranks: GPU $i's rank exited $code; restart ${restarts[$i]}/$max_restarts"
            sleep 1
            start "$i" "$@"
        elif [ $code -ne 0 ]; then
            echo "node-ranks: GPU $i's rank exited $code $max_restarts times; the pod gives up"
            rc=$code
            stop
        fi
    done
done
exit $rc
