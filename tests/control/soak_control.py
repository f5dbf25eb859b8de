#!/usr/bin/env python3
"""soak_control.py - `make soak-control`: the control plane under a seeded schedule of faults.

A 3-member etcd, two eepd replicas and five agents on 127.0.0.1; for SOAK_SECONDS (180)
one fault every 3-6 s, drawn from SOAK_SEED (1): kill -9 of the eepd leader (restarted),
SIGSTOP of an etcd member for 3 s, kill -9 of an etcd member (restarted 3 s later; one member
down at a time, so quorum holds), SIGSTOP of an agent past its TTL, kill -9 of an agent (a new
one replaces it), and garbage in view/current (random bytes, a forged epoch 2^64-1, a delete).
At the end (after 10 s of quiet): every epoch published once (eepd logs) and views/ strictly
increasing, each agent's epochs strictly increasing, every live agent on the newest view that
holds exactly the live agents, and no leaderless period longer than one leader lease plus the
settle window (+0.5 s of polling slack).  Prints the numbers; exit 0 pass, 1 fail, 77 skip.
"""
import os
import random
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from eepd_testlib import (BIN, Agent, Eepd, Etcd, check, need, run_main,  # noqa: E402
                          wait_for)

LEASE_S, SETTLE_MS, AGENT_TTL = 2, 300, 3


def main():
    need(["etcd", "etcdctl", os.path.join(BIN, "eepd"), os.path.join(BIN, "eep-agent"),
          os.path.join(BIN, "eepctl")])
    seconds = float(os.environ.get("SOAK_SECONDS", "180"))
    seed = int(os.environ.get("SOAK_SEED", "1"))
    rng = random.Random(seed)
    job = "soak%d" % os.getpid()
    e = Etcd(3, "s")
    extra = {"EEP_EEPD_LEASE_TTL_S": str(LEASE_S), "EEP_EEPD_SETTLE_MS": str(SETTLE_MS)}
    reps = {"r1": Eepd(e, job, "r1", extra), "r2": Eepd(e, job, "r2", extra)}
    logs = [d.log for d in reps.values()]  # every replica process has its own log
    agents = [Agent(e, job, AGENT_TTL, "a%d" % i) for i in range(5)]
    dead_agents = []
    wait_for(lambda: all(a.in_view() for a in agents), 30, "5 agents in a view")

    # Leaderless periods, from Health on every replica every 0.2 s.
    stop = threading.Event()
    gaps, state = [], {"since": None}

    def monitor():
        while not stop.is_set():
            t = time.monotonic()
            led = any((d.health() or {}).get("is_leader") for d in list(reps.values()))
            if led and state["since"] is not None:
                gaps.append(t - state["since"])
                state["since"] = None
            elif not led and state["since"] is None:
                state["since"] = t
            stop.wait(0.2)

    mon = threading.Thread(target=monitor, daemon=True)
    mon.start()
    counts = {}
    key = "/eep/%s/view/current" % job
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        act = rng.choice(["leader_kill", "etcd_stop", "etcd_kill", "agent_stop", "agent_kill",
                          "garbage"])
        counts[act] = counts.get(act, 0) + 1
        if act == "leader_kill":
            lid = next((i for i, d in reps.items() if (d.health() or {}).get("is_leader")), None)
            if lid is not None:
                reps[lid].proc.kill()
                reps[lid].proc.wait()
                time.sleep(1)
                reps[lid] = Eepd(e, job, lid, extra)
                logs.append(reps[lid].log)
        elif act in ("etcd_stop", "etcd_kill"):
            i = rng.randrange(3)
            if act == "etcd_stop":
                os.kill(e.procs[i].pid, signal.SIGSTOP)
                time.sleep(3)
                os.kill(e.procs[i].pid, signal.SIGCONT)
            else:
                e.kill(i)
                time.sleep(3)
                e.restart(i)
        elif act == "agent_stop":
            a = rng.choice(agents)
            a.signal(signal.SIGSTOP)
            time.sleep(AGENT_TTL + 1)
            a.signal(signal.SIGCONT)
        elif act == "agent_kill":
            a = rng.choice(agents)
            a.proc.kill()
            agents.remove(a)
            dead_agents.append(a)
            agents.append(Agent(e, job, AGENT_TTL, "n%d" % len(dead_agents)))
        else:
            g = rng.choice([bytes(rng.randrange(256) for _ in range(64)), b"\x08" + b"\xff" * 9 +
                            b"\x01", None])
            if g is None:
                e.delete(key)
            else:
                e.put_bytes(key, g)
        time.sleep(rng.uniform(3, 6))
    # Quiet: everything must converge.
    try:
        wait_for(lambda: all(a.in_view() for a in agents) and
                 len(set(a.last_view()["epoch"] for a in agents)) == 1 and
                 sorted(agents[0].last_view()["members"]) == sorted(a.member() for a in agents),
                 30, "every agent on one newest view of exactly the live agents")
    finally:
        time.sleep(1)
        stop.set()
        mon.join()
    if state["since"] is not None:
        gaps.append(time.monotonic() - state["since"])
    newest = agents[0].last_view()["epoch"]
    published = []
    for path in logs:
        with open(path, "rb") as f:
            for line in f.read().decode(errors="replace").split("\n"):
                if "published view " in line:
                    published.append(int(line.split("published view ")[1].split(":")[0]))
    dup = sorted(set(x for x in published if published.count(x) > 1))
    hist = sorted(int(k.rsplit("/", 1)[1]) for k in e.keys("/eep/%s/views/" % job))
    bad_agents = []
    for a in agents + dead_agents:
        eps = [v["epoch"] for v in a.views()]
        if not all(y > x for x, y in zip(eps, eps[1:])):
            bad_agents.append(eps)
    worst = max(gaps) if gaps else 0.0
    print("soak: seed %d, %.0f s, faults %s" % (seed, seconds, counts))
    print("soak: %d views published (newest %d), every epoch once: %s; leaderless periods %d, "
          "longest %.2f s (bound %.2f s)" % (len(published), newest, "yes" if not dup else dup,
                                              len(gaps), worst,
                                              LEASE_S + SETTLE_MS / 1000.0 + 0.5), flush=True)
    check(not dup, "epochs published twice: %s" % dup)
    check(hist == sorted(set(hist)) and (not hist or hist[-1] == newest),
          "views/ history %s, newest view %d" % (hist[-5:], newest))
    check(not bad_agents, "an agent's epochs went back: %s" % bad_agents[:1])
    check(worst <= LEASE_S + SETTLE_MS / 1000.0 + 0.5, "a leaderless period of %.2f s" % worst)
    return 0


if __name__ == "__main__":
    run_main(main)
