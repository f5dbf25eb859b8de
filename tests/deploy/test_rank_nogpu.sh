#!/usr/bin/env bash
# test_rank_nogpu.sh - eep-rank on a machine without a GPU: one clear line on stderr, nothing on
# stdout, EEP_ERR_NO_DEVICE's exit code (80), at once and before it touches the control plane
# (EEP_ETCD_ENDPOINTS points at a port nobody listens on).  Also: a bad flag exits 2.
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
timeout 20 "$bin" --help >"$out" 2>"$err"
[ $? -eq 0 ] || fail "--help did not exit 0"
echo "ok"
