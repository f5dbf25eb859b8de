#!/usr/bin/env bash
# tests/run.sh - run test programs and print one closing line "N passed, N failed, N skipped".
#
# Each argument is an executable.  A cmocka program's own counts are used ("[  PASSED  ] 3
# test(s)."); any other program counts as one test: exit 0 passes, 77 is skipped (it must print
# why), anything else fails.  Every program runs under a time limit (EEP_TEST_TIMEOUT, default
# 600 s) so a hang is a failure, not a stuck CI.  Output of each program goes to
# $BUILD/test-logs/<name>.log and is shown in full when it fails.
set -u
build=${BUILD:-build}
limit=${EEP_TEST_TIMEOUT:-600}
logs=$build/test-logs
mkdir -p "$logs"
passed=0 failed=0 skipped=0
failed_names=()

for prog in "$@"; do
    name=$(basename "$prog")
    log=$logs/$name.log
    start=$(date +%s.%N)
    CMOCKA_MESSAGE_OUTPUT=stdout timeout --kill-after=10 "$limit" "$prog" >"$log" 2>&1
    rc=$?
    secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test(s).*/\1/p' "$log" | tail -1)
    f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test(s).*/\1/p' "$log" | tail -1)
    s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test(s).*/\1/p' "$log" | tail -1)
    if [ -n "$p$f" ]; then
        p=${p:-0} f=${f:-0} s=${s:-0}
        # cmocka's PASSED count excludes the skipped tests ([==] N run = passed + failed + skipped).
        if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi   # crashed after its summary
    elif [ "$rc" -eq 0 ]; then p=1 f=0 s=0
    elif [ "$rc" -eq 77 ]; then p=0 f=0 s=1
    else p=0 f=1 s=0
    fi
    passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
    if [ "$f" -gt 0 ]; then
        failed_names+=("$name")
        echo "FAIL  $name (${secs}s, exit $rc) -- log follows"
        sed 's/^/    /' "$log"
    elif [ "$s" -gt 0 ] && [ "$p" -eq 0 ]; then
        echo "SKIP  $name (${secs}s): $(grep -m1 -i 'skip' "$log")"
    else
        echo "ok    $name ($p passed${s:+, $s skipped}, ${secs}s)"
    fi
done

[ ${#failed_names[@]} -gt 0 ] && echo "failed: ${failed_names[*]}"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
