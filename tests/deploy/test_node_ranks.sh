#!/usr/bin/env bash
# test_node_ranks.sh - deploy/node-ranks.sh, the worker pod's entry point, with a stand-in rank:
# one rank per GPU (EEP_DEVICE 0..N-1, each its GPU's uuid, the rank flags after --), a rank that
# fails is restarted (and only it), SIGTERM reaches every rank and the launcher waits for them to
# leave, then exits 0; a rank failing past --max-restarts makes the pod exit with its code; a bad
# flag exits 2.  Exit 0 pass, 1 fail.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
fail() { echo "FAIL: $*"; failed=1; }
cat >"$tmp/rank" <<'RANK'
#!/usr/bin/env bash
echo "start dev=$EEP_DEVICE uuid=$EEP_AGENT_GPU_UUID args=$*" >>"$LOG"
if [ "$EEP_DEVICE" = "$FAIL_DEV" ] && [ "$(grep -c "start dev=$FAIL_DEV " "$LOG")" -le "$FAIL_TIMES" ]; then
    exit 3
fi
trap 'echo "left dev=$EEP_DEVICE" >>"$LOG"; exit 0' TERM
while :; do sleep 0.05; done
RANK
chmod +x "$tmp/rank"
wait_for() { # COND-COMMAND SECONDS
    local i
    for ((i = 0; i < $2 * 20; i++)); do eval "$1" && return 0; sleep 0.05; done
    return 1
}

# 3 GPUs, GPU 1's rank fails once: restarted; then SIGTERM
export LOG=$tmp/log1 FAIL_DEV=1 FAIL_TIMES=1
EEP_RANK_BIN=$tmp/rank EEP_NODE_GPUS=3 "$root/deploy/node-ranks.sh" --max-restarts=2 -- \
    --interval-ms 50 >"$tmp/out1" 2>&1 &
pid=$!
wait_for '[ "$(cat "$LOG" 2>/dev/null | grep -c "^start")" -ge 4 ]' 10 || fail "4 starts expected: $(cat "$LOG")"
for d in 0 1 2; do
    grep -q "^start dev=$d uuid=GPU-$d args=--interval-ms 50$" "$LOG" || fail "no rank on GPU $d"
done
[ "$(grep -c '^start dev=1 ' "$LOG")" -eq 2 ] || fail "GPU 1's rank not restarted exactly once"
[ "$(grep -c '^start dev=0 ' "$LOG")" -eq 1 ] || fail "GPU 0's rank was restarted"
kill -TERM $pid
wait $pid
rc=$?
[ $rc -eq 0 ] || fail "SIGTERM: exit $rc, expected 0: $(cat "$tmp/out1")"
[ "$(grep -c '^left' "$LOG")" -eq 3 ] || fail "not every rank left before the launcher exited: $(cat "$LOG")"

# a rank that keeps failing: the pod gives up with its code after --max-restarts
export LOG=$tmp/log2 FAIL_DEV=0 FAIL_TIMES=99
EEP_RANK_BIN=$tmp/rank EEP_NODE_GPUS=2 timeout 30 "$root/deploy/node-ranks.sh" --max-restarts 1 \
    >"$tmp/out2" 2>&1
rc=$?
[ $rc -eq 3 ] || fail "a rank failing for good: exit $rc, expected its 3: $(cat "$tmp/out2")"
[ "$(grep -c '^start dev=0 ' "$LOG")" -eq 2 ] || fail "GPU 0's rank: not 1 start + 1 restart"
grep -q '^left dev=1' "$LOG" || fail "the healthy rank was not stopped when the pod gave up"

"$root/deploy/node-ranks.sh" --max-restarts=x >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q -- "--max-restarts" "$tmp/err" || fail "a bad --max-restarts: not exit 2 naming it"
"$root/deploy/node-ranks.sh" --bogus >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] || fail "an unknown flag: not exit 2"
[ $failed -eq 0 ] && echo "ok: one rank per GPU, restart of the failed one, graceful stop, give-up"
exit $failed
