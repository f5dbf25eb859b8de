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
  member_stopped     (#3) 3-member etcd, its raft leader (every client's first endpoint)
                     SIGSTOPped for 1.5 s, longer than a keepalive interval (TTL/3) and shorter
                     than the TTL (2 s), three rounds: no agent lease and not eepd's leader lease
                     is lost (unanswered keepalives move on to the next endpoint at once; the TTL
                     counts from the last answer)
Exit 0 pass, 1 fail, 77 skip.
"""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from eepd_testlib import (BIN, Agent, Eepd, Etcd, check, need, run_cases,  # noqa: E402
                          wait_for)


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


def case_member_stopped():
    # The member every client talks to first is the raft leader; it hangs (SIGSTOP, not killed:
    # its sockets stay open and never answer) for longer than a keepalive interval and shorter
    # than the TTL.  The others elect a leader within ~1 s; until each follower has noticed, it
    # holds the keepalives it forwards to the stopped leader.  A keepalive must move on at once
    # after no answer, over and over, and count the TTL from the last answer: then it reaches
    # a follower that knows the new leader well within the TTL.
    e = Etcd(3, "s")
    job = "stop%d" % os.getpid()
    ttl = int(os.environ.get("STOP_TTL", "2"))  # a keepalive interval is TTL/3
    stop_s = float(os.environ.get("STOP_S", "1.5"))  # > TTL/3, < TTL

    def first(i):  # the endpoint list with member i first: the clients start there
        return ",".join(["127.0.0.1:%d" % e.client[i]] +
                        ["127.0.0.1:%d" % p for j, p in enumerate(e.client) if j != i])

    victim = e.raft_leader()
    d = Eepd(e, job, "s1", {"EEP_EEPD_LEASE_TTL_S": str(ttl), "EEP_ETCD_ENDPOINTS": first(victim)})
    wait_for(lambda: "is the leader" in open(d.log).read(), 20, "eepd to lead")
    won = open(d.log).read().count("is the leader")
    agents = []
    for rnd in range(3):
        victim = e.raft_leader()
        agents += [Agent(e, job, ttl, "s%d.%d" % (rnd, k), {"EEP_ETCD_ENDPOINTS": first(victim)})
                   for k in range(3)]
        all_in_view(agents, 20, "%d agents in a view before stop %d" % (len(agents), rnd))
        time.sleep(0.5)
        os.kill(e.procs[victim].pid, signal.SIGSTOP)
        try:
            time.sleep(stop_s)
        finally:
            os.kill(e.procs[victim].pid, signal.SIGCONT)
        wait_for(lambda: e.ctl("put", "/eep-test-ready", "1").returncode == 0, 20,
                 "etcd to serve after stop %d" % rnd)
        time.sleep(ttl + 0.5)  # a lease lost to the stop is reported by now
    lost = [(a.member(), len(a.evs("lease_lost"))) for a in agents if a.evs("lease_lost")]
    rewon = open(d.log).read().count("is the leader") - won
    print("raft leader stopped %.1f s (TTL %d s), 3 rounds: agent leases lost %s, eepd leader "
          "lease re-won %d time(s)" % (stop_s, ttl, lost, rewon), flush=True)
    check(not lost, "%d of %d agents lost their lease over 3 stops of the member they used"
          % (len(lost), len(agents)))
    check(rewon == 0, "eepd lost and re-won its leader lease %d time(s)" % rewon)


def case_followers_stopped():
    # Two followers of a 5-member etcd hang (SIGSTOP: their sockets stay open and never answer)
    # for longer than a keepalive interval and shorter than the TTL; they are every client's
    # first two endpoints (the clients know only the four followers), and the clients' channels
    # to both are connected (each follower was stopped alone before, in turn).  The cluster keeps its
    # quorum and its raft leader: no election, only the keepalive's failover is tested.  A
    # keepalive that waits a whole interval on each hung member spends 2 TTL/3 there plus its
    # backoff and loses the lease; one that moves on at once after TTL/12 does not.
    e = Etcd(5, "f")
    job = "fstop%d" % os.getpid()
    ttl = int(os.environ.get("STOP_TTL", "2"))
    stop_s = float(os.environ.get("STOP_S", "1.5"))  # > TTL/3, < TTL
    leader = e.raft_leader()
    fol = [i for i in range(5) if i != leader]  # the clients know only the followers
    a_, b_ = fol[0], fol[1]
    eps = ",".join("127.0.0.1:%d" % e.client[i] for i in fol)
    d = Eepd(e, job, "f1", {"EEP_EEPD_LEASE_TTL_S": str(ttl), "EEP_ETCD_ENDPOINTS": eps})
    wait_for(lambda: "is the leader" in open(d.log).read(), 20, "eepd to lead")
    agents = [Agent(e, job, ttl, "f%d" % k, {"EEP_ETCD_ENDPOINTS": eps}) for k in range(4)]
    all_in_view(agents, 20, "4 agents in a view")
    # Connect every client's channel to every follower, the keepalives back on the first: hang
    # each follower alone in turn (1 s, what both the old and the new keepalive ride over), so
    # the keepalives move round the list once.
    for i in fol:
        os.kill(e.procs[i].pid, signal.SIGSTOP)
        try:
            time.sleep(1.0)
        finally:
            os.kill(e.procs[i].pid, signal.SIGCONT)
        time.sleep(1.0)
    time.sleep(ttl)
    base = sum(len(a.evs("lease_lost")) for a in agents)
    won = open(d.log).read().count("is the leader")
    for rnd in range(2):
        for i in (a_, b_):
            os.kill(e.procs[i].pid, signal.SIGSTOP)
        try:
            time.sleep(stop_s)
        finally:
            for i in (a_, b_):
                os.kill(e.procs[i].pid, signal.SIGCONT)
        time.sleep(ttl + 0.5)  # a lease lost to the stop is reported by now
    lost = sum(len(a.evs("lease_lost")) for a in agents) - base
    rewon = open(d.log).read().count("is the leader") - won
    print("two of five followers stopped %.1f s together (TTL %d s), twice: %d agent leases lost "
          "(%d before, while one was stopped at a time), eepd leader lease re-won %d time(s)"
          % (stop_s, ttl, lost, base, rewon), flush=True)
    check(lost == 0, "%d agent leases lost while two followers were stopped" % lost)
    check(rewon == 0, "eepd lost and re-won its leader lease %d time(s)" % rewon)


def main():
    need(["etcd", "etcdctl", os.path.join(BIN, "eepd"), os.path.join(BIN, "eep-agent"),
          os.path.join(BIN, "eepctl")])
    return run_cases([
        ("etcd_restart", case_etcd_restart),
        ("raft_election", case_raft_election),
        ("member_stopped", case_member_stopped),
        ("followers_stopped", case_followers_stopped),
    ])


if __name__ == "__main__":
    sys.exit(main())
