#!/usr/bin/env bash
# tests/deploy/test_gpu_elastic_driver.sh - scripts/gpu_elastic.py (make gpu-elastic's driver) on
# the CPU, with a FAKE eep-rank (tests/deploy/fake_eep_rank.py) and the real etcd and eepd: 3
# ranks, 2 rounds of barrier/KILL and barrier/STOP must PASS with all four rounds measured
# (detection, interruption, grow) and the STOP victims fenced; a rank that prints one wrong step
# must make it FAIL naming the rank.  Skips (77) without etcd or eepd.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
etcd=$(command -v etcd) || { echo "SKIP: no etcd"; exit 77; }
[ -x "$build/bin/eepd" ] || { echo "SKIP: no $build/bin/eepd (make first)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; cat "$tmp"/out*/summary.txt 2>/dev/null; exit 1; }

run() { # NAME [ENV...]
    local name=$1; shift
    mkdir -p "$tmp/$name.ranks"
    env FAKE_RANK_DIR="$tmp/$name.ranks" "$@" timeout 240 python3 "$root/scripts/gpu_elastic.py" \
        --rank-bin "$root/tests/deploy/fake_eep_rank.py" --eepd-bin "$build/bin/eepd" \
        --etcd-bin "$etcd" --work "$tmp/$name.work" --out "$tmp/out-$name" --ranks 3 --rounds 2 \
        --start-s 30 --deadline-s 10 --settle-round-s 0.3 --budget-s 120 >"$tmp/$name.log" 2>&1
}

run good
rc=$?
[ "$rc" -eq 0 ] || { tail -20 "$tmp/good.log"; fail "driver exit $rc on a healthy fake job"; }
s=$tmp/out-good/summary.txt
grep -q "RESULT: PASS (4/4 rounds ok)" "$s" || fail "no 'RESULT: PASS (4/4 rounds ok)'"
grep -q "^barrier/KILL .* 2/2" "$s" || fail "barrier/KILL not 2/2"
grep -q "^barrier/STOP .* 2/2" "$s" || fail "barrier/STOP not 2/2"
python3 - "$tmp/out-good/summary.json" <<'PY' || fail "summary.json incomplete"
import json, sys
s = json.load(open(sys.argv[1]))
assert len(s["rounds"]) == 4, s["rounds"]
for rd in s["rounds"]:
    assert rd["ok"] and rd["detect_ms"] >= 0 and rd["interrupt_ms"] >= rd["detect_ms"], rd
    assert rd["grow_ms"] > 0, rd
    assert rd["signal"] == "KILL" or rd["zombie_fenced"], rd
assert s["all"]["detect_ms"]["n"] == 4
PY

run wrong FAKE_WRONG=1
rc=$?
[ "$rc" -ne 0 ] || fail "a wrong step did not fail the run"
grep -q "RESULT: FAIL" "$tmp/out-wrong/summary.txt" || fail "no RESULT: FAIL for the wrong step"
grep -q "wrong step results on rank slots \[0\]\|rank slot 0" "$tmp/out-wrong/summary.txt" ||
    fail "the wrong step's rank is not named"
echo "ok: the driver passes a healthy fake job (4 rounds measured) and fails a wrong step"
