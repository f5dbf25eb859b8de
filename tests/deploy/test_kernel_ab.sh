#!/usr/bin/env bash
# tests/deploy/test_kernel_ab.sh - scripts/kernel-ab.sh: prepare extracts a revision's kernels/ and
# include/; run calls the bench twice, the second time with EEP_JIT_SOURCE_ROOT on that tree, and
# prints both tables and the new/old ratio of each "ours" row.  The bench here is a FAKE (a shell
# script printing eep-bench's table; the GPU and the real bench are not under test), whose combine
# time depends on which source root it was given.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$root/build/kernel-ab/HEAD"' EXIT
cd "$root" || exit 1
git rev-parse -q --verify HEAD >/dev/null || { echo "SKIP: not a git checkout (prepare needs git)"; exit 77; }

out=$(bash scripts/kernel-ab.sh prepare HEAD) || fail "prepare HEAD: $out"
[ -f build/kernel-ab/HEAD/kernels/ep/combine.cuh ] || fail "prepare: no kernels/ep/combine.cuh"
[ -d build/kernel-ab/HEAD/include/eep ] || fail "prepare: no include/eep"
err=$(bash scripts/kernel-ab.sh prepare no-such-rev-x 2>&1)
[ $? -eq 2 ] && [ "$err" = "kernel-ab: no revision no-such-rev-x" ] || fail "a bad revision: '$err'"
err=$(bash scripts/kernel-ab.sh run no-such-rev-x -- ep 2>&1)
case $err in *"run 'prepare no-such-rev-x' first"*) ;; *) fail "run before prepare: '$err'" ;; esac

cat >"$tmp/fake-bench" <<'FAKE'
#!/bin/sh
# FAKE eep-bench: the old kernels' combine takes twice as long
c=50.0; [ -n "${EEP_JIT_SOURCE_ROOT:-}" ] && c=100.0
echo "| impl     | n | T | H | K | E | type | gating | dispatch us | GB/s | combine us | GB/s | check | recv GB/s | SMs budget: send+copy | floor |"
echo "| ours     | 1 | 4096 | 7168 | 8 | 256 | bf16 | random | 80.0 | 0.0 | $c | 0.0 | skip | 1.0 | 24: 6+18 | x |"
echo "| ours     | 1 | 4096 | 7168 | 8 | 256 | bf16 | random | 40.0 | 0.0 | $c | 0.0 | skip | 1.0 | all: 16+116 | x |"
echo "args: $*" >&2
FAKE
chmod +x "$tmp/fake-bench"
out=$(EEP_BENCH="$tmp/fake-bench" EEP_JIT_CACHE_DIR="$tmp/jit" bash scripts/kernel-ab.sh run HEAD -- ep --tokens 4096) ||
    fail "run: $out"
[ "$(printf '%s\n' "$out" | grep -c '^new | ours ')" -eq 2 ] || fail "two new rows expected: $out"
[ "$(printf '%s\n' "$out" | grep -c '^old | ours ')" -eq 2 ] || fail "two old rows expected: $out"
printf '%s\n' "$out" | grep -q '^new/old  24: 6+18  *dispatch 1.00  combine 0.50$' || fail "ratio row 24: $out"
printf '%s\n' "$out" | grep -q '^new/old  all: 16+116 *dispatch 1.00  combine 0.50$' || fail "ratio row all: $out"
echo "ok: kernel-ab prepares a revision's kernels, runs both halves and prints new/old per row"
echo "1 passed, 0 failed"
