#!/usr/bin/env python3
"""scripts/gpu_elastic.py - the driver of `make gpu-elastic` (started by scripts/gpu-elastic.sh
inside scripts/one-gpu-cluster.sh, which owns the MPS daemon and the NCCL/plugin environment).

Starts etcd and eepd on 127.0.0.1 and N eep-rank processes on the one GPU (each its own
NCCL_HOSTID: GIN peers), or with --gpus G one per GPU (NVLink peers of one NCCL node, a newcomer
on its victim's GPU), waits until they run steps at world N, then runs rounds.  A round arms one
rank (--arm-file + SIGUSR1) to SIGKILL or SIGSTOP itself right after launching its next kernel of a
phase (barrier; with --steps moe dispatch, combine, or the barrier that opens each MoE step,
eep-rank --moe-barrier): a death mid-kernel.  Then it measures, from
the rank's own "dying" line:
  detection     until every survivor saw it (a fault line or the view without the victim);
  interruption  until every survivor ran an ok step at world N-1;
  grow          KILL: a newcomer is started; STOP: the victim gets SIGCONT (it must be fenced:
                its lease is gone, it rejoins as a new member) - until every rank ran an ok step
                at world N again.
A round fails on a survivor that does not get there within --deadline-s (a hang), on any step
whose result is wrong (eep-rank exits 3), or on a process other than the victim that dies.  After
each round GPU memory (nvidia-smi) and each live rank's open fds are sampled; they must stay flat.
Writes summary.txt and summary.json to --out; every rank's log stays in --work.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from eep_procs import JsonProc, free_port, now_ms, start_etcd, stats, wait_for  # noqa: E402


def log(msg):
    print(f"gpu-elastic: {msg}", flush=True)


class Rank(JsonProc):
    """One eep-rank process and the JSON lines it printed."""

    def __init__(self, slot, args, env, work, device=None):
        self.slot = slot
        self.device = device
        self.arm = os.path.join(work, f"rank-{slot}.arm")
        e = dict(env)
        if device is None:
            # the one-GPU cluster: each rank a one-GPU NCCL node of its own (GIN peers)
            e["NCCL_HOSTID"] = f"eep-gpu-elastic-{os.getpid()}-{slot}"
        else:
            # one rank per GPU, all of one NCCL node: NVLink (LSA) peers
            e.pop("NCCL_HOSTID", None)
            e["EEP_DEVICE"] = str(device)
        cmd = [args.rank_bin, "--steps", args.steps, "--interval-ms", str(args.interval_ms),
               "--timeout-ms", str(args.timeout_ms), "--view-wait-s", "30",
               "--join-timeout-s", "120", "--arm-file", self.arm]
        if args.steps == "moe":
            cmd.append("--moe-barrier")  # a barrier opens each MoE step: kills land there too
            cmd += ["--layout", args.layout, "--mode", args.mode]
        super().__init__(f"rank-{slot}", cmd, e, work)


def ok_step_at(world, since):
    return lambda e: e.get("event") == "step" and e.get("ok") == 1 and e.get("world") == world


def gpu_used_mib():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20).stdout.split()
        return sum(int(x) for x in out) if out else -1  # every GPU's
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return -1


def gpu_used_by_pid():
    """{pid: MiB} of the GPUs' compute processes, summed over GPUs (one entry, the MPS server,
    under MPS)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                              "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20).stdout
        used = {}
        for a, b in (ln.split(",") for ln in out.splitlines() if "," in ln):
            used[int(a)] = used.get(int(a), 0) + int(b)
        return used
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return {}


class Job:
    def __init__(self, args):
        self.args = args
        self.work = args.work
        self.ranks = []
        self.slot = 0
        self.failures = []
        self.env = dict(os.environ)
        for k in ("EEP_RANK", "EEP_WORLD_SIZE", "EEP_BOOTSTRAP", "ONE_GPU_CLUSTER_DIR"):
            self.env.pop(k, None)

    def spawn(self):
        device = None
        if self.args.gpus:
            # the lowest GPU no live rank holds (a newcomer takes its victim's)
            busy = {r.device for r in self.ranks if r.alive()}
            free = [g for g in range(self.args.gpus) if g not in busy]
            if not free:
                raise RuntimeError(f"no free GPU for rank slot {self.slot}: all {self.args.gpus} "
                                   "hold a live rank")
            device = free[0]
        r = Rank(self.slot, self.args, self.env, self.work, device)
        self.slot += 1
        self.ranks.append(r)
        return r

    def live(self):
        return [r for r in self.ranks if r.alive()]

    def check_crashes(self):
        for r in self.ranks:
            rc = r.proc.poll()
            if rc is not None and not r.expect_death and not getattr(r, "reported", False):
                r.reported = True
                what = "a wrong step" if rc == 3 else f"exit {rc}"
                self.failures.append(f"rank slot {r.slot} died unexpectedly ({what}); see {r.err}")

    def all_ok_at(self, ranks, world, since):
        got = {}
        for r in ranks:
            e = r.first(since, ok_step_at(world, since))
            if e is None:
                return None
            got[r.slot] = e["t_ms"]
        return got


def run(args):
    mem, fds, memp, memp_gone, fdk = [], {}, {}, set(), {}  # the samples after each round
    settled = {}  # pid -> open fds after --settle-s

    def settle():
        # --settle-s: one more fd sample of every rank still alive after S s without faults, so
        # a resource that lingers for a while after each view (a connection timing out) tells
        # itself apart from one that is never given back
        if args.settle_s <= 0 or job.failures or not fds:
            return
        log(f"settle: {args.settle_s} s without faults, then the last fd sample")
        time.sleep(args.settle_s)
        for r in job.live():
            if r.proc.pid in fds:
                settled[r.proc.pid] = r.fds()
                fdk.setdefault(r.proc.pid, {})["settled"] = r.fd_kinds()
    job = Job(args)
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    etcd, endpoints = start_etcd(args.etcd_bin, args.work)
    job.env.update({"EEP_JOB": f"gpu-elastic-{os.getpid()}", "EEP_ETCD_ENDPOINTS": endpoints,
                    "EEP_AGENT_LEASE_TTL_S": "3", "EEP_AGENT_RDMA": "0",
                    # a communicator that cannot form (a member gone during its creation) fails
                    # in 20 s instead of the default 120 s
                    "EEP_INIT_TIMEOUT_MS": "20000", "EEP_LOG_LEVEL": "info"})
    if not args.gpus:
        # N ranks' kernels share the GPU and wait for one another: every block of every rank
        # must be resident at once (a rank that filled the GPU would keep the others' from
        # starting): 4 sending + 8 copying SMs a rank
        job.env.update({"EEP_EP_NUM_SMS": os.environ.get("EEP_EP_NUM_SMS", "12"),
                        "EEP_EP_COPY_SMS": os.environ.get("EEP_EP_COPY_SMS", "8")})
    eenv = dict(job.env)
    eenv.update({"EEP_EEPD_ID": "eepd-0", "EEP_EEPD_LISTEN": f"127.0.0.1:{free_port()}",
                 "EEP_EEPD_SETTLE_MS": str(args.settle_ms), "EEP_EEPD_NUM_EXPERTS": "12",
                 "EEP_EEPD_LEASE_TTL_S": "3"})
    eepd = subprocess.Popen([args.eepd_bin], stdout=open(os.path.join(args.work, "eepd.log"), "w"),
                            stderr=subprocess.STDOUT, env=eenv, start_new_session=True)
    summary = {"steps": args.steps, "layout": args.layout, "mode": args.mode,
               "ranks": args.ranks, "timeout_ms": args.timeout_ms,
               "rounds": [], "failures": job.failures}
    try:
        t0 = now_ms()
        # One rank at a time, each joining a running job (a grow): ranks that start together see
        # views of 1, 2, 3 ... members in quick succession, and one that skips a view leaves the
        # others of that view waiting in their communicator's creation (known limit).
        for i in range(args.ranks):
            job.spawn()
            got = wait_for(lambda: job.all_ok_at(job.ranks, i + 1, 0), args.start_s, 0.1)
            job.check_crashes()
            if not got:
                job.failures.append(f"start: the {i + 1} ranks did not all run an ok step at world "
                                    f"{i + 1} within {args.start_s} s")
                return summary
            log(f"start: {i + 1} rank(s) running after {now_ms() - t0} ms")
        summary["start_ms"] = max(got.values()) - t0
        log(f"{args.ranks} ranks running at world {args.ranks} after {summary['start_ms']} ms")
        kinds = [("barrier", "KILL"), ("barrier", "STOP")]
        if args.steps == "moe":
            # each MoE step opens with a barrier (eep-rank --moe-barrier): kills in all three
            kinds = [("dispatch", "KILL"), ("combine", "KILL"), ("barrier", "KILL"),
                     ("dispatch", "STOP"), ("combine", "STOP"), ("barrier", "STOP")]
        deadline_end = time.time() + args.budget_s
        # rounds of earlier calls (--merge) count toward --rounds: this call runs the rest
        done = {}
        for rd in args.prior_rounds:
            done[(rd["phase"], rd["signal"])] = done.get((rd["phase"], rd["signal"]), 0) + 1
        for k in range(args.rounds):
            for phase, sig in kinds:
                if done.get((phase, sig), 0) + k >= args.rounds:
                    continue
                if time.time() > deadline_end:
                    summary["stopped_early"] = (f"the budget of {args.budget_s} s was spent before "
                                                f"round {k + 1} of {phase}/{sig}: raise --budget-s "
                                                f"for all {args.rounds} rounds of each kind")
                    raise StopIteration
                rd = one_round(job, k, phase, sig)
                rd["call"] = args.call
                summary["rounds"].append(rd)
                job.check_crashes()
                time.sleep(args.settle_round_s)
                mem.append(gpu_used_mib())
                live = {r.proc.pid for r in job.live()}
                for pid, mib in gpu_used_by_pid().items():
                    memp.setdefault(pid, []).append(mib)
                    if pid not in live:
                        memp_gone.add(pid)
                for r in job.live():
                    fds.setdefault(r.proc.pid, []).append(r.fds())
                    # the kinds at the sample the drift starts from (the second) and the latest
                    by_kind = fdk.setdefault(r.proc.pid, {})
                    by_kind["first" if len(fds[r.proc.pid]) <= 2 else "last"] = r.fd_kinds()
                log(f"round {k + 1} {phase}/{sig}: " + json.dumps(
                    {x: rd.get(x) for x in ("ok", "victim", "detect_ms", "interrupt_ms", "grow_ms")}))
                if job.failures:
                    raise StopIteration
        settle()
    except StopIteration:
        settle()
    finally:
        summary["fds_settled_by_pid"] = {str(p): v for p, v in settled.items()}
        summary["gpu_mem_used_mib"] = mem
        summary["fds_by_pid"] = {str(p): v for p, v in fds.items()}
        summary["fd_kinds_by_pid"] = {str(p): v for p, v in fdk.items()}
        summary["gpu_mem_by_pid"] = {str(p): v for p, v in memp.items()}
        summary["gpu_mem_pids_not_ranks"] = sorted(memp_gone)
        for r in job.ranks:
            if r.alive():
                r.expect_death = True
                try:
                    os.killpg(r.proc.pid, signal.SIGCONT)
                    os.killpg(r.proc.pid, signal.SIGTERM)
                except OSError:
                    pass
        for r in job.ranks:
            try:
                r.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(r.proc.pid, signal.SIGKILL)
                r.proc.wait()
        for p in (eepd, etcd):
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
    return summary


def one_round(job, k, phase, sig):
    args = job.args
    n = args.ranks
    live = job.live()
    rd = {"round": k + 1, "phase": phase, "signal": sig, "ok": False}
    if len(live) != n:
        job.failures.append(f"round {k + 1}: {len(live)} live ranks, expected {n}")
        return rd
    victim = live[k % n]
    rd["victim"] = victim.slot
    survivors = [r for r in live if r is not victim]
    with open(victim.arm, "w") as f:
        f.write(f"{phase} {sig}\n")
    victim.expect_death = True
    t_arm = now_ms()
    os.kill(victim.proc.pid, signal.SIGUSR1)
    dying = wait_for(lambda: victim.first(t_arm, lambda e: e.get("event") == "dying"), 10)
    if not dying:
        job.failures.append(f"round {k + 1}: rank slot {victim.slot} never launched a {phase} "
                            f"kernel after being armed (10 s)")
        return rd
    t_kill = dying["t_ms"]
    if sig == "KILL":
        try:
            victim.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            job.failures.append(f"round {k + 1}: the victim did not die of its SIGKILL")
            return rd

    # every survivor notices (a fault, or the view without the victim), then runs at world n-1
    def noticed():
        ts = []
        for r in survivors:
            e = r.first(t_kill, lambda e: e.get("event") == "fault" or
                        (e.get("event") == "view" and e.get("world") == n - 1))
            if e is None:
                return None
            ts.append(e["t_ms"])
        return ts
    seen = wait_for(noticed, args.deadline_s)
    if not seen:
        job.failures.append(f"round {k + 1} ({phase}/{sig}): a survivor saw nothing within "
                            f"{args.deadline_s} s (hang)")
        return rd
    rd["detect_ms"] = max(seen) - t_kill
    oks = wait_for(lambda: job.all_ok_at(survivors, n - 1, t_kill), args.deadline_s)
    if not oks:
        job.failures.append(f"round {k + 1} ({phase}/{sig}): survivors not all running at world "
                            f"{n - 1} within {args.deadline_s} s")
        return rd
    rd["interrupt_ms"] = max(oks.values()) - t_kill
    views = [r.first(t_kill, lambda e: e.get("event") == "view" and e.get("world") == n - 1)
             for r in survivors]
    rd["shrink_action"] = sorted({v.get("action") for v in views if v})
    rd["apply_ms_max"] = max((v.get("apply_ms", 0) for v in views if v), default=None)

    # grow back: a newcomer (KILL) or the woken zombie, which must be fenced first (STOP)
    t_grow = now_ms()
    if sig == "KILL":
        job.spawn()
    else:
        os.killpg(victim.proc.pid, signal.SIGCONT)
        victim.expect_death = False
    full = wait_for(lambda: job.all_ok_at(job.live(), n, t_grow) if len(job.live()) == n else None,
                    args.deadline_s + 30)
    if not full:
        job.failures.append(f"round {k + 1} ({phase}/{sig}): not back to {n} ranks within "
                            f"{args.deadline_s + 30} s")
        return rd
    rd["grow_ms"] = max(full.values()) - t_grow
    if sig == "STOP":
        f = victim.first(t_grow, lambda e: e.get("event") == "fenced")
        rd["zombie_fenced"] = f is not None
        if f is None:
            job.failures.append(f"round {k + 1}: the woken victim never reported itself fenced")
            return rd
    wrong = [r.slot for r in job.ranks if r.poll() is not None and r.bad]
    if wrong:
        job.failures.append(f"round {k + 1}: wrong step results on rank slots {sorted(set(wrong))}")
        return rd
    rd["ok"] = True
    return rd


def kinds_moved(a, b):
    """'kind n -> m' for every fd kind whose count differs between samples a and b."""
    moved = sorted(n for n in set(a) | set(b) if b.get(n, 0) != a.get(n, 0))
    return ", ".join(f"{n} {a.get(n, 0)} -> {b.get(n, 0)}" for n in moved) or "no kind moved"


def fd_verdict(summary, tol):
    """The open-fd lines of the report and the failure, if any.  A rank alive for 3 rounds or
    more drifts by its last sample minus its second (the first is before warm-up ends); with a
    settle sample (--settle-s) the verdict is on that one, the last round's drift still shown."""
    lines = []
    series = {p: v for p, v in summary.get("fds_by_pid", {}).items() if len(v) >= 3}
    if not series:
        return lines, None
    settled = summary.get("fds_settled_by_pid", {})
    kinds = summary.get("fd_kinds_by_pid", {})

    def judge(end, key, head, at="", trail=""):
        """The worst |drift| to the sample end(pid, series) gives, its line, and the kinds that
        moved for that rank from the second sample to its kinds[key]."""
        p, d = max(((p, end(p, v) - v[1]) for p, v in series.items()), key=lambda x: abs(x[1]))
        lines.append(f"{head}: worst drift {d}{at} -> {'flat' if abs(d) <= tol else 'GROWING'}"
                     f"{trail}")
        k = kinds.get(p, {})
        if k.get("first") is not None and k.get(key) is not None:
            lines.append(f"fds of rank pid {p} by kind, second sample -> {key}: " +
                         kinds_moved(k["first"], k[key]))
        return d
    verdict = summary["fd_drift_max"] = judge(lambda p, v: v[-1], "last",
                                              "open fds of ranks alive >= 3 rounds",
                                              at=" at the last round")
    if settled:
        verdict = summary["fd_drift_settled_max"] = judge(
            lambda p, v: settled.get(p, v[-1]), "settled", "after --settle-s",
            trail=f" (ranks sampled: {len(settled)})")
    if abs(verdict) > tol:
        return lines, f"open fds drifted by {verdict}" + (" after the settle" if settled else "")
    return lines, None


def report(summary, args):
    # this call's rounds after every earlier call's (--merge): the figures cover them all;
    # memory and fd drift are this call's (its processes)
    summary["rounds"] = list(args.prior_rounds) + summary["rounds"]
    summary["failures"] = list(args.prior_failures) + summary["failures"]
    summary["calls"] = args.call
    rounds = summary["rounds"]
    moe = (f" (--layout {summary.get('layout', 'expert')} --mode "
           f"{summary.get('mode', 'no-cpu-sync')})" if summary["steps"] == "moe" else "")
    lines = [f"make gpu-elastic: {summary['ranks']} ranks on one GPU, --steps {summary['steps']}"
             f"{moe}, device-wait deadline {summary['timeout_ms']} ms",
             f"{'kind':18} {'rounds ok':>9} {'detect med/max ms':>18} {'interrupt med/max ms':>21} "
             f"{'grow med/max ms':>16}"]
    kinds = []
    for rd in rounds:
        if (rd["phase"], rd["signal"]) not in kinds:
            kinds.append((rd["phase"], rd["signal"]))
    agg = {}
    for kind in kinds:
        rs = [rd for rd in rounds if (rd["phase"], rd["signal"]) == kind]
        d, i, g = (stats([rd.get(x) for rd in rs]) for x in ("detect_ms", "interrupt_ms", "grow_ms"))
        agg[f"{kind[0]}/{kind[1]}"] = {"rounds": len(rs), "ok": sum(rd["ok"] for rd in rs),
                                       "detect_ms": d, "interrupt_ms": i, "grow_ms": g}
        lines.append(f"{kind[0] + '/' + kind[1]:18} {sum(rd['ok'] for rd in rs):>4}/{len(rs):<4} "
                     f"{str(d['median']) + ' / ' + str(d['max']):>18} "
                     f"{str(i['median']) + ' / ' + str(i['max']):>21} "
                     f"{str(g['median']) + ' / ' + str(g['max']):>16}")
    summary["by_kind"] = agg
    alld, alli, allg = (stats([rd.get(x) for rd in rounds]) for x in ("detect_ms", "interrupt_ms", "grow_ms"))
    summary["all"] = {"detect_ms": alld, "interrupt_ms": alli, "grow_ms": allg}
    goals = {"detect_ms": 1000, "interrupt_ms": 1500, "grow_ms": 1500}
    for key, goal in goals.items():
        m = summary["all"][key]["max"]
        lines.append(f"goal {key[:-3]} < {goal} ms: max {m} -> "
                     f"{'met' if m is not None and m < goal else 'NOT met'}")
    # a loss is meant to be applied in place (ncclCommShrink); "fresh" is the view machine's
    # fallback (a new communicator from the root's id) and counts as a failure of the check
    acts = {}
    for rd in rounds:
        for a in rd.get("shrink_action") or []:
            acts[a] = acts.get(a, 0) + 1
    if acts:
        summary["loss_actions"] = acts
        lines.append("views after a loss applied by: " +
                     ", ".join(f"{a} in {c} round(s)" for a, c in sorted(acts.items())))
        if any(a != "shrink" for a in acts):
            summary["failures"].append("a loss was applied by a fresh communicator, not by "
                                       "ncclCommShrink (see the survivors' logs)")
    mem = summary.get("gpu_mem_used_mib", [])
    if len(mem) >= 3:
        drift = mem[-1] - mem[1]
        summary["gpu_mem_drift_mib"] = drift
        lines.append(f"GPU memory used after each round (MiB): first {mem[0]}, last {mem[-1]}, "
                     f"drift after round 2: {drift} -> {'flat' if abs(drift) <= args.mem_tol_mib else 'GROWING'}")
        if abs(drift) > args.mem_tol_mib:
            summary["failures"].append(f"GPU memory drifted {drift} MiB over the rounds")
    byp = summary.get("gpu_mem_by_pid", {})
    if byp:
        lines.append("GPU memory by process after each round (MiB): " +
                     "; ".join(f"{p}: {v[0]}..{v[-1]} ({len(v)} rounds)" for p, v in byp.items()))
        if summary.get("gpu_mem_pids_not_ranks"):
            lines.append("GPU memory held by processes that are not live ranks: pids "
                         f"{summary['gpu_mem_pids_not_ranks']} (the MPS server, or dead ranks)")
    fd_lines, fd_failure = fd_verdict(summary, args.fd_tol)
    lines += fd_lines
    if fd_failure:
        summary["failures"].append(fd_failure)
    ok = not summary["failures"] and rounds and all(rd["ok"] for rd in rounds)
    summary["result"] = "PASS" if ok else "FAIL"
    if summary.get("stopped_early"):
        lines.append(f"NOTE: {summary['stopped_early']}")
    lines += [f"FAIL: {f}" for f in summary["failures"]]
    lines.append(f"RESULT: {summary['result']} ({sum(rd['ok'] for rd in rounds)}/{len(rounds)} rounds ok"
                 + (f", over {args.call} calls" if args.call > 1 else "") + ")")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "summary.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(text, end="")
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rank-bin", required=True)
    p.add_argument("--eepd-bin", required=True)
    p.add_argument("--etcd-bin", default="etcd")
    p.add_argument("--work", required=True, help="rank logs and the etcd data")
    p.add_argument("--out", required=True, help="summary.txt and summary.json")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--gpus", type=int, default=0,
                   help="one rank per GPU on G GPUs, NVLink peers of one NCCL node (a newcomer "
                        "takes its victim's GPU); 0: every rank on the one GPU, each its own node")
    p.add_argument("--rounds", type=int, default=20, help="rounds of each kind")
    p.add_argument("--steps", choices=["barrier", "moe"], default="barrier")
    p.add_argument("--layout", choices=["expert", "rank"], default="expert",
                   help="eep-rank --layout of MoE steps")
    p.add_argument("--mode", choices=["no-cpu-sync", "cpu-sync", "cached"],
                   default="no-cpu-sync", help="eep-rank --mode of MoE steps")
    p.add_argument("--interval-ms", type=int, default=10)
    p.add_argument("--timeout-ms", type=int, default=500, help="device-wait deadline")
    p.add_argument("--settle-ms", type=int, default=50, help="eepd's settle time")
    p.add_argument("--deadline-s", type=int, default=15, help="per stage of a round")
    p.add_argument("--start-s", type=int, default=180, help="first steps (JIT compiles)")
    p.add_argument("--budget-s", type=int, default=480)
    p.add_argument("--settle-round-s", type=float, default=1.5)
    p.add_argument("--mem-tol-mib", type=int, default=256)
    p.add_argument("--fd-tol", type=int, default=8)
    p.add_argument("--settle-s", type=float, default=0,
                   help="after the rounds, S s without faults before a last fd sample, which the "
                        "fd verdict then judges (0: none; the last round's sample is judged)")
    p.add_argument("--merge", metavar="SUMMARY_JSON",
                   help="an earlier call's summary.json (it holds every call before it too): its "
                        "rounds count toward --rounds of each kind and join the figures, its "
                        "failures stay failures; this call runs only the rounds still missing")
    args = p.parse_args()
    if args.ranks < 2:
        p.error("--ranks must be at least 2")
    if args.gpus and not args.ranks <= args.gpus:
        p.error(f"--gpus {args.gpus}: one rank per GPU, so --ranks {args.ranks} is too many")
    if args.gpus < 0 or args.gpus == 1:
        p.error(f"--gpus {args.gpus}: 2 or more (0, the default, puts every rank on one GPU)")
    args.prior_rounds, args.prior_failures, args.call = [], [], 1
    if args.merge:
        try:
            with open(args.merge) as f:
                prior = json.load(f)
        except (OSError, ValueError) as e:
            p.error(f"--merge {args.merge}: {e}")
        was = (prior.get("steps"), prior.get("layout", "expert"), prior.get("mode", "no-cpu-sync"),
               prior.get("ranks"))
        if was != (args.steps, args.layout, args.mode, args.ranks):
            p.error(f"--merge {args.merge}: --steps %s --layout %s --mode %s --ranks %s there, "
                    f"--steps {args.steps} --layout {args.layout} --mode {args.mode} --ranks "
                    f"{args.ranks} here" % was)
        args.call = int(prior.get("calls", 1)) + 1
        args.prior_rounds = [dict(rd, call=rd.get("call", 1)) for rd in prior.get("rounds", [])]
        args.prior_failures = [f if f.startswith("call ") else f"call {args.call - 1}: {f}"
                               for f in prior.get("failures", [])]
    # a timeout's SIGTERM ends the run through run()'s clean-up: no rank left running
    signal.signal(signal.SIGTERM, lambda sig, frame: sys.exit(128 + sig))
    try:
        summary = run(args)
    except RuntimeError as e:
        summary = {"steps": args.steps, "layout": args.layout, "mode": args.mode,
                   "ranks": args.ranks, "timeout_ms": args.timeout_ms,
                   "rounds": [], "failures": [str(e)]}
    sys.exit(report(summary, args))


if __name__ == "__main__":
    main()
