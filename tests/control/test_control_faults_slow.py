#!/usr/bin/env python3
"""test_control_faults_slow.py - issue 25's slower etcd fault cases (`make test-faults`).

Real etcd, eepd and eep-agent processes on 127.0.0.1, real signals, every wait bounded; each
case is counted by tests/run.sh.  Run one case with CONTROL_TEST_CASES=name.
  etcd_restart       (#2) etcd killed and restarted on its data dir after the agents' TTL: the
                     agents rejoin as new members and no view ever holds their old ids (etcd
                     restores the old leases, so the agents must revoke them first)
  raft_election      (#3) 3-member etcd, its raft leader killed (and restarted) three times: no
                     agent lease (TTL 2 s) and not eepd's leader lease is lost, and a join right
                     after each election is published within 2 s
  leader_killed      (#3) 3-member etcd at etcd's default raft timings (1 s election timeout),
                     its raft leader SIGKILLed three times: etcd answers nothing for 1-2 s, more
                     than TTL - TTL/3 at a 2 s TTL; no agent lease and not eepd's leader lease is
                     lost, and a join right after each election takes under 1 s more than one
                     without (fails on the keepalive that gave a lease up one TTL after its last
                     answer)
  leader_stopped     (#3) the raft leader SIGSTOPped: 1 s (< TTL - TTL/3) costs nothing; 2.5 s
                     (> TTL): what etcd 3.4 itself revokes once the old leader wakes, shown with
                     etcdctl's own keepalives beside ours; no key deleted during the stop, and no
                     agent counts its lease lost unless etcd deleted its key
Exit 0 pass, 1 fail, 77 skip.
"""
import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from eepd_testlib import (BIN, Agent, Eepd, Etcd, check, need, run_cases,  # noqa: E402
                          spawn, tmp, wait_for)


def all_in_view(agents, timeout, what):
    ids = lambda: sorted(a.member() or "" for a in agents)  # noqa: E731
    return wait_for(lambda: all(a.in_view() and sorted(a.last_view()["members"]) == ids()
                                for a in agents), timeout, what)


def case_etcd_restart():
    e = Etcd(1, "r")
    job = "restart%d" % os.getpid()
    d = Eepd(e, job, "r1")  # noqa: F841 - serves the job
    n, ttl = 4, 5
    agents = [Agent(e, job, ttl, "r%d" % i) for i in range(n)]
    all_in_view(agents, 20, "%d agents in a view" % n)
    old = set(a.member() for a in agents)
    seen = [len(a.views()) for a in agents]
    e.kill()
    time.sleep(ttl + 0.5)  # the agents count their leases lost; etcd keeps them on disk
    e.restart()
    wait_for(lambda: all(a.member() not in old for a in agents), 30, "every agent rejoined")
    all_in_view(agents, 30, "a view of the rejoined agents")
    time.sleep(ttl + 1)  # an old lease etcd restored would have shown by now
    for a, k in zip(agents, seen):
        for v in a.views()[k:]:
            check(v["n"] <= n, "a view of %d ranks after the restart (%d agents live): %s"
                  % (v["n"], n, v["members"]))
            stale = old & set(v["members"])
            check(not stale, "view %d holds old ids %s" % (v["epoch"], sorted(stale)))
    keys = e.keys("/eep/%s/members/" % job)
    check(len(keys) == n, "%d member keys in etcd, %d agents" % (len(keys), n))


def case_raft_election():
    e = Etcd(3, "q")
    job = "raft%d" % os.getpid()
    d = Eepd(e, job, "q1", {"EEP_EEPD_LEASE_TTL_S": "3"})
    agents = [Agent(e, job, 2, "q%d" % i) for i in range(4)]
    all_in_view(agents, 20, "4 agents in a view")
    won = open(d.log).read().count("is the leader")
    lost_total, joins = 0, []
    for rnd in range(3):
        victim = e.raft_leader()
        e.kill(victim)
        time.sleep(3)  # more than an agent TTL after the raft leader died
        joiner = Agent(e, job, 2, "j%d" % rnd)
        t = time.monotonic()
        agents.append(joiner)
        all_in_view(agents, 15, "a join after raft election %d" % rnd)
        joins.append(time.monotonic() - t)
        e.restart(victim)
        time.sleep(1)
    for a in agents:
        lost_total += len(a.evs("lease_lost"))
    print("raft elections: %d agent leases lost, eepd elections won %d -> %d, joins %s s"
          % (lost_total, won, open(d.log).read().count("is the leader"),
             ", ".join("%.2f" % j for j in joins)), flush=True)
    check(lost_total == 0, "%d agent leases lost over 3 raft elections" % lost_total)
    check(open(d.log).read().count("is the leader") == won, "eepd lost and re-won its leader lease")
    check(max(joins) < 2.0, "a join after an election took %.2f s" % max(joins))


def case_leader_killed():
    # The fault at etcd's own raft timings (100 ms heartbeat, 1000 ms election timeout):
    # the raft leader SIGKILLed, three rounds.  The followers wait 1-2 s before they elect, so
    # the cluster answers no keepalive for longer than TTL - TTL/3 (1.33 s at a 2 s TTL): a
    # client that counts its lease lost one TTL after its last answered keepalive gives it up
    # while etcd still holds it (the new leader extends every lease by TTL + election timeout
    # when it takes over; the dead one revokes nothing).  The lease must ride over it: held as
    # unconfirmed, kept trying, confirmed again by the new leader's answer.
    ttl = int(os.environ.get("KILL_TTL", "2"))
    e = Etcd(3, "k", raft=(100, 1000))
    job = "kill%d" % os.getpid()
    d = Eepd(e, job, "k1", {"EEP_EEPD_LEASE_TTL_S": str(ttl)})
    wait_for(lambda: "is the leader" in open(d.log).read(), 20, "eepd to lead")
    agents = [Agent(e, job, ttl, "k%d" % i) for i in range(4)]
    all_in_view(agents, 20, "4 agents in a view")
    t = time.monotonic()
    agents.append(Agent(e, job, ttl, "k-base"))
    all_in_view(agents, 15, "a join without an election")
    base = time.monotonic() - t
    won = open(d.log).read().count("is the leader")
    elections, joins = [], []
    for rnd in range(3):
        victim = e.raft_leader()
        t = time.monotonic()
        e.kill(victim)
        wait_for(lambda: subprocess.run(
            ["etcdctl", "--endpoints", e.endpoints(skip=(victim,)), "--dial-timeout", "1s",
             "--command-timeout", "1s", "put", "/eep-test-ready", "1"], capture_output=True,
            env=dict(os.environ, ETCDCTL_API="3")).returncode == 0, 30,
            "a new raft leader after kill %d" % rnd)
        elections.append(time.monotonic() - t)
        t = time.monotonic()
        agents.append(Agent(e, job, ttl, "k-join%d" % rnd))
        all_in_view(agents, 15, "a join after raft election %d" % rnd)
        joins.append(time.monotonic() - t)
        time.sleep(ttl + 1)  # a lease lost to the election is reported by now
        e.restart(victim)
        time.sleep(1)
    lost = [(a.member(), len(a.evs("lease_lost"))) for a in agents if a.evs("lease_lost")]
    rewon = open(d.log).read().count("is the leader") - won
    print("raft leader killed 3 times (etcd 100/1000 ms, TTL %d s): writes again after %s s; "
          "agent leases lost %s; eepd leader lease re-won %d time(s); join %.2f s without an "
          "election, %s s after" % (ttl, ", ".join("%.2f" % x for x in elections), lost, rewon,
                                    base, ", ".join("%.2f" % j for j in joins)), flush=True)
    check(not lost, "%d of %d agents lost their lease over 3 raft leader kills"
          % (len(lost), len(agents)))
    check(rewon == 0, "eepd lost and re-won its leader lease %d time(s)" % rewon)
    check(max(joins) < base + 1.0, "a join after an election took %.2f s (%.2f s without one)"
          % (max(joins), base))


def case_leader_stopped():
    # A SIGSTOPped raft leader: its sockets stay open and answer nothing; the others elect.
    # Round 1 stops it for 1 s, less than TTL - TTL/3: every lease was refreshed on it at most
    # TTL/3 before the stop, so on its own clock none expires before it wakes, and no lease may
    # be lost (the client moves on from the hung member after TTL/12).  Round 2 stops it for
    # 2.5 s, more than the TTL: etcd 3.4.23's old leader wakes still primary in its lessor,
    # finds leases expired on its clock although the new leader kept them alive, and its
    # revocations are committed through the new leader (etcd-io/etcd#15247, mitigated later by
    # "ignore old leader's leases revoking request", etcd-io/etcd#16822).  No client can stop
    # that; round 2 shows the loss is etcd's: leases that etcdctl (etcd's own client) keeps
    # alive through the two other members only are revoked alike, nothing is deleted while the
    # old leader is stopped, and an agent counts its lease lost only once etcd deleted its key.
    ttl = 2
    e = Etcd(3, "s")
    job = "stop%d" % os.getpid()
    victim = e.raft_leader()
    first = ",".join(["127.0.0.1:%d" % e.client[victim]] +
                     ["127.0.0.1:%d" % p for j, p in enumerate(e.client) if j != victim])
    d = Eepd(e, job, "s1", {"EEP_EEPD_LEASE_TTL_S": str(ttl), "EEP_ETCD_ENDPOINTS": first})
    wait_for(lambda: "is the leader" in open(d.log).read(), 20, "eepd to lead")
    agents = [Agent(e, job, ttl, "s%d" % k, {"EEP_ETCD_ENDPOINTS": first}) for k in range(3)]
    all_in_view(agents, 20, "3 agents in a view")
    env = dict(os.environ, ETCDCTL_API="3")

    def ctl(eps, *args):
        return subprocess.run(["etcdctl", "--endpoints", eps, "--dial-timeout", "1s",
                               "--command-timeout", "2s"] + list(args), env=env,
                              capture_output=True, text=True)

    # Deletions as they happen, seen by a watch on one member that is never stopped.
    events = []
    watch = spawn(["etcdctl", "--endpoints", "127.0.0.1:%d" % e.client[(victim + 1) % 3],
                   "watch", "--prefix", "/"], env={"ETCDCTL_API": "3"}, stdout=subprocess.PIPE,
                  log=tmp("stop-watch.log"))

    def follow():
        for line in iter(watch.stdout.readline, b""):
            events.append((time.monotonic(), line.decode(errors="replace").strip()))
    threading.Thread(target=follow, daemon=True).start()
    time.sleep(0.5)

    def deleted():  # keys deleted so far, with when: a watch prints "DELETE" then the key
        out = []
        for i in range(len(events) - 1):
            if events[i][1] == "DELETE":
                out.append((events[i + 1][0], events[i + 1][1]))
        return out

    def stop(i, secs):
        os.kill(e.procs[i].pid, signal.SIGSTOP)
        t = time.monotonic()
        try:
            time.sleep(secs)
        finally:
            os.kill(e.procs[i].pid, signal.SIGCONT)
        wait_for(lambda: ctl(e.endpoints(), "put", "/eep-test-ready", "1").returncode == 0, 30,
                 "etcd to serve after the stop")
        return t

    won = open(d.log).read().count("is the leader")
    stop(victim, 1.0)
    time.sleep(ttl + 1)
    lost1 = [a.member() for a in agents if a.evs("lease_lost")]
    gone1 = [k for _, k in deleted()]
    rewon1 = open(d.log).read().count("is the leader") - won
    print("round 1, raft leader stopped 1.0 s (TTL %d s): agent leases lost %d, keys deleted "
          "%s, eepd leader lease re-won %d time(s)" % (ttl, len(lost1), gone1, rewon1), flush=True)
    check(not lost1 and not gone1 and rewon1 == 0,
          "a 1 s stop of the raft leader (< TTL - TTL/3) cost leases: agents %s, keys %s, "
          "eepd re-won %d" % (lost1, gone1, rewon1))

    # Round 2: etcd's own client beside ours, through the members that are not stopped.
    victim = e.raft_leader()
    others = e.endpoints(skip=(victim,))
    keys = []
    for k in range(3):
        r = ctl(others, "lease", "grant", str(ttl))
        lid = r.stdout.split()[1]  # "lease 694d77aa9e38a0c1 granted with TTL(2s)"
        key = "/stoptest/%s/%d" % (job, k)
        check(ctl(others, "put", "--lease=" + lid, key, "x").returncode == 0, "put " + key)
        spawn(["etcdctl", "--endpoints", others, "lease", "keep-alive", lid],
              env={"ETCDCTL_API": "3"})
        keys.append(key)
    ids = {a.member(): a for a in agents}
    before = {a.member(): len(a.evs("lease_lost")) for a in agents}
    time.sleep(1.0)
    n0 = len(deleted())
    t_stop = time.monotonic()
    os.kill(e.procs[victim].pid, signal.SIGSTOP)
    try:
        time.sleep(2.5)
    finally:
        os.kill(e.procs[victim].pid, signal.SIGCONT)
    t_cont = time.monotonic()
    wait_for(lambda: ctl(e.endpoints(), "put", "/eep-test-ready", "1").returncode == 0, 30,
             "etcd to serve after the stop")
    time.sleep(ttl + 1)
    dels = deleted()[n0:]
    during = [(round(t - t_stop, 2), k) for t, k in dels if t < t_cont]
    after = [(round(t - t_cont, 2), k) for t, k in dels if t >= t_cont]
    # A burst right at the wake-up is the old leader's revocations; later ones are the new
    # leader expiring leases whose keepalives did not reach it (etcdctl's client waits on a
    # follower that forwards to the stopped leader for etcd's request timeout, ~6 s).
    woke = [k for t, k in after if t < 0.5]
    ctl_woke = [k for k in woke if k in keys]
    ctl_later = [k for t, k in after if t >= 0.5 and k in keys]
    member_gone = set(k.rsplit("/", 1)[1] for _, k in after if "/members/" in k)
    lost2 = [m for m, a in ids.items() if len(a.evs("lease_lost")) > before[m]]
    print("round 2, raft leader stopped 2.5 s (TTL %d s): deleted while stopped %s; deleted "
          "after it woke (s after SIGCONT, key) %s; etcdctl's own leases: %d of %d revoked as "
          "the old leader woke, %d expired later; agent leases lost %d of %d"
          % (ttl, during, after, len(ctl_woke), len(keys), len(ctl_later), len(lost2),
             len(ids)), flush=True)
    check(not during, "etcd deleted keys while its old raft leader was stopped: %s" % during)
    check(all(m in member_gone for m in lost2),
          "agents %s counted their lease lost though etcd kept their keys" %
          [m for m in lost2 if m not in member_gone])
    watch.kill()


def main():
    need(["etcd", "etcdctl", os.path.join(BIN, "eepd"), os.path.join(BIN, "eep-agent"),
          os.path.join(BIN, "eepctl")])
    return run_cases([
        ("etcd_restart", case_etcd_restart),
        ("raft_election", case_raft_election),
        ("leader_killed", case_leader_killed),
        ("leader_stopped", case_leader_stopped),
    ])


if __name__ == "__main__":
    sys.exit(main())
