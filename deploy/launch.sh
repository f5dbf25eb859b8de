#!/usr/bin/env bash
# deploy/launch.sh - the local launcher behind `make run`.
#
#   deploy/launch.sh [--seconds N] [--replicas R] [--agents A] [--rank-args "ARGS"]
#
# Starts a local etcd (127.0.0.1, free ports, a temp dir), R eepd replicas (default 2, one leads),
# and one rank per visible GPU (eep-rank with EEP_DEVICE=i and that GPU's uuid; ARGS go to each,
# e.g. "--interval-ms 50").  Without a GPU it says so and runs the control plane alone (plus A
# stand-in agents, default 0, so that views can be watched).  Runs until Ctrl-C, or N seconds; then
# stops everything it started (a trap, also on errors).  Logs: $EEP_RUN_DIR (printed).
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$here/build}
seconds=0 replicas=2 agents=0 rank_args=""
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) seconds=$2; shift 2 ;;
        --replicas) replicas=$2; shift 2 ;;
        --agents) agents=$2; shift 2 ;;
        --rank-args) rank_args=$2; shift 2 ;;
        -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
        *) echo "launch.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
for b in eepd eepctl eep-agent; do
    [ -x "$build/bin/$b" ] || { echo "launch.sh: $build/bin/$b is missing: run make first" >&2; exit 1; }
done

# etcd: the same helper the tests use (free ports, health wait, cleanup trap).
. "$here/tests/control/etcd_server.sh"
run_dir=$(mktemp -d /tmp/eep-run.XXXXXX)
export EEP_RUN_DIR=$run_dir EEP_JOB=${EEP_JOB:-local}
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null
    done
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
    echo "$gpus GPU(s): one rank per GPU"
    rank_bin=$build/bin/eep-rank
    mapfile -t uuids < <(nvidia-smi --query-gpu=uuid --format=csv,noheader 2>/dev/null)
    for i in $(seq 0 $((gpus - 1))); do
        uuid=${uuids[$i]:-GPU-$i}
        if [ -x "$rank_bin" ]; then
            # eep-rank reads EEP_JOB and EEP_ETCD_ENDPOINTS (exported above) and EEP_DEVICE; it
            # prints one JSON line per second (epoch, rank, barriers, status) to its log.
            # The launcher's own EEP_RUN_DIR / EEP_TEST_* are no knobs: not passed on.
            # shellcheck disable=SC2086  # rank_args is a list of flags
            env -u EEP_RUN_DIR -u EEP_TEST_ETCD_DIR -u EEP_TEST_ETCD_CLIENT_PORTS \
                EEP_DEVICE="$i" EEP_AGENT_GPU_UUID="$uuid" "$rank_bin" $rank_args \
                >"$run_dir/rank-$i.log" 2>&1 &
        else
            # No eep-rank in this build: the rank's membership alone.
            "$build/bin/eep-agent" --gpu "$uuid" >"$run_dir/rank-$i.log" 2>&1 &
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
