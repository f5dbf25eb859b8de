#!/usr/bin/env bash
# tests/deploy/test_run_driver.sh - make run's rank side on the CPU: scripts/eep_run.py (the
# driver: status line, fault schedule, summary, timeline PNG) and deploy/launch.sh's GPU path,
# with FAKE eep-ranks (tests/deploy/fake_eep_rank.py: they find each other through pid files).
#   1. the schedule parser refuses bad files with a message naming the entry and the problem;
#   2. a schedule of every action applied to 3 fake ranks: killed / exited ranks are restarted,
#      a stopped one continued, the rank-side faults reach the rank (inject lines); the summary
#      counts 7 faults, 7 recovered, 2 restarts, 0 wrong steps; status lines; a timeline (PNG when
#      matplotlib can be had, in the build's venv);
#   3. a wrong step fails the run and is counted;
#   4. SIGTERM mid-run stops every rank (none left) and still writes the summary;
#   5. seeded schedules: the same seed gives the same schedule, and it validates;
#   6. deploy/launch.sh --gpus 3 --rank-bin FAKE: 3 eepd replicas, the driver, a schedule file,
#      nothing left afterwards; a bad schedule exits 2 before anything starts;
#   7. Ctrl-C (SIGINT to launch.sh's process group): exit 130, the driver stops the ranks, eepd
#      stops before etcd (its lease revoked), no rank, eepd or etcd data dir left.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
drv=$root/scripts/eep_run.py
fake=$root/tests/deploy/fake_eep_rank.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; for f in "$tmp"/*/summary.txt; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done; exit 1; }

# ---- 0. the status line's rates: GB/s, MB/s below 0.1 GB/s (a decode step showed "0.00 GB/s")
rates=$(cd "$root/scripts" && python3 -c 'import eep_run as e; print(e.fmt_rate(65536, 80), e.fmt_rate(32768, 17000), e.fmt_rate(1, 0))')
[ "$rates" = "0.82 GB/s 1.93 MB/s - GB/s" ] || fail "rates: '$rates'"

# ---- 1. the schedule parser
bad() { # WANT_MESSAGE JSON
    printf '%s\n' "$2" >"$tmp/bad.json"
    python3 "$drv" check-schedule "$tmp/bad.json" --ranks 3 >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ "$rc" -eq 2 ] || fail "schedule $2: exit $rc, expected 2"
    grep -q -- "$1" "$tmp/err" || fail "schedule $2: message '$(cat "$tmp/err")' lacks '$1'"
}
bad "not JSON" '[{"t_s": 1,'
bad "want a JSON list" '{"t_s": 1}'
bad "entry 0: want an object" '[3]'
bad "entry 1: 'action' is missing" '[{"t_s":1,"rank":0,"action":"kill"},{"t_s":2,"rank":0}]'
bad "entry 0: unknown action \"explode\"" '[{"t_s":1,"rank":0,"action":"explode"}]'
bad "rank must be a slot 0..2, got 3" '[{"t_s":1,"rank":3,"action":"kill"}]'
bad "rank must be a slot 0..2, got true" '[{"t_s":1,"rank":true,"action":"kill"}]'
bad "t_s must be a number of seconds" '[{"t_s":-1,"rank":0,"action":"kill"}]'
bad "t_s must be a number of seconds" '[{"t_s":"soon","rank":0,"action":"kill"}]'
bad "unknown field(s) \['when'\]" '[{"t_s":1,"rank":0,"action":"kill","when":2}]'
bad "kill takes no arg \"ms\" (it takes: restart_after_s)" '[{"t_s":1,"rank":0,"action":"kill","args":{"ms":3}}]'
bad "stall needs args.ms" '[{"t_s":1,"rank":0,"action":"stall","args":{"phase":"combine"}}]'
bad "ms must be a whole number 1..3600000, got 2.5" '[{"t_s":1,"rank":0,"action":"stall","args":{"ms":2.5}}]'
bad "phase must be one of barrier, dispatch, combine" '[{"t_s":1,"rank":0,"action":"delay","args":{"ms":5,"phase":"gemm"}}]'
bad "args must be an object" '[{"t_s":1,"rank":0,"action":"stop","args":[1]}]'
bad "corrupt-id expert=5 is not out of range (-1 is 'no expert', 0..11 are valid ids)" '[{"t_s":1,"rank":0,"action":"corrupt-id","args":{"expert":5}}]'
bad "corrupt-id expert=-1 is not out of range" '[{"t_s":1,"rank":0,"action":"corrupt-id","args":{"expert":-1}}]'
python3 "$drv" check-schedule "$tmp/none.json" --ranks 3 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "cannot read it" "$tmp/err" || fail "a missing schedule file is not refused clearly"
printf '[{"t_s":1,"rank":0,"action":"stall","args":{"ms":5,"phase":"dispatch"}}]\n' >"$tmp/moe.json"
python3 "$drv" check-schedule "$tmp/moe.json" --ranks 3 --steps barrier 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "phase dispatch needs MoE steps" "$tmp/err" ||
    fail "a dispatch fault on barrier steps is not refused"
python3 "$drv" check-schedule "$tmp/moe.json" --ranks 3 >/dev/null || fail "the same on MoE steps is refused"
echo "ok: 19 bad schedules refused, each naming its problem"

# ---- 2. every action on 3 fake ranks
cat >"$tmp/sched.json" <<'EOF'
[{"t_s": 1.0, "rank": 1, "action": "kill", "args": {"restart_after_s": 1}},
 {"t_s": 3.5, "rank": 2, "action": "stop", "args": {"cont_after_s": 1}},
 {"t_s": 6.0, "rank": 0, "action": "stall", "args": {"phase": "dispatch", "ms": 100}},
 {"t_s": 7.5, "rank": 0, "action": "exit-combine"},
 {"t_s": 8.5, "rank": 0, "action": "restart"},
 {"t_s": 10.5, "rank": 1, "action": "corrupt-id"},
 {"t_s": 12.0, "rank": 2, "action": "hang", "args": {"ms": 500}},
 {"t_s": 14.0, "rank": 1, "action": "delay", "args": {"ms": 20, "steps": 3}}]
EOF
python3 "$drv" check-schedule "$tmp/sched.json" --ranks 3 >/dev/null || fail "the good schedule was refused"
mkdir -p "$tmp/r2"
FAKE_RANK_DIR=$tmp/r2 timeout 240 python3 "$drv" run --rank-bin "$fake" --ranks 3 --work "$tmp/run2" \
    --build "$build" --seconds 16 --faults "$tmp/sched.json" --status-every-s 1 >"$tmp/run2.log" 2>&1
rc=$?
s=$tmp/run2/summary.txt
[ "$rc" -eq 0 ] || { tail -30 "$tmp/run2.log"; fail "driver exit $rc on a schedule the fake job recovers from"; }
grep -q "faults injected: 7, recovered: 7; restarts: 2, conts: 1" "$s" || fail "fault counts wrong"
grep -q "wrong steps: 0 (must be 0)" "$s" || fail "no 'wrong steps: 0'"
grep -q "RESULT: PASS" "$s" || fail "no RESULT: PASS"
[ "$(grep -c '^\[ *[0-9.]* s\] step [0-9]* epoch [0-9]* world [0-9] ranks [0-9]/3 | dispatch 80 us 0.82 GB/s | combine 95 us 0.69 GB/s | faults [0-9] | wrong 0' "$tmp/run2.log")" -ge 10 ] ||
    fail "fewer than 10 status lines of the expected shape"
for a in stall exit corrupt-id hang delay; do
    cat "$tmp"/run2/rank-*.jsonl | grep -q "\"event\": \"inject\", \"action\": \"$a" ||
        fail "no inject line for $a: the arm file + SIGUSR1 did not reach the rank"
done
python3 - "$tmp/run2" <<'PY' || fail "summary.json / timeline.json incomplete"
import json, sys
d = sys.argv[1]
s = json.load(open(d + "/summary.json"))
acts = [f["action"] for f in s["faults"]]
assert acts == ["kill", "stop", "stall", "exit-combine", "corrupt-id", "hang", "delay"], acts
for f in s["faults"]:
    assert f["recovered"] and f["back_ms"] >= 0, f
    if f["action"] in ("kill", "stop", "exit-combine", "corrupt-id", "hang"):
        assert f["detect_ms"] >= 0 and f["interrupt_ms"] >= f["detect_ms"], f
kill = s["faults"][0]
assert kill["grow_ms"] > 0 and kill["back_ms"] >= 1000, kill  # restarted after 1 s
assert s["restarts"] == 2 and s["wrong_steps"] == 0 and s["steps_ok"] > 100, s
t = json.load(open(d + "/timeline.json"))
assert len(t["buckets"]) >= 15 and t["ranks"] == 3, len(t["buckets"])
ws = [b["world"] for b in t["buckets"]]
assert min(w for w in ws[1:15] if w is not None) == 2  # the kill's shrink shows
assert max(w for w in ws if w is not None) == 3
# a second without an ok step has no world (None), never a world of 0
assert all((b["world"] is None) == (b["steps_per_s"] == 0) for b in t["buckets"]), ws
assert [m["action"] for m in t["faults"]].count("restart") == 2
PY
# eep_run.timeline on a made-up run whose ranks all stop for a second (t 2-3 s): that second has
# no world (a hang stops every rank; it used to read as a world of 0)
python3 - "$root/scripts" <<'PY' || fail "timeline: a second without steps must have no world"
import sys
sys.path.insert(0, sys.argv[1])
import eep_run

class P:
    def __init__(self, slot, ts):
        self.slot = slot
        self.events = [{"event": "step", "ok": 1, "t_ms": 1000 * t, "world": 2,
                        "dispatch_us": 100, "combine_us": 100} for t in ts]

class R:
    t0, bytes, slots, applied = 0, 1000, [0, 1], []
    def procs(self):
        return [P(0, [0.5, 1.5, 3.5]), P(1, [0.6, 1.6, 3.6])]

b = eep_run.timeline(R(), 4000)["buckets"]
assert [x["world"] for x in b] == [2, 2, None, 2], b
PY
echo "ok: a second without steps has no world in the timeline"
if [ -f "$tmp/run2/timeline.png" ]; then
    head -c 8 "$tmp/run2/timeline.png" | od -An -c | grep -q 'P   N   G' || fail "timeline.png is no PNG"
    echo "ok: timeline.png written"
else
    grep -q "timeline: no PNG" "$s" || fail "no PNG and no reason given"
    echo "note: no PNG here ($(grep 'timeline:' "$s"))"
fi
echo "ok: 7 faults of every kind applied to fake ranks and recovered from, 2 restarts"

# ---- 3. a wrong step fails the run
mkdir -p "$tmp/r3"
FAKE_RANK_DIR=$tmp/r3 FAKE_WRONG=1 timeout 120 python3 "$drv" run --rank-bin "$fake" --ranks 2 \
    --hostids --work "$tmp/run3" --seconds 3 --no-png >"$tmp/run3.log" 2>&1
rc=$?
[ "$rc" -eq 1 ] || fail "a wrong step: driver exit $rc, expected 1"
grep -q "wrong steps: [1-9]" "$tmp/run3/summary.txt" || fail "the wrong step is not counted"
grep -q "RESULT: FAIL" "$tmp/run3/summary.txt" || fail "no RESULT: FAIL after a wrong step"
echo "ok: a wrong step fails the run"

# ---- 4. SIGTERM mid-run
mkdir -p "$tmp/r4"
FAKE_RANK_DIR=$tmp/r4 timeout 120 python3 "$drv" run --rank-bin "$fake" --ranks 3 --work "$tmp/run4" \
    --seconds 60 --no-png >"$tmp/run4.log" 2>&1 &
pid=$!
for _ in $(seq 200); do grep -q "3 rank(s) running" "$tmp/run4.log" 2>/dev/null && break; sleep 0.1; done
grep -q "3 rank(s) running" "$tmp/run4.log" || fail "the ranks of run 4 did not start"
kill -TERM "$pid"
for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && fail "the driver did not end within 30 s of SIGTERM"
wait "$pid"
grep -q "interrupted (SIGTERM): stopping every rank" "$tmp/run4.log" || fail "no interruption message"
grep -q "RESULT: FAIL" "$tmp/run4/summary.txt" || fail "no summary after SIGTERM"
while read -r p; do
    kill -0 "$p" 2>/dev/null && fail "rank pid $p still runs after the driver's SIGTERM"
done <"$tmp/run4/rank-pids"
echo "ok: SIGTERM stops every rank and writes the summary"

# ---- 5. seeded schedules
a=$(python3 "$drv" gen-schedule --ranks 4 --seconds 180 --seed 5)
b=$(python3 "$drv" gen-schedule --ranks 4 --seconds 180 --seed 5)
c=$(python3 "$drv" gen-schedule --ranks 4 --seconds 180 --seed 6)
[ "$a" = "$b" ] || fail "the same seed gave two schedules"
[ "$a" != "$c" ] || fail "two seeds gave the same schedule"
printf '%s\n' "$a" >"$tmp/gen.json"
python3 "$drv" check-schedule "$tmp/gen.json" --ranks 4 >/dev/null || fail "a seeded schedule does not validate"
python3 - "$tmp/gen.json" <<'PY' || fail "the seeded schedule does not cover every kind"
import json, sys
acts = {e["action"] for e in json.load(open(sys.argv[1]))}
want = {"kill", "stop", "restart", "exit-dispatch", "exit-combine", "stall", "delay", "corrupt-id", "hang"}
assert want <= acts, want - acts
PY
echo "ok: seeded schedules are reproducible and valid"

# ---- 6. deploy/launch.sh's GPU path, with fake ranks on 3 pretend GPUs
command -v etcd >/dev/null || { echo "SKIP: no etcd for the launcher part (the rest passed)"; exit 0; }
[ -x "$build/bin/eepd" ] || { echo "SKIP: no $build/bin/eepd for the launcher part"; exit 0; }
before=$(pgrep -c -f "$build/bin/eepd")
printf '[{"t_s":0.5,"rank":3,"action":"kill"}]\n' >"$tmp/bad-launch.json"
BUILD=$build timeout 60 "$root/deploy/launch.sh" --gpus 3 --rank-bin "$fake" --seconds 5 \
    --faults "$tmp/bad-launch.json" >"$tmp/l1.log" 2>&1
rc=$?
[ "$rc" -eq 2 ] || { cat "$tmp/l1.log"; fail "launch.sh with a bad schedule: exit $rc, expected 2"; }
grep -q "rank must be a slot 0..2, got 3" "$tmp/l1.log" || fail "launch.sh: the bad schedule is not named"
grep -q "eepd-0" "$tmp/l1.log" && fail "launch.sh started eepd before refusing the schedule"
cat >"$tmp/launch.json" <<'EOF'
[{"t_s": 1, "rank": 2, "action": "kill", "args": {"restart_after_s": 1}},
 {"t_s": 4, "rank": 0, "action": "stop", "args": {"cont_after_s": 0.5}}]
EOF
mkdir -p "$tmp/r6"
FAKE_RANK_DIR=$tmp/r6 BUILD=$build timeout 120 "$root/deploy/launch.sh" --gpus 3 --rank-bin "$fake" \
    --seconds 7 --faults "$tmp/launch.json" >"$tmp/l2.log" 2>&1
rc=$?
[ "$rc" -eq 0 ] || { cat "$tmp/l2.log"; fail "launch.sh --gpus 3 with fake ranks: exit $rc"; }
[ "$(grep -c '^eepd-[0-9]: gRPC' "$tmp/l2.log")" -eq 3 ] || fail "launch.sh did not start 3 eepd replicas"
grep -q "faults injected: 2, recovered: 2; restarts: 1, conts: 1" "$tmp/l2.log" ||
    { cat "$tmp/l2.log"; fail "launch.sh: the driver's summary is missing or wrong"; }
run_dir=$(sed -n 's/^logs in \([^;]*\);.*/\1/p' "$tmp/l2.log")
[ -f "$run_dir/summary.txt" ] && [ -f "$run_dir/timeline.json" ] || fail "no summary in $run_dir"
after=$(pgrep -c -f "$build/bin/eepd")
[ "$after" -le "$before" ] || fail "$((after - before)) eepd left running"
while read -r p; do
    kill -0 "$p" 2>/dev/null && fail "rank pid $p left running by launch.sh"
done <"$run_dir/rank-pids"
rm -rf "$run_dir"
echo "ok: launch.sh runs 3 eepd + the driver on fake ranks, applies the schedule, leaves nothing"

# ---- 7. Ctrl-C: SIGINT to launch.sh's whole process group (what a terminal sends)
mkdir -p "$tmp/r7"
FAKE_RANK_DIR=$tmp/r7 BUILD=$build python3 - "$root/deploy/launch.sh" "$fake" "$tmp/l7.log" <<'PY' ||
import os, signal, subprocess, sys, time
launch, fake, log = sys.argv[1:4]
p = subprocess.Popen([launch, "--gpus", "3", "--rank-bin", fake, "--seconds", "120"],
                     stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
for _ in range(300):
    if "3 rank(s) running" in open(log).read():
        break
    time.sleep(0.1)
else:
    p.kill()
    sys.exit("the ranks did not start")
os.killpg(p.pid, signal.SIGINT)
try:
    rc = p.wait(timeout=60)
except subprocess.TimeoutExpired:
    os.killpg(p.pid, signal.SIGKILL)
    sys.exit("launch.sh still runs 60 s after Ctrl-C")
sys.exit(0 if rc == 130 else f"exit {rc} after Ctrl-C, expected 130")
PY
    { cat "$tmp/l7.log"; fail "Ctrl-C"; }
run_dir=$(sed -n 's/^logs in \([^;]*\);.*/\1/p' "$tmp/l7.log")
grep -q "interrupted (SIGINT)" "$tmp/l7.log" ||
    { cat "$tmp/l7.log"; fail "Ctrl-C: the driver did not stop the ranks itself"; }
# etcd and eepd run in their own sessions: the Ctrl-C reaches neither, and the clean-up stops
# eepd while etcd still answers (each replica revokes its lease: no 5 s wait for a dead etcd)
for f in "$run_dir"/eepd-*.log; do
    ! grep -q "lease revoke" "$f" || { cat "$f"; fail "Ctrl-C: $(basename "$f"): etcd was gone first"; }
    ! grep -q "unknown environment variable" "$f" || fail "Ctrl-C: $(basename "$f"): a stray variable"
done
while read -r p; do
    kill -0 "$p" 2>/dev/null && fail "rank pid $p left running after Ctrl-C"
done <"$run_dir/rank-pids"
after=$(pgrep -c -f "$build/bin/eepd")
[ "$after" -le "$before" ] || fail "$((after - before)) eepd left running after Ctrl-C"
etcd_dir=$(sed -n 's/^etcd: .* (data dir \(.*\), removed at the end)$/\1/p' "$tmp/l7.log")
[ -n "$etcd_dir" ] || fail "launch.sh did not say where etcd's data dir is"
[ ! -e "$etcd_dir" ] || fail "etcd's data dir $etcd_dir left behind after Ctrl-C"
rm -rf "$run_dir"
echo "ok: Ctrl-C (SIGINT to the group) stops ranks, eepd and etcd, exit 130"
