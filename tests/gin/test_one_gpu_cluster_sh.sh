#!/usr/bin/env bash
# tests/gin/test_one_gpu_cluster_sh.sh - scripts/one-gpu-cluster.sh's placement of ranks, on the
# CPU with a command that prints what each rank was given (no GPU, no MPS): every rank its own
# NCCL node on the current device by default; with --gpus 4 --node-gpus 2, ranks 0-1 and 2-3 two
# nodes (one NCCL_HOSTID each) on GPUs 0-3 (EEP_DEVICE); with --gpus 2, 4 ranks, two per GPU,
# each its own node; refused: a node larger than the GPUs, ranks that are no whole number of
# nodes, a zero.  Needs the plugin built (make).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
launch=$root/scripts/one-gpu-cluster.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
build=${BUILD:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
[ -f "$build/lib/libnccl-net-eep-gin.so" ] || { echo "SKIP: no plugin in $build (make first)"; exit 77; }

n=0
placed() { # ARGS... : "rank device host world" a line per rank, host ids numbered by first use
    n=$((n + 1))
    BUILD=$build "$launch" --no-mps --logs "$tmp/logs$n" "$@" -- \
        sh -c 'echo "PASS $EEP_RANK ${EEP_DEVICE:--} $NCCL_HOSTID $EEP_WORLD_SIZE"' >"$tmp/out" 2>&1 ||
        { cat "$tmp/out"; fail "launcher $* exit $?"; }
    cat "$tmp/logs$n"/rank*.log | sort -n -k2 | awk '
        { if (!($4 in h)) h[$4] = n++; print $2, $3, "h" h[$4], $5 }'
}

got=$(placed --ranks 3)
[ "$got" = "$(printf '0 - h0 3\n1 - h1 3\n2 - h2 3')" ] || fail "one GPU: $got"
got=$(placed --ranks 4 --gpus 4 --node-gpus 2)
[ "$got" = "$(printf '0 0 h0 4\n1 1 h0 4\n2 2 h1 4\n3 3 h1 4')" ] || fail "two nodes of 2: $got"
got=$(placed --ranks 4 --gpus 2)
[ "$got" = "$(printf '0 0 h0 4\n1 1 h1 4\n2 0 h2 4\n3 1 h3 4')" ] || fail "2 GPUs, 4 nodes: $got"
echo "ok: ranks placed on GPUs and nodes as asked"

refused() { # MESSAGE ARGS...
    local want=$1
    shift
    BUILD=$build "$launch" --no-mps "$@" -- true >"$tmp/out" 2>&1
    [ $? -eq 2 ] && grep -q -- "$want" "$tmp/out" || { cat "$tmp/out"; fail "not refused: $*"; }
}
refused "two ranks of one node would share a GPU" --ranks 4 --gpus 2 --node-gpus 4
refused "not a whole number of nodes" --ranks 3 --gpus 2 --node-gpus 2
refused "wants a number of 1 or more" --ranks 2 --gpus 0
echo "ok: impossible placements refused"
