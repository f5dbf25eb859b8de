#!/usr/bin/env bash
# test_rank_nogpu.sh - eep-rank on a machine without a GPU: one clear line on stderr, nothing on
# stdout, EEP_ERR_NO_DEVICE's exit code (80), at once and before it touches the control plane
# (EEP_ETCD_ENDPOINTS points at a port nobody listens on).  Also the getopt_long parsing, which
# comes first: --opt=value and --opt value both parse (then 80), --help and --version exit 0, a
# bad flag, value, operand or fault spec exits 2 naming it.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-$here/build}
bin=$build/bin/eep-rank
[ -x "$bin" ] || { echo "skip: $bin was not built (no control plane here)"; exit 77; }
if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    echo "skip: this machine has a GPU; the test covers the no-GPU path"; exit 77
fi
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
fail() { echo "FAIL: $*"; echo "--- stdout"; cat "$out"; echo "--- stderr"; cat "$err"; exit 1; }

start=$(date +%s%N)
env -i PATH="$PATH" HOME="${HOME:-/tmp}" EEP_ETCD_ENDPOINTS=127.0.0.1:1 EEP_JOB=nogpu EEP_DEVICE=0 \
    timeout 20 "$bin" >"$out" 2>"$err"
rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "eep-rank without a GPU: exit $rc after $ms ms: $(cat "$err")"
[ "$rc" -eq 80 ] || fail "exit code $rc, expected 80 (EEP_ERR_NO_DEVICE)"
[ "$(wc -l <"$err")" -eq 1 ] || fail "expected exactly one line on stderr"
grep -q "no usable GPU" "$err" || fail "the line does not say there is no usable GPU"
grep -q "EEP_ERR_NO_DEVICE" "$err" || fail "the line does not name EEP_ERR_NO_DEVICE"
[ ! -s "$out" ] || fail "stdout is not empty"
[ "$ms" -lt 10000 ] || fail "took $ms ms: it must not wait for the control plane"

# --interval-ms 0 is allowed (back-to-back steps); a negative one and an unknown mode are not.
timeout 20 "$bin" --interval-ms -1 >"$out" 2>"$err"
rc=$?
[ "$rc" -eq 2 ] || fail "--interval-ms -1: exit $rc, expected 2 (usage)"
grep -q "bad argument '--interval-ms'" "$err" || fail "--interval-ms -1: no clear usage error"
timeout 20 "$bin" --steps gemm >"$out" 2>"$err"
rc=$?
[ "$rc" -eq 2 ] || fail "--steps gemm: exit $rc, expected 2 (usage)"
grep -q "bad argument 'gemm'" "$err" || fail "--steps gemm: no clear usage error"
timeout 20 "$bin" --help >"$out" 2>"$err" || fail "--help did not exit 0"
grep -q -- "--fault=SPEC" "$out" || fail "--help does not list --fault"
grep -q -- "--layout=expert|rank" "$out" || fail "--help does not list --layout"
grep -q -- "--interval-ms=N .*default 10" "$out" || fail "--help does not give --interval-ms's default"
timeout 20 "$bin" --version >"$out" 2>"$err" || fail "--version did not exit 0"
grep -q "^eep-rank (ElasticEP) [0-9]" "$out" || fail "--version printed '$(cat "$out")'"

# NAME WANT_RC WANT_STDERR ARGS...: eep-rank without a GPU, stderr must hold WANT_STDERR
expect() {
    local name=$1 want=$2 msg=$3 rc
    shift 3
    env -i PATH="$PATH" HOME="${HOME:-/tmp}" EEP_ETCD_ENDPOINTS=127.0.0.1:1 EEP_JOB=nogpu \
        timeout 20 "$bin" "$@" >"$out" 2>"$err"
    rc=$?
    [ "$rc" -eq "$want" ] || fail "$name: exit $rc, expected $want"
    grep -q -- "$msg" "$err" || fail "$name: stderr does not say '$msg'"
    echo "ok: $name (exit $rc)"
}
# parsed in both spellings, faults included: then the no-GPU exit
expect "both spellings" 80 "no usable GPU" --steps=moe --interval-ms 5 --seconds=3 --tokens 32 \
    --fault "stall phase=dispatch ms=5 step=3" --fault=corrupt-id --fault "exit-combine" \
    --arm-file=/tmp/nothing --agent-faults -v
expect "barrier faults" 80 "no usable GPU" --fault "hang ms=100" --fault "delay ms=3 steps=2"
expect "unknown option" 2 "bad argument '--frobnicate': unknown option" --frobnicate
expect "missing value" 2 "bad argument '--seconds': it needs a value" --seconds
expect "bad number" 2 "bad argument '--tokens': 'x' is not a whole number" --tokens=x
expect "operand" 2 "bad argument 'moe': eep-rank takes options only" moe
expect "bad fault" 2 "unknown action 'explode'" --fault explode
expect "bad fault key" 2 "kill does not take 'ms'" --fault "kill ms=3"
expect "phase of another mode" 2 "no dispatch kernel to act on with --steps barrier" \
    --fault "stall phase=dispatch ms=5"
expect "moe-barrier needs moe" 2 "bad argument '--moe-barrier': it needs --steps=moe" --moe-barrier
expect "barrier fault, MoE steps" 2 "no barrier kernel to act on with --steps moe" \
    --steps moe --fault "stall phase=barrier ms=5"
expect "barrier fault, MoE steps with a barrier" 80 "no usable GPU" --steps moe --moe-barrier \
    --fault "stall phase=barrier ms=5"
expect "corrupt-id in range" 2 "corrupt-id expert=3 is a valid id" --steps moe \
    --fault "corrupt-id expert=3"
expect "layout and mode" 80 "no usable GPU" --steps moe --layout rank --mode=cached
expect "layout and mode, the defaults" 80 "no usable GPU" --steps=moe --layout=expert \
    --mode no-cpu-sync
expect "layout needs moe" 2 "bad argument '--layout': it needs --steps=moe" --layout rank
expect "mode needs moe" 2 "bad argument '--mode': it needs --steps=moe" --mode cpu-sync
expect "bad layout" 2 "bad argument 'diagonal' for --layout: expert or rank" --steps moe \
    --layout diagonal
expect "bad mode" 2 "bad argument 'eager' for --mode: no-cpu-sync, cpu-sync or cached" \
    --steps moe --mode eager
expect "corrupt-id out of range" 80 "no usable GPU" --steps moe --experts 12 \
    --fault "corrupt-id expert=12"
echo "ok"
