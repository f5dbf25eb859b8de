#!/usr/bin/env python3
"""scripts/eep_run.py - the rank side of `make run` (deploy/launch.sh starts etcd, the eepd
replicas and, with one GPU, the MPS daemon, then this driver for the ranks).

  eep_run.py run --rank-bin BIN --ranks N --work DIR [--seconds S] [--faults 1|FILE] ...
      starts N eep-rank processes (--steps moe by default), one at a time until all run ok steps
      at world N, then for S seconds: a live status line (step, epoch, world, ranks, dispatch and
      combine us and GB/s, faults) refreshed from their JSON lines, the fault schedule applied
      (--faults 1: a seeded one, written to DIR/schedule.json; --faults FILE: that file), and at
      the end DIR/summary.txt, summary.json, timeline.json and timeline.png.  Exit 0 when no step
      was wrong, every fault was recovered from and no rank died unasked; 1 otherwise; 2 usage.
  eep_run.py check-schedule FILE --ranks N     validate a schedule file (exit 0, or 2 naming the
                                               entry and what is wrong)
  eep_run.py gen-schedule --ranks N --seconds S [--seed K] [--moe]   print a seeded schedule
  eep_run.py plot DIR                           timeline.json -> timeline.png (matplotlib, in a
                                               venv under build/ when the system has none)

The schedule format is docs/fault-schedule.md's: a JSON list of {"t_s", "rank", "action", "args"},
t_s counted from the moment all N ranks run, rank a slot 0..N-1 (a slot keeps its number when its
process is restarted).  kill/stop/cont/restart are applied here (signals, a new process); stall,
hang, exit-dispatch, exit-combine, corrupt-id and delay are written to the slot's --arm-file and
delivered by SIGUSR1 (eep-rank arms the spec for its next step: tools/eep_fault.h).
SIGINT/SIGTERM end the run early: every rank is stopped and reaped, the summary still written.
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from eep_procs import JsonProc, now_ms, stats, wait_for  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCHER_ACTIONS = ("kill", "stop", "cont", "restart")
RANK_ACTIONS = ("stall", "hang", "exit-dispatch", "exit-combine", "corrupt-id", "delay")
ACTIONS = LAUNCHER_ACTIONS + RANK_ACTIONS
PHASES = ("barrier", "dispatch", "combine")
# args each action takes: name -> (type, min, max)
NUM = (int, float)
ARGS = {
    "kill": {"restart_after_s": (NUM, 0, 3600)},
    "stop": {"cont_after_s": (NUM, 0, 3600)},
    "cont": {},
    "restart": {},
    "stall": {"phase": (str,), "ms": (int, 1, 3600000)},
    "hang": {"phase": (str,), "ms": (int, 0, 3600000), "restart_after_s": (NUM, 0, 3600)},
    "exit-dispatch": {"restart_after_s": (NUM, 0, 3600)},
    "exit-combine": {"restart_after_s": (NUM, 0, 3600)},
    "corrupt-id": {"expert": (int, -2**31, 2**31 - 1)},
    "delay": {"phase": (str,), "ms": (int, 1, 3600000), "steps": (int, 1, 1000000)},
}
REQUIRED = {"stall": ("ms",), "delay": ("ms",)}
# actions after which the slot's process is gone (until a restart)
ENDS_PROCESS = ("kill", "exit-dispatch", "exit-combine")


def fmt_rate(nbytes, us):
    """Bytes per call over its us, for the status line: GB/s, or MB/s below 0.1 GB/s (a
    decode-size step read "0.00 GB/s")."""
    if not us:
        return "- GB/s"
    gbs = nbytes / us / 1e3
    return f"{gbs:.2f} GB/s" if gbs >= 0.1 else f"{gbs * 1e3:.2f} MB/s"


class ScheduleError(ValueError):
    pass


def _j(v):
    """A value as the schedule file spells it (JSON), for messages."""
    return json.dumps(v)


def check_schedule(entries, ranks, where="schedule", moe=True, experts=12):
    """Validate a parsed schedule; returns it sorted by t_s.  Raises ScheduleError naming the
    entry (index from 0) and what is wrong with it."""
    if not isinstance(entries, list):
        raise ScheduleError(f"{where}: want a JSON list of entries, got {type(entries).__name__}")
    out = []
    for i, e in enumerate(entries):
        at = f"{where}: entry {i}"
        if not isinstance(e, dict):
            raise ScheduleError(f"{at}: want an object {{t_s, rank, action, args}}")
        unknown = sorted(set(e) - {"t_s", "rank", "action", "args"})
        if unknown:
            raise ScheduleError(f"{at}: unknown field(s) {unknown} (t_s, rank, action, args)")
        for k in ("t_s", "rank", "action"):
            if k not in e:
                raise ScheduleError(f"{at}: '{k}' is missing")
        t = e["t_s"]
        if isinstance(t, bool) or not isinstance(t, NUM) or t < 0 or t > 86400:
            raise ScheduleError(f"{at}: t_s must be a number of seconds 0..86400, got {_j(t)}")
        r = e["rank"]
        if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < ranks:
            raise ScheduleError(f"{at}: rank must be a slot 0..{ranks - 1}, got {_j(r)}")
        a = e["action"]
        if a not in ACTIONS:
            raise ScheduleError(f"{at}: unknown action {_j(a)} (one of {', '.join(ACTIONS)})")
        args = e.get("args", {})
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise ScheduleError(f"{at}: args must be an object, got {_j(args)}")
        for k, v in args.items():
            if k not in ARGS[a]:
                took = ", ".join(ARGS[a]) or "none"
                raise ScheduleError(f"{at}: {a} takes no arg {_j(k)} (it takes: {took})")
            spec = ARGS[a][k]
            if spec[0] is str:
                if v not in PHASES:
                    raise ScheduleError(f"{at}: {k} must be one of {', '.join(PHASES)}, got {_j(v)}")
                if not moe and v != "barrier":
                    raise ScheduleError(f"{at}: phase {v} needs MoE steps (--steps moe)")
                continue
            if isinstance(v, bool) or not isinstance(v, spec[0]) or not spec[1] <= v <= spec[2]:
                kind = "a whole number" if spec[0] is int else "a number"
                raise ScheduleError(f"{at}: {k} must be {kind} {spec[1]}..{spec[2]}, got {_j(v)}")
        for k in REQUIRED.get(a, ()):
            if k not in args:
                raise ScheduleError(f"{at}: {a} needs args.{k}")
        if a == "corrupt-id" and not moe:
            raise ScheduleError(f"{at}: corrupt-id needs MoE steps (--steps moe)")
        if a in ("exit-dispatch", "exit-combine") and not moe:
            raise ScheduleError(f"{at}: {a} needs MoE steps (--steps moe)")
        if a == "corrupt-id" and -1 <= args.get("expert", -2) < experts:
            raise ScheduleError(f"{at}: corrupt-id expert={args['expert']} is not out of range "
                                f"(-1 is 'no expert', 0..{experts - 1} are valid ids): give one "
                                f">= {experts} or < -1, which dispatch must refuse")
        out.append({"t_s": float(t), "rank": r, "action": a, "args": dict(args), "index": i})
    out.sort(key=lambda x: (x["t_s"], x["index"]))
    return out


def load_schedule(path, ranks, moe=True, experts=12):
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise ScheduleError(f"{path}: cannot read it: {e.strerror}")
    try:
        entries = json.loads(text)
    except ValueError as e:
        raise ScheduleError(f"{path}: not JSON: {e}")
    return check_schedule(entries, ranks, path, moe, experts)


def gen_schedule(seed, ranks, seconds, moe=True):
    """A seeded schedule: one fault every ~12 s (less in short runs, jittered), each undone a few
    seconds later (restart after a kill or an exit, cont after a stop), never two at once; the
    first len(kinds) faults go through every kind once, in order."""
    rng = random.Random(seed)
    first_s, gap_s, tail_s = min(8.0, seconds * 0.15), min(12.0, seconds / 4), min(6.0, seconds * 0.3)
    kinds = ["kill", "stop", "restart"]
    if moe:
        kinds += ["exit-dispatch", "exit-combine", "stall", "delay", "corrupt-id", "hang"]
    out, t = [], first_s
    while t + tail_s <= seconds:
        a = kinds[len(out) % len(kinds)] if len(out) < len(kinds) else rng.choice(kinds)
        e = {"t_s": round(t, 1), "rank": rng.randrange(ranks), "action": a, "args": {}}
        undo = round(rng.uniform(min(2.0, gap_s * 0.3), min(4.0, gap_s * 0.5)), 1)
        if a in ENDS_PROCESS:
            e["args"]["restart_after_s"] = undo
        elif a == "stop":
            e["args"]["cont_after_s"] = undo
        elif a == "stall":
            e["args"] = {"phase": rng.choice(["dispatch", "combine"]), "ms": rng.choice([50, 1500])}
        elif a == "delay":
            e["args"] = {"ms": rng.choice([20, 200]), "steps": rng.randint(1, 5)}
        elif a == "hang":
            e["args"] = {"ms": 3000}  # evicted while hung, then fenced, then back
        out.append(e)
        t += gap_s * rng.uniform(0.8, 1.2)
    return out


def rank_spec(action, args):
    """The --arm-file line for a data-plane action (tools/eep_fault.h's grammar)."""
    words = [action]
    for k in ("phase", "ms", "steps", "expert"):
        if k in args:
            words.append(f"{k}={args[k]}")
    return " ".join(words)


class Slot:
    """One rank slot: its current process and every process it had."""

    def __init__(self, index):
        self.index = index
        self.procs = []
        self.stopped = False
        self.hung = False

    @property
    def proc(self):
        return self.procs[-1] if self.procs else None

    def member(self):
        """Expected in the job's views: alive, not stopped, not hung."""
        p = self.proc
        return p is not None and p.alive() and not self.stopped and not self.hung


class Run:
    def __init__(self, args):
        self.args = args
        self.work = args.work
        self.slots = [Slot(i) for i in range(args.ranks)]
        self.applied = []  # faults and recoveries, in order: dicts with t_ms
        self.pending = []  # follow-ups (restart/cont) the schedule's args asked for
        self.expected = []  # (t_ms, expected world) after every change
        self.t0 = None  # all ranks running: t_s of the schedule counts from here
        self.failures = []
        self.env = dict(os.environ)
        for k in ("EEP_RUN_DIR", "EEP_TEST_ETCD_DIR", "EEP_TEST_ETCD_CLIENT_PORTS", "EEP_RANK",
                  "EEP_WORLD_SIZE", "EEP_BOOTSTRAP", "ONE_GPU_CLUSTER_DIR"):
            self.env.pop(k, None)
        self.uuids = [u for u in (args.uuids or "").split(",") if u]
        self.bytes = args.tokens * args.topk * args.hidden * 2  # bf16 rows one rank sends
        self._last_print = 0.0
        self.signalled = None  # the first SIGINT/SIGTERM the driver got
        self.interrupted = False  # the run has stopped for it
        self.pids_file = os.path.join(self.work, "rank-pids")

    # ---- processes ----
    def spawn(self, slot):
        s = self.slots[slot]
        gen = len(s.procs)
        per_gpu = max(1, self.args.per_gpu)
        gpu = (slot // per_gpu) if self.args.gpus > 0 else 0
        e = dict(self.env)
        e["EEP_DEVICE"] = str(gpu)
        e["EEP_AGENT_GPU_UUID"] = self.uuids[gpu] if gpu < len(self.uuids) else f"GPU-{gpu}"
        if per_gpu > 1 or self.args.hostids:
            # each process its own one-GPU NCCL "host" (NCCL refuses two ranks of a GPU and host)
            e["NCCL_HOSTID"] = f"eep-run-{os.getpid()}-g{gen}-{slot}"
        arm = os.path.join(self.work, f"rank-{slot}.arm")
        cmd = [self.args.rank_bin, "--steps", self.args.steps, "--arm-file", arm,
               "--tokens", str(self.args.tokens), "--hidden", str(self.args.hidden),
               "--topk", str(self.args.topk), "--experts", str(self.args.experts)] + \
            self.args.rank_arg
        name = f"rank-{slot}" + (f".{gen}" if gen else "")
        p = JsonProc(name, cmd, e, self.work)
        p.slot, p.arm = slot, arm
        s.procs.append(p)
        s.stopped = s.hung = False
        with open(self.pids_file, "a") as f:
            f.write(f"{p.pid}\n")
        return p

    def procs(self):
        return [p for s in self.slots for p in s.procs]

    def note_world(self):
        w = sum(s.member() for s in self.slots)
        if not self.expected or self.expected[-1][1] != w:
            self.expected.append((now_ms(), w))

    def stop_all(self):
        for p in self.procs():
            p.expect_death = True
        for p in self.procs():
            if p.alive():
                p.signal(signal.SIGCONT)
                p.signal(signal.SIGTERM)
        for p in self.procs():
            p.stop(grace_s=15)
            if not hasattr(p, "exit_ms"):
                p.exit_ms = now_ms()

    # ---- faults ----
    def apply(self, e, why="schedule"):
        slot, a, args = e["rank"], e["action"], e.get("args", {})
        s = self.slots[slot]
        p = s.proc
        rec = {"t_ms": now_ms(), "slot": slot, "action": a, "args": args, "by": why,
               "pid": p.pid if p else None, "kind": "fault"}
        alive = p is not None and p.alive()
        if a == "cont" or (a == "restart" and not alive):
            rec["kind"] = "recovery"
        if a in ("kill", "stop", "cont") + RANK_ACTIONS and not alive:
            rec["skipped"] = "the slot's process is not running"
        elif a == "kill":
            p.expect_death = True
            p.signal(signal.SIGKILL)
        elif a == "stop":
            p.signal(signal.SIGSTOP)
            s.stopped = True
        elif a == "cont":
            p.signal(signal.SIGCONT)
            s.stopped = False
        elif a == "restart":
            if alive:
                p.expect_death = True
                p.signal(signal.SIGCONT)
                p.signal(signal.SIGKILL)
                try:
                    p.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
            rec["pid"] = self.spawn(slot).pid
        else:
            with open(p.arm + ".tmp", "w") as f:
                f.write(rank_spec(a, args) + "\n")
            os.replace(p.arm + ".tmp", p.arm)
            if a in ("exit-dispatch", "exit-combine"):
                p.expect_death = True
            if a == "hang" and args.get("ms", 0) == 0:
                s.hung = True
            p.signal(signal.SIGUSR1)
            rec["spec"] = rank_spec(a, args)
        if "skipped" not in rec:
            if "restart_after_s" in args:
                self.pending.append({"t_ms": rec["t_ms"] + args["restart_after_s"] * 1000,
                                     "rank": slot, "action": "restart", "args": {}})
            if "cont_after_s" in args:
                self.pending.append({"t_ms": rec["t_ms"] + args["cont_after_s"] * 1000,
                                     "rank": slot, "action": "cont", "args": {}})
        self.applied.append(rec)
        self.note_world()
        return rec

    # ---- the status line ----
    def status(self, final=False):
        steps, epochs, d_us, c_us, worlds = [], [], [], [], []
        for s in self.slots:
            p = s.proc
            if p is None:
                continue
            e = p.last(lambda x: x.get("event") == "step" and x.get("ok") == 1)
            if e is None or not p.alive():
                continue
            steps.append(e.get("step", 0))
            epochs.append(e.get("epoch", 0))
            worlds.append(e.get("world", 0))
            d_us.append(e.get("dispatch_us") or e.get("barrier_us") or 0)
            c_us.append(e.get("combine_us") or 0)
        live = sum(1 for s in self.slots if s.proc is not None and s.proc.alive())
        faults = sum(1 for r in self.applied if r["kind"] == "fault" and "skipped" not in r)
        wrong = sum(1 for p in self.procs() for e in p.events if e.get("event") == "step" and
                    "bad" in e)

        def rate(us):
            return fmt_rate(self.bytes, us)
        med = (lambda xs: sorted(xs)[len(xs) // 2] if xs else 0)
        t = (now_ms() - self.t0) / 1000 if self.t0 else 0.0
        if self.args.steps == "moe":
            times = (f"dispatch {med(d_us):.0f} us {rate(med(d_us))} | "
                     f"combine {med(c_us):.0f} us {rate(med(c_us))}")
        else:
            times = f"barrier {med(d_us):.0f} us"
        line = (f"[{t:6.1f} s] step {max(steps) if steps else '-'} epoch "
                f"{max(epochs) if epochs else '-'} world {max(worlds) if worlds else '-'} ranks "
                f"{live}/{len(self.slots)} | {times} | faults {faults} | wrong {wrong}")
        tty = sys.stdout.isatty()
        if tty and not final:
            # one terminal line, rewritten in place (a longer one would wrap and scroll)
            width = max(40, shutil.get_terminal_size((120, 24)).columns - 1)
            sys.stdout.write("\r" + line[:width].ljust(width))
            sys.stdout.flush()
        elif final or time.time() - self._last_print >= self.args.status_every_s:
            if tty:
                sys.stdout.write("\r")
            print(line, flush=True)
            self._last_print = time.time()
        return line

    # ---- the run ----
    def start(self):
        t_start = now_ms()
        for i in range(len(self.slots)):
            self.spawn(i)
            want = i + 1

            def all_ok():
                self.check_signalled()
                self.check_deaths()
                if self.failures:
                    return True  # a rank died: no point waiting
                return all(s.proc.first(t_start, lambda e: e.get("event") == "step" and
                                        e.get("ok") == 1 and e.get("world") == want)
                           for s in self.slots[:want])
            if not wait_for(all_ok, self.args.start_s, 0.1) or self.failures:
                self.check_deaths()
                if self.failures:
                    raise RuntimeError(f"start: a rank died before all {want} ran at world {want}")
                raise RuntimeError(f"start: the {want} rank(s) did not all run an ok step at world "
                                   f"{want} within {self.args.start_s} s (see {self.work})")
            print(f"eep-run: {want} rank(s) running after {(now_ms() - t_start) / 1000:.1f} s",
                  flush=True)
        self.t0 = now_ms()
        self.note_world()

    def check_signalled(self):
        """A signal whose KeyboardInterrupt was lost still ends the run."""
        if self.signalled is not None and not self.interrupted:
            raise KeyboardInterrupt

    def check_deaths(self):
        for p in self.procs():
            rc = p.returncode()
            if rc is not None and not hasattr(p, "exit_ms"):
                p.exit_ms = now_ms()  # within a poll period (0.1 s)
            if rc is not None and not p.expect_death and not getattr(p, "reported", False):
                p.reported = True
                what = "a wrong step" if rc == 3 else f"exit {rc}"
                try:
                    with open(p.err) as f:
                        tail = [x.strip() for x in f.read().splitlines() if x.strip()][-1:]
                except OSError:
                    tail = []
                self.failures.append(f"rank slot {p.slot} ({p.name}, pid {p.pid}) died unasked "
                                     f"({what}){': ' + tail[0][:200] if tail else ''}; see {p.err}")

    def loop(self, schedule):
        end = self.t0 + self.args.seconds * 1000
        todo = list(schedule)
        while now_ms() < end:
            self.check_signalled()
            t = now_ms()
            while todo and self.t0 + todo[0]["t_s"] * 1000 <= t:
                self.apply(todo.pop(0))
            due = [x for x in self.pending if x["t_ms"] <= t]
            for x in due:
                self.pending.remove(x)
                self.apply(x, why="follow-up")
            for p in self.procs():
                p.poll()
            self.check_deaths()
            self.note_world()
            self.status()
            time.sleep(0.1)
        self.not_reached = todo + self.pending
        self.status(final=True)


def analyze(run, end_ms):
    """Per fault: detection (every other member saw a fault or a view), interruption (each then
    ran an ok step), back (every expected member ran an ok step at the expected world), grow
    (from the follow-up restart/cont to back)."""
    faults = [r for r in run.applied if r["kind"] == "fault" and "skipped" not in r]
    procs = run.procs()

    def expected_at(t):
        w = None
        for (tt, ww) in run.expected:
            if tt <= t:
                w = ww
        return w

    def proc_of(slot, t):
        """The slot's process that ran at t (the last started at or before t)."""
        cand = [p for p in run.slots[slot].procs if p.start_ms <= t]
        return cand[-1] if cand else None

    out = []
    for i, f in enumerate(faults):
        t0 = f["t_ms"]
        # the rank's own inject/dying line is the fault's instant when there is one
        victim = next((p for p in procs if p.pid == f["pid"]), None)
        if victim is not None and f["action"] in RANK_ACTIONS:
            e = victim.first(t0 - 50, lambda x: x.get("event") in ("inject", "dying"))
            if e is not None:
                t0 = max(t0, e["t_ms"]) if e["t_ms"] >= t0 - 50 else t0
                f["fired"] = True
            else:
                f["fired"] = False
        w_end = faults[i + 1]["t_ms"] if i + 1 < len(faults) else end_ms
        recs = [r for r in run.applied if r["kind"] == "recovery" and r["slot"] == f["slot"] and
                t0 <= r["t_ms"] < w_end]
        t_rec = recs[0]["t_ms"] if recs else None
        others = [proc_of(s.index, t0) for s in run.slots if s.index != f["slot"]]
        others = [p for p in others if p is not None and alive_at(p, t0) and
                  not _stopped_at(run, p, t0)]
        d = {"slot": f["slot"], "action": f["action"], "t_s": round((t0 - run.t0) / 1000, 2),
             "args": f["args"]}
        notice = [p.first(t0, lambda e: e.get("event") in ("fault", "view")) for p in others]
        notice = [n for n in notice if n is not None and n["t_ms"] < w_end]
        if others and len(notice) == len(others):
            d["detect_ms"] = max(n["t_ms"] for n in notice) - t0
            oks = [p.first(n["t_ms"], lambda e: e.get("event") == "step" and e.get("ok") == 1)
                   for p, n in zip(others, notice)]
            if all(o is not None and o["t_ms"] < w_end for o in oks):
                d["interrupt_ms"] = max(o["t_ms"] for o in oks) - t0
        # back: every member expected at the end of the window ran an ok step at that world
        t_from = t_rec if t_rec is not None else t0
        want = expected_at(w_end - 1)
        members = [proc_of(s.index, w_end - 1) for s in run.slots]
        mem = [p for p in members if p is not None and alive_at(p, w_end - 1) and
               not _stopped_at(run, p, w_end - 1)]
        if want:
            oks = [p.first(t_from, lambda e, w=want: e.get("event") == "step" and
                           e.get("ok") == 1 and e.get("world") == w) for p in mem]
            if mem and all(o is not None and o["t_ms"] < w_end for o in oks):
                back = max(o["t_ms"] for o in oks)
                d["back_ms"] = back - t0
                if t_rec is not None:
                    d["grow_ms"] = back - t_rec
        d["world_after"] = want
        d["recovered"] = "back_ms" in d
        if f["action"] in RANK_ACTIONS and f.get("fired") is False:
            d["recovered"] = False
            d["note"] = "the rank never reported the fault (no inject line)"
        out.append(d)
    return out


def alive_at(p, t):
    return p.start_ms <= t < getattr(p, "exit_ms", float("inf"))


def _stopped_at(run, p, t):
    """Was process p stopped (SIGSTOP without SIGCONT yet) or hung for good at t?"""
    st = False
    for r in run.applied:
        if r["t_ms"] > t or r.get("pid") != p.pid or "skipped" in r:
            continue
        if r["action"] == "stop":
            st = True
        elif r["action"] == "cont":
            st = False
        elif r["action"] == "hang" and r["args"].get("ms", 0) == 0:
            st = True
    return st


def timeline(run, end_ms):
    """1 s buckets (the last, partial one left out): ok steps/s over all ranks, median dispatch
    and combine GB/s, the smallest world of the bucket's ok steps (a shrink shows; None for a
    second without any: no rank stepped, which is not a world of 0), ranks that ran ok steps."""
    t0 = run.t0
    n = max(1, int((end_ms - t0) / 1000))
    buckets = [{"t_s": i, "steps": 0, "d": [], "c": [], "world": None, "ranks": set()}
               for i in range(n)]
    for p in run.procs():
        for e in p.events:
            if e.get("event") != "step" or e.get("ok") != 1:
                continue
            i = int((e.get("t_ms", 0) - t0) / 1000)
            if not 0 <= i < n:
                continue
            b = buckets[i]
            b["steps"] += 1
            w = e.get("world", 0)
            b["world"] = w if b["world"] is None else min(b["world"], w)
            b["ranks"].add(p.slot)
            for k, key in (("dispatch_us", "d"), ("combine_us", "c")):
                if e.get(k):
                    b[key].append(run.bytes / e[k] / 1e3)
    out = []
    for b in buckets:
        med = (lambda xs: round(sorted(xs)[len(xs) // 2], 3) if xs else None)
        out.append({"t_s": b["t_s"], "steps_per_s": b["steps"], "dispatch_gbps": med(b["d"]),
                    "combine_gbps": med(b["c"]), "world": b["world"],
                    "ranks": len(b["ranks"])})
    marks = [{"t_s": round((r["t_ms"] - t0) / 1000, 2), "slot": r["slot"], "action": r["action"],
              "kind": r["kind"]} for r in run.applied if "skipped" not in r]
    return {"ranks": len(run.slots), "buckets": out, "faults": marks}


def report(run, summary, out):
    started = (f"{summary.get('ran_s')} of {summary['seconds']} s after start-up "
               f"({summary['start_s']} s)"
               if "start_s" in summary else "start-up did not finish")
    lines = [f"make run: {summary['ranks']} ranks, --steps {summary['steps']}, {started}, "
             f"schedule: {summary['schedule']}"]
    lines.append(f"steps: {summary['steps_ok']} ok on all ranks, wrong steps: "
                 f"{summary['wrong_steps']} (must be 0)")
    fs = summary["faults"]
    lines.append(f"faults injected: {len(fs)}, recovered: {sum(f['recovered'] for f in fs)}; "
                 f"restarts: {summary['restarts']}, conts: {summary['conts']}")
    if fs:
        lines.append(f"{'t_s':>7} {'slot':>4} {'action':14} {'detect ms':>9} {'interrupt ms':>12} "
                     f"{'grow ms':>8} {'back ms':>8} world recovered")
    for f in fs:
        def v(k):
            return str(f.get(k)) if f.get(k) is not None else "-"
        lines.append(f"{f['t_s']:7.1f} {f['slot']:4d} {f['action']:14} {v('detect_ms'):>9} "
                     f"{v('interrupt_ms'):>12} {v('grow_ms'):>8} {v('back_ms'):>8} "
                     f"{v('world_after'):>5} {'yes' if f['recovered'] else 'NO'}"
                     + (f"  ({f['note']})" if f.get("note") else ""))
    for k in ("detect_ms", "interrupt_ms", "grow_ms"):
        s = summary["all"][k]
        if s["n"]:
            lines.append(f"{k[:-3]}: median {s['median']} ms, max {s['max']} ms over {s['n']}")
    if summary.get("not_reached"):
        lines.append(f"not reached before the end: {summary['not_reached']} schedule entries")
    lines.append(f"timeline: {summary.get('png') or summary.get('png_missing')}")
    lines += [f"FAIL: {x}" for x in summary["failures"]]
    lines.append(f"RESULT: {summary['result']}")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    return text


def venv_python(build):
    """A python with matplotlib: this one, else build/venv-plot (made and filled by pip)."""
    try:
        import matplotlib  # noqa: F401
        return sys.executable
    except ImportError:
        pass
    venv = os.path.join(build, "venv-plot")
    py = os.path.join(venv, "bin", "python3")
    probe = [py, "-c", "import matplotlib"]
    if os.path.exists(py) and subprocess.run(probe, capture_output=True).returncode == 0:
        return py
    print(f"eep-run: installing matplotlib into {venv} (pip)", flush=True)
    try:
        if not os.path.exists(py):
            subprocess.run([sys.executable, "-m", "venv", venv], check=True, capture_output=True,
                           timeout=120)
        # bounded: without an index in reach (the GPU machine) this fails in well under a minute
        subprocess.run([py, "-m", "pip", "install", "-q", "--timeout", "15", "--retries", "1",
                        "matplotlib"], check=True, capture_output=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as e:
        print(f"eep-run: no matplotlib ({e.__class__.__name__}): no PNG", flush=True)
        return None
    return py


def plot(tl_path, png_path):
    """timeline.json -> PNG: throughput on top, world and ranks below, faults marked."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    with open(tl_path) as f:
        tl = json.load(f)
    b = tl["buckets"]
    t = [x["t_s"] for x in b]
    fig, (ax1, ax2) = plt.subplots(2, 1, sharex=True, figsize=(11, 6.5))
    ax1.plot(t, [x["steps_per_s"] for x in b], color="tab:blue", label="ok steps/s (all ranks)")
    ax1.set_ylabel("ok steps / s")
    ax1b = ax1.twinx()
    ax1b.plot(t, [x["dispatch_gbps"] or 0 for x in b], color="tab:green", lw=0.8,
              label="dispatch GB/s")
    ax1b.plot(t, [x["combine_gbps"] or 0 for x in b], color="tab:olive", lw=0.8,
              label="combine GB/s")
    ax1b.set_ylabel("GB/s per rank (payload)")
    ax1.legend(loc="upper left", fontsize=8)
    ax1b.legend(loc="upper right", fontsize=8)
    # a second without an ok step has no world: a gap in the line, not a world of 0
    ax2.step(t, [x["world"] if x["world"] is not None else float("nan") for x in b], where="post",
             color="tab:purple", label="world (smallest of the second; gap: no rank stepped)")
    ax2.step(t, [x["ranks"] for x in b], where="post", color="tab:orange", ls="--",
             label="ranks stepping")
    ax2.set_ylim(0, tl["ranks"] + 1)
    ax2.set_ylabel("ranks")
    ax2.set_xlabel("s since all ranks ran")
    ax2.legend(loc="lower left", fontsize=8)
    for m in tl["faults"]:
        c = "tab:red" if m["kind"] == "fault" else "tab:gray"
        for ax in (ax1, ax2):
            ax.axvline(m["t_s"], color=c, lw=0.8, alpha=0.7)
        ax2.text(m["t_s"], tl["ranks"] + 0.6, f"{m['action']}@{m['slot']}", rotation=90,
                 fontsize=7, va="top", color=c)
    fig.suptitle("make run: throughput and membership over time (red: faults, grey: recoveries)")
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)
    return png_path


def make_png(out, build):
    tl, png = os.path.join(out, "timeline.json"), os.path.join(out, "timeline.png")
    py = venv_python(build)
    if py is None:
        return None, f"no PNG (matplotlib missing, pip failed): {tl} holds the data; make it " \
                     f"elsewhere with scripts/eep_run.py plot {out}"
    r = subprocess.run([py, os.path.abspath(__file__), "plot", out], capture_output=True,
                       text=True, timeout=300)
    if r.returncode != 0:
        return None, f"no PNG (plotting failed: {r.stderr.strip()[-300:]})"
    return png, None


def cmd_run(args):
    os.makedirs(args.work, exist_ok=True)
    out = args.out or args.work
    os.makedirs(out, exist_ok=True)
    moe = args.steps == "moe"
    if args.faults in (None, "", "0"):
        schedule, sched_name = [], "none"
    elif args.faults == "1":
        raw = gen_schedule(args.seed, args.ranks, args.seconds, moe)
        with open(os.path.join(out, "schedule.json"), "w") as f:
            json.dump(raw, f, indent=1)
        schedule = check_schedule(raw, args.ranks, "generated schedule", moe, args.experts)
        sched_name = f"seeded (seed {args.seed}, {len(schedule)} entries, {out}/schedule.json)"
    else:
        try:
            schedule = load_schedule(args.faults, args.ranks, moe, args.experts)
        except ScheduleError as e:
            print(f"eep-run: {e}", file=sys.stderr)
            return 2
        sched_name = f"{args.faults} ({len(schedule)} entries)"
    run = Run(args)

    def on_signal(sig, frame):
        # Once: a second signal must not cut the clean-up short.  Should the exception be lost
        # (raised where Python cannot pass it on, in a finaliser), the loops' check_signalled
        # raises it again.
        if run.signalled is None:
            run.signalled = sig
            raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    summary = {"ranks": args.ranks, "steps": args.steps, "seconds": args.seconds,
               "schedule": sched_name, "failures": run.failures}
    t_launch = now_ms()
    try:
        print(f"eep-run: {args.ranks} ranks of {args.rank_bin} ({args.steps} steps), logs in "
              f"{args.work}", flush=True)
        run.start()
        summary["start_s"] = round((run.t0 - t_launch) / 1000, 1)
        run.loop(schedule)
    except KeyboardInterrupt:
        run.interrupted = True
        name = signal.Signals(run.signalled).name if run.signalled else "SIGINT"
        print(f"\neep-run: interrupted ({name}): stopping every rank", flush=True)
        run.failures.append("interrupted before the end")
        summary["interrupted"] = True
    except RuntimeError as e:
        run.failures.append(str(e))
    finally:
        # no signal may cut the clean-up short
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        end_ms = now_ms()
        run.stop_all()
    for p in run.procs():
        p.poll()
    if run.t0 is None:
        run.t0 = t_launch
    elif "start_s" in summary:
        summary["ran_s"] = round((end_ms - run.t0) / 1000, 1)
    faults = analyze(run, end_ms)
    summary["faults"] = faults
    summary["restarts"] = sum(1 for r in run.applied if r["action"] == "restart")
    summary["conts"] = sum(1 for r in run.applied if r["action"] == "cont")
    summary["applied"] = run.applied
    summary["not_reached"] = len(getattr(run, "not_reached", []))
    summary["steps_ok"] = sum(1 for p in run.procs() for e in p.events
                              if e.get("event") == "step" and e.get("ok") == 1)
    wrong = [(p.slot, e.get("step"), e.get("bad")) for p in run.procs() for e in p.events
             if e.get("event") == "step" and "bad" in e]
    summary["wrong_steps"] = len(wrong)
    if wrong:
        run.failures.append(f"wrong steps (slot, step, what): {wrong[:10]}")
    for f in faults:
        if not f["recovered"]:
            run.failures.append(f"{f['action']} of slot {f['slot']} at {f['t_s']} s: not "
                                f"recovered ({f.get('note') or 'the job did not run ok steps at '}"
                                f"{'' if f.get('note') else 'world ' + str(f['world_after'])})")
    summary["all"] = {k: stats([f.get(k) for f in faults])
                      for k in ("detect_ms", "interrupt_ms", "grow_ms")}
    with open(os.path.join(out, "timeline.json"), "w") as f:
        json.dump(timeline(run, end_ms), f)
    if args.no_png:
        summary["png_missing"] = "no PNG (--no-png)"
    else:
        summary["png"], summary["png_missing"] = make_png(out, args.build)
    ok = not run.failures
    summary["result"] = "PASS" if ok else "FAIL"
    print(report(run, summary, out), end="", flush=True)
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run the ranks (deploy/launch.sh calls this)")
    r.add_argument("--rank-bin", required=True)
    r.add_argument("--ranks", type=int, required=True)
    r.add_argument("--work", required=True, help="rank logs; the summary too unless --out")
    r.add_argument("--out")
    r.add_argument("--build", default=os.path.join(os.path.dirname(HERE), "build"),
                   help="where the plotting venv goes (build/venv-plot)")
    r.add_argument("--seconds", type=float, default=180, help="after all ranks run")
    r.add_argument("--start-s", type=float, default=240, help="bound of the start-up (JIT)")
    r.add_argument("--faults", help="1: a seeded schedule; else a schedule file")
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--steps", choices=["barrier", "moe"], default="moe")
    r.add_argument("--gpus", type=int, default=1)
    r.add_argument("--per-gpu", type=int, default=1)
    r.add_argument("--uuids", default="")
    r.add_argument("--hostids", action="store_true", help="an NCCL_HOSTID per process anyway")
    r.add_argument("--tokens", type=int, default=64)
    r.add_argument("--hidden", type=int, default=256)
    r.add_argument("--topk", type=int, default=2)
    r.add_argument("--experts", type=int, default=12)
    r.add_argument("--rank-arg", action="append", default=[],
                   help="one more eep-rank argument (repeatable)")
    r.add_argument("--status-every-s", type=float, default=5.0,
                   help="status line period when stdout is not a terminal")
    r.add_argument("--no-png", action="store_true")
    c = sub.add_parser("check-schedule")
    c.add_argument("file")
    c.add_argument("--ranks", type=int, required=True)
    c.add_argument("--steps", choices=["barrier", "moe"], default="moe")
    c.add_argument("--experts", type=int, default=12)
    g = sub.add_parser("gen-schedule")
    g.add_argument("--ranks", type=int, required=True)
    g.add_argument("--seconds", type=float, required=True)
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--steps", choices=["barrier", "moe"], default="moe")
    pl = sub.add_parser("plot")
    pl.add_argument("dir")
    args = p.parse_args()
    if args.cmd == "run":
        if args.ranks < 1:
            p.error("--ranks must be at least 1")
        if args.seconds <= 0:
            p.error("--seconds must be > 0 (every run is bounded)")
        sys.exit(cmd_run(args))
    if args.cmd == "check-schedule":
        try:
            s = load_schedule(args.file, args.ranks, args.steps == "moe", args.experts)
        except ScheduleError as e:
            print(f"eep-run: {e}", file=sys.stderr)
            sys.exit(2)
        print(f"{args.file}: {len(s)} entries ok")
        sys.exit(0)
    if args.cmd == "gen-schedule":
        print(json.dumps(gen_schedule(args.seed, args.ranks, args.seconds,
                                      args.steps == "moe"), indent=1))
        sys.exit(0)
    if args.cmd == "plot":
        print(plot(os.path.join(args.dir, "timeline.json"), os.path.join(args.dir, "timeline.png")))
        sys.exit(0)


if __name__ == "__main__":
    main()
