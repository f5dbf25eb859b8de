#!/usr/bin/env bash
# test_launch.sh - `make run`'s launcher on a machine without a GPU: it must say so, run the control
# plane alone, publish a view holding the stand-in agents, and stop everything it started.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-$here/build}
# absolute: the process count below matches "$build/bin/eepd"; a relative "build/bin/eepd" also
# matched other checkouts' eepd and agents on a shared machine (a failure seen in a full run)
case $build in /*) ;; *) build=$here/$build ;; esac
command -v etcd >/dev/null || { echo "skip: etcd is not installed"; exit 77; }
if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    echo "skip: this machine has a GPU; the test covers the no-GPU path"; exit 77
fi
out=$(mktemp)
before=$(pgrep -c -f "$build/bin/(eepd|eep-agent)")
BUILD=$(cd "$build" && pwd) timeout 90 "$here/deploy/launch.sh" --seconds 6 --agents 2 >"$out" 2>&1
rc=$?
cat "$out"
fail() { echo "FAIL: $*"; rm -f "$out"; exit 1; }
[ $rc -eq 0 ] || fail "launcher exited $rc"
grep -q "no GPU visible" "$out" || fail "no clear no-GPU message"
grep -q "epoch [0-9]*, 2 ranks" "$out" || fail "no view with the 2 stand-in agents"
run_dir=$(sed -n 's/^logs in \([^;]*\);.*/\1/p' "$out")
[ -n "$run_dir" ] || fail "no log dir printed"
# Everything it started is gone.
after=$(pgrep -c -f "$build/bin/(eepd|eep-agent)")
[ "$after" -le "$before" ] || fail "$((after - before)) eepd/agent processes left running"
rm -f "$out"
echo "ok"
