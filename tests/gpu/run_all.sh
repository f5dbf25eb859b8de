#!/usr/bin/env bash
# tests/gpu/run_all.sh PROGRAM... - make gpu-check: each GPU test through launch.sh, one process
# per GPU; a log per test under $BUILD/gpu-logs and one closing line "N passed, N failed, N skipped".
set -u
build=${BUILD:-build}
logs=$build/gpu-logs
mkdir -p "$logs"
passed=0 failed=0 skipped=0
for prog in "$@"; do
    name=$(basename "$prog")
    start=$(date +%s.%N)
    "$(dirname "$0")/launch.sh" "$prog" >"$logs/$name.log" 2>&1
    rc=$?
    secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
    case $rc in
        0)  passed=$((passed + 1)); echo "ok    $name (${secs}s)"; grep -v 'NCCL' "$logs/$name.log" | sed 's/^/      /' ;;
        77) skipped=$((skipped + 1)); echo "SKIP  $name: $(grep -m1 -i skip "$logs/$name.log")" ;;
        *)  failed=$((failed + 1)); echo "FAIL  $name (${secs}s, exit $rc) -- log follows"; sed 's/^/    /' "$logs/$name.log" ;;
    esac
done
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
