#!/usr/bin/env bash
# tests/deploy/test_thread_dump.sh - scripts/thread-dump.sh on a live process: one line for each
# of its threads with the system call it waits in, and a clear message for a pid that is gone.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
fail() { echo "FAIL: $*"; exit 1; }
python3 -c 'import threading, time
threading.Thread(target=time.sleep, args=(30,), daemon=True).start(); time.sleep(30)' &
pid=$!
trap 'kill $pid 2>/dev/null' EXIT
sleep 1
out=$(bash "$root/scripts/thread-dump.sh" "$pid")
[ "$(printf '%s\n' "$out" | grep -c "^== pid $pid")" -eq 1 ] || fail "no header for $pid: $out"
n=$(printf '%s\n' "$out" | grep -cE '^  [0-9]+ +python3? .* syscall [0-9]+ \(')
[ "$n" -ge 2 ] || fail "expected a line with its syscall for each of >= 2 threads, got $n: $out"
kill $pid; wait $pid 2>/dev/null
err=$(bash "$root/scripts/thread-dump.sh" "$pid" 2>&1 >/dev/null)
[ "$err" = "thread-dump: no process $pid" ] || fail "a gone pid: '$err'"
echo "ok: thread-dump.sh lists every thread with its syscall and names a gone pid"
echo "1 passed, 0 failed"
