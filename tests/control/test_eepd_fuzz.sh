#!/usr/bin/env bash
# test_eepd_fuzz.sh - run the libFuzzer target on eepd's request handlers for a bounded time.
# EEP_FUZZ_SECONDS (default 30).  No clang fuzzer runtime: skip with the reason.
set -u
build=${BUILD:-build}
bin=$build/tests/control/fuzz_eepd_api
secs=${EEP_FUZZ_SECONDS:-30}
if [ ! -x "$bin" ]; then
    echo "skip: $bin was not built (needs clang-14 with libclang-rt-14-dev for -fsanitize=fuzzer)"
    exit 77
fi
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
# Seeds: one valid request per method (method byte, auth byte, message).
printf '\x00\x00' >"$corpus/status"
printf '\x01\x00\x08\x01' >"$corpus/watch"
printf '\x02\x01\x0a\x03a-b' >"$corpus/drain"
printf '\x05\x01\x12\x03a-b\x2a\x08dispatch' >"$corpus/fault"
printf '\x06\x01\x08\x01\x12\x03a-b' >"$corpus/inject"
"$bin" -max_total_time="$secs" -max_len=4096 -rss_limit_mb=2048 -print_final_stats=1 \
    "$corpus" 2>&1 | tail -25
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then
    echo "FAIL: the fuzzer found a crash (exit $rc)"
    exit 1
fi
echo "fuzzed eepd handlers for ${secs}s: no crash"
