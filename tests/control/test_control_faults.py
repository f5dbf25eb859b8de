#!/usr/bin/env python3
"""test_control_faults.py - issue 25's bad-data and fault cases that fit `make test`.

Real etcd, eepd and eep-agent processes on 127.0.0.1; every wait bounded; each case is counted
by tests/run.sh (cmocka-style lines).  Run one case with CONTROL_TEST_CASES=name.
  cli_numbers        (#12) eepctl --from/--count/--timeout-ms and eep-agent --ttl reject bad
                     numbers with exit 2 and a message naming the flag
  agent_json         (#11) eep-agent prints valid JSON for ids and reasons with quotes, newlines,
                     control bytes and UTF-8
  epoch_forged       (#7) a forged view/current at epoch 2^64-1 (and one 10^9 ahead): agents and
                     eepd ignore it, the next view follows the real epochs
  epoch_not_reused   (#6) short history, view/current deleted, eepd restarted: the next epoch
                     follows the highest one etcd still shows
  current_garbage    (#5) random bytes, empty, JSON, 1.3 MiB, 40k forged members, a delete in
                     view/current: each time a join after it is published
  member_oversized   (#8) an 800 KiB member field is refused naming the member, views go on; a
                     view over EEP_EEPD_MAX_VIEW_BYTES is not published and the log names its
                     largest member
  agent_pause_view   (#4) an agent SIGSTOPped while a view holding it is published, continued after
                     its lease expired (eepd stopped meanwhile): it reports lease_lost before
                     any view, never a rank on a view its lease no longer backs
  big_prefix         (#9) 1300 members and 100 kept views (a prefix over 4 MiB): a fresh eepd
                     reads it, leads and publishes; Health's etcd_ok turns false while etcd is
                     stopped and true again after
  api_during_outage  (#10) etcd SIGSTOPped 5 s: every Health and GetStatus call to either
                     replica (2 s deadline, a Cordon waiting on etcd meanwhile) answers, and
                     Health says etcd_ok false
  etcd_mtls          etcd over https with client certificates: eepd and agents with the test
                     CA's client certificate publish and join; an agent without one, or with a
                     rogue CA's, cannot join
  leader_stale_events (#1) etcd SIGSTOPped 5 s past the leader lease, then an unleased value put
                     into the leader key and deleted: afterwards one replica leads and publishes
Exit 0 pass, 1 fail, 77 skip.
"""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from eepd_testlib import (BIN, Agent, Eepd, Etcd, check, make_pki, need,  # noqa: E402
                          pb_member, pb_view, run_cases, wait_for)

EEPCTL = os.path.join(BIN, "eepctl")
AGENT = os.path.join(BIN, "eep-agent")
_etcd = []


def etcd():
    if not _etcd:
        _etcd.append(Etcd(1))
    return _etcd[0]


def case_cli_numbers():
    bad = [
        ([EEPCTL, "watch", "--from", "-1"], "--from"),
        ([EEPCTL, "watch", "--from", "abc"], "--from"),
        ([EEPCTL, "watch", "--from", "18446744073709551615"], "--from"),
        ([EEPCTL, "watch", "--count", "abc"], "--count"),
        ([EEPCTL, "watch", "--count", "0"], "--count"),
        ([EEPCTL, "watch", "--count", "-3"], "--count"),
        ([EEPCTL, "--timeout-ms", "abc", "health"], "--timeout-ms"),
        ([EEPCTL, "--timeout-ms", "-5", "health"], "--timeout-ms"),
        ([EEPCTL, "--timeout-ms", "5x", "health"], "--timeout-ms"),
        ([EEPCTL, "--timeout-ms", "", "health"], "--timeout-ms"),
        ([AGENT, "--ttl", "0"], "--ttl"),
        ([AGENT, "--ttl", "-1"], "--ttl"),
        ([AGENT, "--ttl", "abc"], "--ttl"),
        ([AGENT, "--ttl", "99999999999"], "--ttl"),
    ]
    # No server anywhere: a flag that is not rejected makes the tool try to connect (or wait).
    env = dict(os.environ, EEP_ETCD_ENDPOINTS="127.0.0.1:1", EEP_ETCD_TIMEOUT_MS="300")
    for args, flag in bad:
        try:
            argv = args[:1] + ["--addr", "127.0.0.1:1"] + args[1:] if args[0] == EEPCTL else args
            r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=5)
        except subprocess.TimeoutExpired:
            raise AssertionError("%s: still running after 5 s (the bad number was accepted)"
                                 % " ".join(args[1:]))
        check(r.returncode == 2, "%s: exit %d, not 2 (stderr %r)" % (" ".join(args[1:]),
                                                                    r.returncode, r.stderr))
        check(flag in r.stderr, "%s: the message does not name %s: %r" % (" ".join(args[1:]),
                                                                          flag, r.stderr))
    # Good numbers still parse (the call itself then fails: exit 1, nothing listens).
    r = subprocess.run([EEPCTL, "--addr", "127.0.0.1:1", "--timeout-ms", "200", "health"],
                       capture_output=True, text=True, timeout=10)
    check(r.returncode == 1, "a good --timeout-ms: exit %d, not 1" % r.returncode)


def case_agent_json():
    e = etcd()
    job = "json%d" % os.getpid()
    weird_id = 'a"b\\c\nd\te\x01f'
    reason = 'said "hi"\r\n\x7f \u20ac'
    view = pb_view(1, [weird_id, "plain"], reason=reason)
    # (Invalid UTF-8 cannot get this far: protobuf-c refuses such a View; test_tool covers the
    # emitter's U+FFFD.)
    # Written as eepd publishes (views/<N> and view/current in one txn): a fresh agent takes
    # view/current only when views/<N> has the same revision.
    e.put_many([("/eep/%s/views/%020d" % (job, 1), view), ("/eep/%s/view/current" % job, view)])
    a = Agent(e, job, 5, "json")
    wait_for(lambda: a.views() or a.bad_lines, 15, "the agent's view line")
    with a.lock:
        bad = list(a.bad_lines)
    check(not bad, "eep-agent printed invalid JSON: %r" % bad)
    v = a.views()[0]
    check(v["members"] == [weird_id, "plain"], "member ids round-trip: %r" % v["members"])
    check(v["reason"] == reason, "reason: %r" % v["reason"])
    check(all(isinstance(x.get("member"), str) for x in a.evs()), "member fields are strings")


def job_name(tag):
    return "%s%d" % (tag, os.getpid())


def all_in_view(agents, timeout, what):
    """Wait until every agent's newest view holds exactly the agents (each with a rank)."""
    ids = lambda: sorted(a.member() or "" for a in agents)  # noqa: E731
    return wait_for(lambda: all(a.in_view() and sorted(a.last_view()["members"]) == ids()
                                for a in agents), timeout, what)


def log_of(d):
    with open(d.log, "rb") as f:
        return f.read().decode(errors="replace")


def check_epochs(agents, limit=2**53):
    for a in agents:
        eps = [v["epoch"] for v in a.views()]
        check(all(b > x for x, b in zip(eps, eps[1:])), "epochs not increasing: %r" % eps)
        check(all(x < limit for x in eps), "an agent took an epoch >= 2^53: %r" % eps)


def case_epoch_forged():
    e = etcd()
    job = job_name("forged")
    d = Eepd(e, job, "f1")
    agents = [Agent(e, job, 5, "f%d" % i) for i in range(2)]
    all_in_view(agents, 15, "two agents in a view")
    real = agents[0].last_view()["epoch"]
    for forged in (2**64 - 1, real + 10**9):
        e.put_bytes("/eep/%s/view/current" % job, pb_view(forged, [a.member() for a in agents]))
        agents.append(Agent(e, job, 5, "f%d" % len(agents)))
        all_in_view(agents, 15, "a join published after a forged epoch %d" % forged)
    check_epochs(agents)
    last = agents[0].last_view()["epoch"]
    check(real < last < real + 50, "epochs went from %d to %d" % (real, last))
    check("implausible" in log_of(d), "eepd does not log the implausible epoch")


def case_epoch_not_reused():
    e = etcd()
    job = job_name("hist")
    extra = {"EEP_EEPD_VIEW_HISTORY": "2"}
    d = Eepd(e, job, "h1", extra)
    agents = []
    for i in range(3):
        agents.append(Agent(e, job, 5, "h%d" % i))
        all_in_view(agents, 15, "%d agents in a view" % len(agents))
    high = agents[0].last_view()["epoch"]
    check(high >= 3, "three joins gave epoch %d" % high)
    d.proc.kill()
    d.proc.wait()
    e.delete("/eep/%s/view/current" % job)
    d2 = Eepd(e, job, "h2", extra)
    agents.append(Agent(e, job, 5, "h3"))
    all_in_view(agents, 20, "a join after the restart")
    check_epochs(agents)
    for line in log_of(d2).split("\n"):
        if "published view " in line:
            ep = int(line.split("published view ")[1].split(":")[0])
            check(ep > high, "eepd published epoch %d again (highest was %d)" % (ep, high))


def case_current_garbage():
    e = etcd()
    job = job_name("garbage")
    d = Eepd(e, job, "g1")
    agents = [Agent(e, job, 5, "g%d" % i) for i in range(2)]
    all_in_view(agents, 15, "two agents in a view")
    key = "/eep/%s/view/current" % job
    kinds = [
        ("random bytes", b"\x08\xff\xff\xff" + bytes(range(7, 250))),
        ("empty", b""),
        ("json", b'{"epoch": 99, "members": []}'),
        ("1.3 MiB", b"\x0a" + b"\xff" * (1300 * 1024)),
        ("40k forged members", None),
        ("deleted", "delete"),
    ]
    for what, value in kinds:
        if value == "delete":
            e.delete(key)
        elif value is None:
            cur = max(a.last_view()["epoch"] for a in agents)
            e.put_bytes(key, pb_view(cur + 1, ["forged-%d" % i for i in range(40000)]))
        else:
            e.put_bytes(key, value)
        agents.append(Agent(e, job, 5, "g%d" % len(agents)))
        all_in_view(agents, 20, "a join published after %s in view/current" % what)
    check_epochs(agents)


def case_member_oversized():
    e = etcd()
    job = job_name("big")
    d = Eepd(e, job, "b1")
    agents = [Agent(e, job, 5, "b%d" % i) for i in range(2)]
    all_in_view(agents, 15, "two agents in a view")
    e.put_bytes("/eep/%s/members/forged-big" % job,
                pb_member("forged-big", host="h" * (800 * 1024)))
    agents.append(Agent(e, job, 5, "b2"))
    all_in_view(agents, 15, "a join published beside an 800 KiB member")
    log = log_of(d)
    check("member forged-big: value over EEP_EEPD_MAX_MEMBER_BYTES" in log, "eepd does not name the member")

    # A view over the stated limit is not published; the error names its largest member.
    job2 = job_name("bigview")
    d2 = Eepd(e, job2, "v1", {"EEP_EEPD_MAX_VIEW_BYTES": "1024"})
    e.put_bytes("/eep/%s/members/forged-wide" % job2, pb_member("forged-wide", nics=["n%02d" % i + "w" * 57 for i in range(30)]))
    a = Agent(e, job2, 5, "v0")
    wait_for(lambda: "over EEP_EEPD_MAX_VIEW_BYTES" in log_of(d2), 15, "the view size error")
    check("largest member forged-wide" in log_of(d2), "the error does not name the member")
    check(not a.views(), "a view over the limit was published")
    e.delete("/eep/%s/members/forged-wide" % job2)
    all_in_view([a], 15, "the view once the wide member is gone")


def case_agent_pause_view():
    e = etcd()
    job = job_name("pause")
    d = Eepd(e, job, "p1")
    victim = Agent(e, job, 2, "pv")
    other = Agent(e, job, 10, "po")
    all_in_view([victim, other], 15, "two agents in a view")
    old_id = victim.member()
    victim.signal(signal.SIGSTOP)
    t_stop = time.monotonic()
    joiner = Agent(e, job, 10, "pj")
    wait_for(lambda: other.last_view() and joiner.member() in other.last_view()["members"] and
             old_id in other.last_view()["members"], 10, "a view with the stopped agent")
    check(time.monotonic() - t_stop < 1.8, "the view came too late to hold the stopped agent")
    d.proc.send_signal(signal.SIGSTOP)  # no later view: the queued one is the newest
    try:
        wait_for(lambda: not e.keys("/eep/%s/members/%s" % (job, old_id)), 10,
                 "the stopped agent's lease to expire")
        n_before = len(victim.evs())
        victim.signal(signal.SIGCONT)
        wait_for(lambda: victim.evs("lease_lost"), 10, "lease_lost after SIGCONT")
        time.sleep(0.5)
        after = victim.evs()[n_before:]
        for ev in after:
            if ev["event"] == "lease_lost":
                break
            check(not (ev["event"] == "view" and ev["rank"] >= 0),
                  "a view with rank %d (epoch %d) was handed out after the lease expired, "
                  "before lease_lost" % (ev["rank"], ev["epoch"]))
    finally:
        d.proc.send_signal(signal.SIGCONT)
    all_in_view([victim, other, joiner], 15, "the rejoined agent in a view")


def case_big_prefix():
    from concurrent.futures import ThreadPoolExecutor
    e = etcd()
    job = job_name("bigprefix")
    pre = "/eep/%s/" % job
    ids = ["m%04d-%s" % (i, "x" * 24) for i in range(1300)]
    view = pb_view(1, ids[1:], reason="old")  # the kept views lack one member: 101 adds it
    check(len(view) * 100 > 4 * 1024 * 1024, "the prefix must exceed 4 MiB")
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda m: e.put_bytes(pre + "members/" + m,
                                            pb_member(m, host="h-" + m, pid=1000 + len(m))),
                      ids))
        list(pool.map(lambda n: e.put_bytes(pre + "views/%020d" % n, pb_view(n, ids[1:])),
                      range(1, 101)))
    e.put_bytes(pre + "view/current", pb_view(100, ids[1:]))
    d = Eepd(e, job, "p1", {"EEP_EEPD_MAX_VIEW_BYTES": "8388608"})
    wait_for(lambda: (d.health() or {}).get("is_leader"), 20, "eepd to lead over a 6 MiB prefix")
    h = d.health()
    check(h["etcd_ok"], "health says etcd is not ok: %r" % h)
    wait_for(lambda: "published view 101" in log_of(d), 20, "view 101 (after the 100 kept)")
    # Health tells the truth: etcd stopped -> etcd_ok false (from the lease's keepalive), then
    # true again.
    os.kill(e.procs[0].pid, signal.SIGSTOP)
    try:
        wait_for(lambda: (d.health() or {"etcd_ok": True}).get("etcd_ok") is False, 10,
                 "etcd_ok false while etcd is stopped")
    finally:
        os.kill(e.procs[0].pid, signal.SIGCONT)
    wait_for(lambda: (d.health() or {}).get("etcd_ok"), 10, "etcd_ok again")


def case_api_during_outage():
    import threading
    e = etcd()
    job = job_name("outage")
    reps = [Eepd(e, job, "o1"), Eepd(e, job, "o2")]
    a = Agent(e, job, 10, "o0")
    all_in_view([a], 15, "an agent in a view")
    failures, answers = [], []

    def call(d, what):
        t = time.monotonic()
        r = d.ctl("--json", what, check_rc=False)
        dt = time.monotonic() - t
        if r.returncode != 0:
            failures.append("%s %s: exit %d after %.1f s: %s" % (d.id, what, r.returncode, dt,
                                                                  r.stderr.strip()[-200:]))
        else:
            answers.append((d.id, what, r.stdout))

    os.kill(e.procs[0].pid, signal.SIGSTOP)
    try:
        # Writes wait on etcd; the loop must not (their own failure is fine here).
        writers = [threading.Thread(target=lambda d=d: d.ctl("cordon", a.member(),
                                                              check_rc=False))
                   for d in reps]
        for w in writers:
            w.start()
        end = time.monotonic() + 5
        while time.monotonic() < end:
            ts = [threading.Thread(target=call, args=(d, w)) for d in reps
                  for w in ("health", "status")]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            time.sleep(0.3)
    finally:
        os.kill(e.procs[0].pid, signal.SIGCONT)
    for w in writers:
        w.join()
    check(not failures, "%d of %d calls failed during the outage: %s"
          % (len(failures), len(failures) + len(answers), failures[:3]))
    import json as _json
    late = [_json.loads(out) for (rid, what, out) in answers[-4:] if what == "health"]
    check(any(not h["etcd_ok"] for h in late), "health says etcd_ok during the outage: %r" % late)
    wait_for(lambda: all((d.health() or {}).get("etcd_ok") for d in reps), 15, "etcd_ok again")
    wait_for(lambda: len(leaders(reps)) == 1, 15, "one leader after the outage")


def case_etcd_mtls():
    import shutil
    if shutil.which("openssl") is None:
        print("skip: openssl is not installed")
        return
    p = make_pki("pki-etcd")
    e = Etcd(1, "t", pki=p)
    job = job_name("mtls")
    d = Eepd(e, job, "t1")
    agents = [Agent(e, job, 5, "t%d" % i) for i in range(2)]
    all_in_view(agents, 20, "two agents in a view over mutual TLS")
    check((d.health() or {}).get("etcd_ok"), "eepd's health over TLS")
    for what, env in (("no client certificate", {"EEP_ETCD_CERT": "", "EEP_ETCD_KEY": ""}),
                      ("a rogue CA's certificate", {"EEP_ETCD_CERT": p("badclient.pem"),
                                                    "EEP_ETCD_KEY": p("badclient.key")})):
        r = subprocess.run([AGENT, "--ttl", "5"], env=dict(os.environ, EEP_JOB=job,
                           EEP_ETCD_ENDPOINTS=e.endpoints(), EEP_ETCD_TIMEOUT_MS="1000",
                           EEP_ETCD_CA=p("ca.pem"), **env), capture_output=True, text=True,
                           timeout=20)
        check(r.returncode == 1 and "cannot join" in r.stderr,
              "an agent with %s: exit %d %r" % (what, r.returncode, r.stderr[-300:]))


def leaders(reps):
    out = []
    for d in reps:
        h = d.health()
        if h and h["is_leader"]:
            out.append(d.id)
    return out


def case_leader_stale_events():
    e = etcd()
    job = job_name("stale")
    extra = {"EEP_EEPD_LEASE_TTL_S": "3"}
    reps = [Eepd(e, job, "s1", extra), Eepd(e, job, "s2", extra)]
    agents = [Agent(e, job, 10, "s0")]
    all_in_view(agents, 15, "an agent in a view")
    key = "/eep/%s/leader" % job
    for rnd in range(2):
        os.kill(e.procs[0].pid, signal.SIGSTOP)
        time.sleep(5)
        os.kill(e.procs[0].pid, signal.SIGCONT)
        wait_for(lambda: len(leaders(reps)) == 1, 15, "one leader after etcd's pause (%d)" % rnd)
        # Stay led: a leader key held by nobody's live lease, or nobody leading, fails here.
        time.sleep(4)
        ls = leaders(reps)
        check(len(ls) == 1, "round %d: leaders %r after the pause" % (rnd, ls))
        lk = e.get_bytes(key)
        check(lk is not None and lk.decode() == ls[0], "leader key %r, leader %r" % (lk, ls))
        agents.append(Agent(e, job, 10, "s%d" % len(agents)))
        all_in_view(agents, 15, "a join published after etcd's pause (%d)" % rnd)
    # An unleased value put into the leader key, then deleted.
    e.put_bytes(key, b"intruder")
    time.sleep(0.5)
    e.delete(key)
    wait_for(lambda: len(leaders(reps)) == 1, 10, "one leader after the intruder")
    time.sleep(3)
    check(len(leaders(reps)) == 1, "leaders %r after the intruder" % leaders(reps))
    agents.append(Agent(e, job, 10, "s%d" % len(agents)))
    all_in_view(agents, 15, "a join published after the intruder")


def main():
    need(["etcd", "etcdctl", EEPCTL, AGENT, os.path.join(BIN, "eepd")])
    return run_cases([
        ("cli_numbers", case_cli_numbers),
        ("agent_json", case_agent_json),
        ("epoch_forged", case_epoch_forged),
        ("epoch_not_reused", case_epoch_not_reused),
        ("current_garbage", case_current_garbage),
        ("member_oversized", case_member_oversized),
        ("agent_pause_view", case_agent_pause_view),
        ("big_prefix", case_big_prefix),
        ("api_during_outage", case_api_during_outage),
        ("etcd_mtls", case_etcd_mtls),
        ("leader_stale_events", case_leader_stale_events),
    ])


if __name__ == "__main__":
    sys.exit(main())
