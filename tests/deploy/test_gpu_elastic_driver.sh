#!/usr/bin/env bash
# tests/deploy/test_gpu_elastic_driver.sh - scripts/gpu_elastic.py (make gpu-elastic's driver) on
# the CPU, with a FAKE eep-rank (tests/deploy/fake_eep_rank.py) and the real etcd and eepd: 3
# ranks, 2 rounds of barrier/KILL and barrier/STOP must PASS with all four rounds measured
# (detection, interruption, grow), the STOP victims fenced and the survivors' fds sampled after
# --settle-s; the fd verdict on made-up samples (a leak by kind, a count that settles back);
# --gpus 3 gives each rank a GPU of its own (EEP_DEVICE, no NCCL_HOSTID), a newcomer its victim's; a rank that prints one wrong step
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
        --start-s 30 --deadline-s 10 --settle-round-s 0.3 --budget-s 120 --settle-s 0.5 \
        >"$tmp/$name.log" 2>&1
}

# the fd verdict on made-up samples: a leak fails naming the kind that grew; a count that comes
# back within --settle-s passes (the last round's drift still shown); no settle judges the last
python3 - "$root/scripts" <<'PY' || fail "the fd verdict"
import sys
sys.path.insert(0, sys.argv[1])
from gpu_elastic import fd_verdict
leak = {"fds_by_pid": {"7": [90, 100, 106, 112], "8": [90, 100, 101, 100], "9": [95, 99]},
        "fd_kinds_by_pid": {"7": {"first": {"pipe": 4, "socket:tcp": 10},
                                  "last": {"pipe": 4, "socket:tcp": 22}}}}
lines, failure = fd_verdict(leak, 8)
assert failure == "open fds drifted by 12", (failure, lines)
assert "worst drift 12 at the last round -> GROWING" in lines[0], lines
assert lines[1] == "fds of rank pid 7 by kind, second sample -> last: socket:tcp 10 -> 22", lines
assert leak["fd_drift_max"] == 12
linger = dict(leak, fds_settled_by_pid={"7": 101, "8": 100})
linger["fd_kinds_by_pid"]["7"]["settled"] = {"pipe": 4, "socket:tcp": 11}
lines, failure = fd_verdict(linger, 8)
assert failure is None, (failure, lines)
assert "GROWING" in lines[0] and "after --settle-s: worst drift 1 -> flat (ranks sampled: 2)" in lines[2], lines
assert lines[3] == "fds of rank pid 7 by kind, second sample -> settled: socket:tcp 10 -> 11", lines
stuck = dict(leak, fds_settled_by_pid={"7": 112, "8": 100})
lines, failure = fd_verdict(stuck, 8)
assert failure == "open fds drifted by 12 after the settle", (failure, lines)
assert fd_verdict({"fds_by_pid": {"9": [1, 2]}}, 8) == ([], None)  # too few rounds: no verdict
PY
echo "ok: the fd verdict fails a leak by kind, passes a count that settles back"

# the fd kinds of a real process: a TCP socket whose connect was refused is in no /proc/net table
# (it was 'socket:other'); it is named from a duplicate (pidfd_getfd) as tcp-CLOSE, beside a
# netlink socket and a listening one
python3 - "$root/scripts" <<'PY' || fail "the fd kinds of a process holding refused sockets"
import os, subprocess, sys, time
sys.path.insert(0, sys.argv[1])
import eep_procs
holder = subprocess.Popen([sys.executable, "-c", """
import socket, sys, time
sys.path.insert(0, sys.argv[1])
from eep_procs import free_port
held = []
for _ in range(3):
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", free_port()))
    except OSError:
        pass
    held.append(s)
held.append(socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0))
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(); held.append(l)
print("ready", flush=True)
time.sleep(30)
""", sys.argv[1]], stdout=subprocess.PIPE, text=True)
try:
    assert holder.stdout.readline().strip() == "ready"
    p = object.__new__(eep_procs.JsonProc)
    p.pid = holder.pid
    kinds = {k: v for k, v in p.fd_kinds().items() if k.startswith("socket:")}
    want = {"socket:tcp-CLOSE": 3, "socket:netlink": 1, "socket:tcp-listen": 1}
    if os.geteuid() != 0 and "socket:other" in kinds:
        print("note: pidfd_getfd refused (not root): the kinds stay 'other'")
        want = {"socket:other": 4, "socket:tcp-listen": 1}
    assert kinds == want, kinds
finally:
    holder.kill()
    holder.wait()
PY
echo "ok: a refused TCP socket is counted as socket:tcp-CLOSE, not socket:other"

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
# --settle-s 0.5: the survivors sampled once more, the verdict on that sample
assert s["fds_settled_by_pid"] and set(s["fds_settled_by_pid"]) <= set(s["fds_by_pid"]), s
assert abs(s["fd_drift_settled_max"]) <= 8, s["fd_drift_settled_max"]
PY
grep -q "after --settle-s: worst drift" "$s" || fail "no settle line in summary.txt"

# --merge: a second call with --rounds 3 runs only the missing round of each kind, and its
# figures and result cover both calls' rounds
mkdir -p "$tmp/more.ranks"
FAKE_RANK_DIR="$tmp/more.ranks" timeout 240 python3 "$root/scripts/gpu_elastic.py" \
    --rank-bin "$root/tests/deploy/fake_eep_rank.py" --eepd-bin "$build/bin/eepd" \
    --etcd-bin "$etcd" --work "$tmp/more.work" --out "$tmp/out-more" --ranks 3 --rounds 3 \
    --start-s 30 --deadline-s 10 --settle-round-s 0.3 --budget-s 120 \
    --merge "$tmp/out-good/summary.json" >"$tmp/more.log" 2>&1 ||
    { tail -20 "$tmp/more.log"; fail "driver exit $? on the merged call"; }
grep -q "RESULT: PASS (6/6 rounds ok, over 2 calls)" "$tmp/out-more/summary.txt" ||
    fail "no 'RESULT: PASS (6/6 rounds ok, over 2 calls)'"
grep -q "^barrier/KILL .* 3/3" "$tmp/out-more/summary.txt" || fail "merged barrier/KILL not 3/3"
python3 - "$tmp/out-more/summary.json" <<'PY' || fail "merged summary.json"
import json, sys
s = json.load(open(sys.argv[1]))
calls = [rd["call"] for rd in s["rounds"]]
assert calls == [1, 1, 1, 1, 2, 2], calls  # this call ran one round of each kind
assert s["calls"] == 2 and s["all"]["detect_ms"]["n"] == 6, s["all"]
PY
# a summary of another configuration is refused (usage error)
python3 "$root/scripts/gpu_elastic.py" --rank-bin x --eepd-bin x --work "$tmp/w" --out "$tmp/o" \
    --ranks 4 --merge "$tmp/out-good/summary.json" >/dev/null 2>"$tmp/merge-bad.err"
[ $? -eq 2 ] && grep -q "ranks 3 there" "$tmp/merge-bad.err" || fail "a mismatched --merge was not refused"
python3 "$root/scripts/gpu_elastic.py" --rank-bin x --eepd-bin x --work "$tmp/w" --out "$tmp/o" \
    --ranks 3 --layout rank --merge "$tmp/out-good/summary.json" >/dev/null 2>"$tmp/merge-bad.err"
[ $? -eq 2 ] && grep -q "layout expert --mode no-cpu-sync --ranks 3 there" "$tmp/merge-bad.err" ||
    fail "a --merge of another layout was not refused"
echo "ok: --merge adds a call's missing rounds to an earlier call's"

# --gpus 3: one rank per GPU (EEP_DEVICE, no NCCL_HOSTID), the newcomer on its victim's GPU
mkdir -p "$tmp/gpus.ranks"
FAKE_RANK_DIR="$tmp/gpus.ranks" timeout 240 python3 "$root/scripts/gpu_elastic.py" \
    --rank-bin "$root/tests/deploy/fake_eep_rank.py" --eepd-bin "$build/bin/eepd" \
    --etcd-bin "$etcd" --work "$tmp/gpus.work" --out "$tmp/out-gpus" --ranks 3 --gpus 3 \
    --rounds 1 --start-s 30 --deadline-s 10 --settle-round-s 0.3 --budget-s 120 \
    >"$tmp/gpus.log" 2>&1 || { tail -20 "$tmp/gpus.log"; fail "driver exit $? with --gpus 3"; }
grep -q "RESULT: PASS (2/2 rounds ok)" "$tmp/out-gpus/summary.txt" || fail "--gpus 3: not 2/2 ok"
python3 - "$tmp/gpus.work" "$tmp/out-gpus/summary.json" <<'PY' || fail "--gpus 3: the devices"
import glob, json, os, sys
dev = {}
for f in glob.glob(os.path.join(sys.argv[1], "rank-*.jsonl")):
    slot = int(os.path.basename(f)[5:-6])
    views = [e for e in map(json.loads, open(f)) if e.get("event") == "view"]
    assert views and all(v["fake_hostid"] is None for v in views), (f, views[:1])
    assert len({v["fake_device"] for v in views}) == 1, f
    dev[slot] = int(views[0]["fake_device"])
assert sorted(dev[s] for s in (0, 1, 2)) == [0, 1, 2], dev  # the first three: a GPU each
kill = [rd for rd in json.load(open(sys.argv[2]))["rounds"] if rd["signal"] == "KILL"]
assert len(kill) == 1 and dev[3] == dev[kill[0]["victim"]], (dev, kill)  # the newcomer: slot 3
PY
python3 "$root/scripts/gpu_elastic.py" --rank-bin x --eepd-bin x --work "$tmp/w" --out "$tmp/o" \
    --ranks 4 --gpus 3 >/dev/null 2>"$tmp/gpus-bad.err"
[ $? -eq 2 ] && grep -q "too many" "$tmp/gpus-bad.err" || fail "--gpus 3 --ranks 4 was not refused"
echo "ok: --gpus puts one rank on each GPU and a newcomer on its victim's"

run wrong FAKE_WRONG=1
rc=$?
[ "$rc" -ne 0 ] || fail "a wrong step did not fail the run"
grep -q "RESULT: FAIL" "$tmp/out-wrong/summary.txt" || fail "no RESULT: FAIL for the wrong step"
grep -q "wrong step results on rank slots \[0\]\|rank slot 0" "$tmp/out-wrong/summary.txt" ||
    fail "the wrong step's rank is not named"
echo "ok: the driver passes a healthy fake job (4 rounds measured) and fails a wrong step"
