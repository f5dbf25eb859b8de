#!/usr/bin/env python3
"""The Python membership path end to end on the GPU machine (scripts/gpu-python.sh members):
etcd and one eepd on 127.0.0.1, then Python ranks on the one GPU, each an elasticep.Membership
and a Buffer(membership=...) running MoE steps; one rank is SIGKILLed (the survivors must shrink
and step on), then a newcomer joins (back to full size).

Every step checks itself without knowing the others' inputs: each token goes to K=2 distinct
experts with weight 0.5 and the expert is the identity, so combine(dispatch(x)) must equal x
bitwise (0.5 x + 0.5 x is exact).  8 experts on 3 ranks: an uneven placement (3, 3, 2).

Driver (default): needs --eepd-bin and --etcd-bin (the device bundle's), runs inside
scripts/one-gpu-cluster.sh --ranks 1 (the NCCL/plugin environment), prints PASS/FAIL lines and
"RESULT: N passed, M failed".  Worker (--worker): one rank, JSON lines on stdout.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))

E, T, H, K = 8, 32, 512, 2


def emit(**kw):
    from eep_procs import now_ms  # the driver's clock: its "since" compares with these
    kw["t_ms"] = now_ms()
    print(json.dumps(kw), flush=True)


def worker(args):
    import torch
    import elasticep

    m = elasticep.Membership(lease_ttl_s=3)
    buf = elasticep.Buffer(None, T, H, K, E, membership=m, max_world=args.max_world,
                           timeout_ms=2000, join_timeout_ms=120000)
    emit(event="joined", member=m.member_id, rank=buf.rank, world=buf.world)
    step, end = 0, time.time() + args.seconds
    while time.time() < end:
        info = buf.membership_sync()
        if info.fenced:
            emit(event="fenced", epoch=info.epoch)
            time.sleep(0.1)
            continue
        g = torch.Generator().manual_seed(info.epoch * 1000003 + step * 131 + info.rank)
        x = torch.randn(T, H, generator=g).to(torch.bfloat16).cuda()
        idx = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)]).cuda()
        w = torch.full((T, K), 0.5, dtype=torch.float32).cuda()
        phase = "dispatch"
        try:
            rx, _, _, _, h, _ = buf.dispatch(x, idx, w, mode="cpu_sync")
            phase = "combine"
            out, _ = buf.combine(rx.contiguous(), h)
            torch.cuda.synchronize()
            # a kernel that gave up on a dead peer finishes without an error of its own: the
            # runtime's fault record says the step's output is void (PeerLost, below)
            buf.poll()
            ok = bool(torch.equal(out, x))
            emit(event="step", ok=int(ok), epoch=info.epoch, world=info.world, rank=info.rank,
                 step=step, local=info.local_experts, **({} if ok else {"bad": "out != x"}))
        except elasticep.PeerLost as e:
            emit(event="fault", phase=phase, epoch=info.epoch, error=str(e)[:200])
            try:
                buf.membership_fault(phase)
            except elasticep.EEPError as e2:
                emit(event="fault_report", error=str(e2)[:200])
            time.sleep(0.05)
        except elasticep.GroupLost as e:  # a handle of the old view: the next sync moves on
            emit(event="group_lost", error=str(e)[:200])
        step += 1
    buf.destroy()
    m.close()
    return 0


class Job:
    def __init__(self, args, env, work):
        from eep_procs import JsonProc
        self.JsonProc, self.args, self.env, self.work = JsonProc, args, env, work
        self.ranks, self.slot = [], 0

    def spawn(self):
        e = dict(self.env)
        e["NCCL_HOSTID"] = "eep-py-members-%d-%d" % (os.getpid(), self.slot)
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--max-world",
               str(self.args.ranks), "--seconds", str(self.args.seconds)]
        r = self.JsonProc("rank-%d" % self.slot, cmd, e, self.work)
        self.slot += 1
        self.ranks.append(r)
        return r

    def live(self):
        return [r for r in self.ranks if r.alive()]

    def all_ok_at(self, ranks, world, since):
        for r in ranks:
            if r.first(since, lambda e: e.get("event") == "step" and e.get("ok") == 1 and
                       e.get("world") == world) is None:
                return False
        return True


def driver(args):
    from eep_procs import free_port, now_ms, start_etcd, wait_for
    results = []

    def report(what, ok, detail=""):
        results.append(bool(ok))
        print("%s %s%s" % ("PASS" if ok else "FAIL", what, ": " + detail if detail else ""),
              flush=True)

    os.makedirs(args.work, exist_ok=True)
    etcd, endpoints = start_etcd(args.etcd_bin, args.work)
    env = dict(os.environ)
    for k in ("EEP_RANK", "EEP_WORLD_SIZE", "EEP_BOOTSTRAP", "ONE_GPU_CLUSTER_DIR"):
        env.pop(k, None)
    env.update({"EEP_JOB": "py-members-%d" % os.getpid(), "EEP_ETCD_ENDPOINTS": endpoints,
                "EEP_AGENT_LEASE_TTL_S": "3", "EEP_AGENT_RDMA": "0", "EEP_INIT_TIMEOUT_MS": "20000",
                "EEP_LOG_LEVEL": "info"})
    eenv = dict(env)
    eenv.update({"EEP_EEPD_ID": "eepd-0", "EEP_EEPD_LISTEN": "127.0.0.1:%d" % free_port(),
                 "EEP_EEPD_SETTLE_MS": "50", "EEP_EEPD_NUM_EXPERTS": str(E),
                 "EEP_EEPD_LEASE_TTL_S": "3"})
    eepd = subprocess.Popen([args.eepd_bin], stdout=open(os.path.join(args.work, "eepd.log"), "w"),
                            stderr=subprocess.STDOUT, env=eenv, start_new_session=True)
    job = Job(args, env, args.work)
    try:
        t0 = now_ms()
        for i in range(args.ranks):  # one at a time, each a grow of the running job
            job.spawn()
            got = wait_for(lambda: job.all_ok_at(job.ranks, i + 1, 0), args.start_s, 0.1)
            report("start: %d rank(s) step correctly at world %d" % (i + 1, i + 1), got,
                   "%d ms" % (now_ms() - t0))
            if not got:
                return 1
        victim = job.ranks[-1]
        t_kill = now_ms()
        victim.signal(signal.SIGKILL)
        victim.expect_death = True
        survivors = [r for r in job.ranks if r is not victim]
        got = wait_for(lambda: job.all_ok_at(survivors, args.ranks - 1, t_kill), 30, 0.05)
        report("kill: the survivors step correctly at world %d" % (args.ranks - 1), got,
               "%d ms after the SIGKILL" % (now_ms() - t_kill))
        t_new = now_ms()
        job.spawn()
        got = wait_for(lambda: job.all_ok_at(job.live(), args.ranks, t_new), 90, 0.05)
        report("grow: a newcomer joins, all step correctly at world %d" % args.ranks, got,
               "%d ms after its start" % (now_ms() - t_new))
        bad = [(r.name, e) for r in job.ranks for e in r.poll()
               if e.get("event") == "step" and e.get("ok") != 1]
        report("no step was wrong", not bad, str(bad[:3]) if bad else "")
        crashed = [r.name for r in job.ranks
                   if not r.expect_death and r.returncode() not in (None, 0)]
        report("no rank crashed", not crashed, str(crashed) if crashed else "")
        return 0 if all(results) else 1
    finally:
        for r in job.ranks:
            r.stop(5)
        for p in (eepd, etcd):
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        print("RESULT: %d passed, %d failed" % (results.count(True), results.count(False)),
              flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--worker", action="store_true")
    p.add_argument("--ranks", type=int, default=3)
    p.add_argument("--max-world", type=int, default=3)
    p.add_argument("--seconds", type=int, default=240, help="how long a worker steps")
    p.add_argument("--start-s", type=int, default=120, help="per rank's first steps (JIT)")
    p.add_argument("--eepd-bin")
    p.add_argument("--etcd-bin", default="etcd")
    p.add_argument("--work", default="/tmp/eep-py-members")
    args = p.parse_args()
    if args.worker:
        return worker(args)
    if not args.eepd_bin:
        p.error("--eepd-bin is required (the device bundle's build/bin/eepd)")
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
