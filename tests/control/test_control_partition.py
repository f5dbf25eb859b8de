#!/usr/bin/env python3
"""test_control_partition.py - issue 25: a network partition between an agent and etcd.

Two network namespaces made by the test, joined by a veth pair (10.200.X.1 and 10.200.X.2, X
from the pid, addresses of our own namespaces only): etcd, eepd and one agent ("stay") in the
first, one agent ("part") in the second, reaching etcd over the veth.  The link is set down for
longer than the agent TTL, then up again.  Checks: the cut-off agent reports its lease lost and
registers again as a new member; eepd publishes a view without it (seen by the agent that
stayed) and then one with its new id; every agent's epochs strictly increase (none reused);
nothing wedges (every wait is bounded).  Needs root and `ip netns`; else exit 77 with the reason.
The namespaces are deleted whatever happens (atexit and finally).
Exit 0 pass, 1 fail, 77 skip.
"""
import atexit
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eepd_testlib as T  # noqa: E402
from eepd_testlib import BIN, check, need, run_cases, spawn, tmp, wait_for  # noqa: E402

PID = os.getpid()
NS_E, NS_A = "eepE%d" % PID, "eepA%d" % PID
VETH_E, VETH_A = "eve%d" % (PID % 100000), "eva%d" % (PID % 100000)
NET = "10.200.%d" % (PID % 250 + 1)
ADDR_E, ADDR_A = NET + ".1", NET + ".2"
TTL = 2
_made = []


def ip(*args, check_rc=True):
    r = subprocess.run(["ip"] + list(args), capture_output=True, text=True, timeout=10)
    if check_rc and r.returncode != 0:
        raise AssertionError("ip %s: %s" % (" ".join(args), r.stderr.strip()))
    return r


def cleanup_ns():
    # The processes first (eepd_testlib's atexit runs after ours: registered earlier), then the
    # namespaces; deleting a namespace removes its end of the veth, and so the pair.
    for p in T._procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    for ns in reversed(_made):
        ip("netns", "del", ns, check_rc=False)
    del _made[:]


def make_net():
    if os.geteuid() != 0:
        T.skip("not root: network namespaces need CAP_SYS_ADMIN")
    r = subprocess.run(["ip", "netns", "add", NS_E], capture_output=True, text=True, timeout=10)
    if r.returncode != 0:
        T.skip("ip netns add is not permitted here: %s" % r.stderr.strip())
    _made.append(NS_E)
    ip("netns", "add", NS_A)
    _made.append(NS_A)
    ip("link", "add", VETH_E, "type", "veth", "peer", "name", VETH_A)
    ip("link", "set", VETH_E, "netns", NS_E)
    ip("link", "set", VETH_A, "netns", NS_A)
    for ns, dev, addr in ((NS_E, VETH_E, ADDR_E), (NS_A, VETH_A, ADDR_A)):
        ip("-n", ns, "link", "set", "lo", "up")
        ip("-n", ns, "addr", "add", addr + "/30", "dev", dev)
        ip("-n", ns, "link", "set", dev, "up")


def in_ns(ns, args):
    return ["ip", "netns", "exec", ns] + args


class NsAgent(T.Agent):
    """An eep-agent in namespace @p ns (eepd_testlib.Agent, started through ip netns exec)."""

    def __init__(self, ns, endpoint, job, name):
        self.started_ms = T.now_ms()
        self.events = []
        self.bad_lines = []
        self.lock = T.threading.Lock()
        env = {"EEP_ETCD_ENDPOINTS": endpoint, "EEP_JOB": job, "EEP_LOG_LEVEL": "info",
               "EEP_ETCD_TIMEOUT_MS": "1000"}
        self.log = tmp("agent-%s.log" % name)
        self.proc = spawn(in_ns(ns, [os.path.join(BIN, "eep-agent"), "--ttl", str(TTL)]),
                          env=env, log=self.log, stdout=subprocess.PIPE)
        T.threading.Thread(target=self._read, daemon=True).start()


def case_partition():
    make_net()
    job = "part%d" % PID
    ep = "%s:2379" % ADDR_E
    spawn(in_ns(NS_E, [
        "etcd", "--name", "p0", "--data-dir", tmp("p0.data"),
        "--listen-client-urls", "http://%s:2379,http://127.0.0.1:2379" % ADDR_E,
        "--advertise-client-urls", "http://%s:2379" % ADDR_E,
        "--listen-peer-urls", "http://127.0.0.1:2380",
        "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
        "--initial-cluster", "p0=http://127.0.0.1:2380", "--heartbeat-interval", "50",
        "--election-timeout", "500"]), log=tmp("etcd.log"))
    ctl = in_ns(NS_A, ["etcdctl", "--endpoints", ep, "--dial-timeout", "1s",
                       "--command-timeout", "2s", "put", "/eep-test-ready", "1"])
    wait_for(lambda: subprocess.run(ctl, env=dict(os.environ, ETCDCTL_API="3"),
                                    capture_output=True, timeout=10).returncode == 0, 30,
             "etcd to serve across the veth")
    spawn(in_ns(NS_E, [os.path.join(BIN, "eepd")]), env={
        "EEP_ETCD_ENDPOINTS": "127.0.0.1:2379", "EEP_JOB": job, "EEP_EEPD_LISTEN": "127.0.0.1:7070",
        "EEP_EEPD_ID": "p1", "EEP_EEPD_SETTLE_MS": "300", "EEP_EEPD_LEASE_TTL_S": "3",
        "EEP_EEPD_HZ": "50", "EEP_EEPD_NUM_EXPERTS": "16", "EEP_LOG_LEVEL": "info",
        "EEP_ETCD_TIMEOUT_MS": "2000"}, log=tmp("eepd.log"))
    stay = NsAgent(NS_E, "127.0.0.1:2379", job, "stay")
    part = NsAgent(NS_A, ep, job, "part")
    both = lambda: (stay.in_view() and part.in_view() and  # noqa: E731
                    sorted(stay.last_view()["members"]) == sorted([stay.member(), part.member()]))
    wait_for(both, 30, "both agents in one view")
    old = part.member()
    t_cut = time.monotonic()
    ip("-n", NS_E, "link", "set", VETH_E, "down")
    try:
        wait_for(lambda: stay.in_view() and old not in stay.last_view()["members"], 4 * TTL + 10,
                 "a view without the cut-off agent")
        t_without = time.monotonic() - t_cut
        wait_for(lambda: part.evs("lease_lost"), TTL + 5, "the cut-off agent to report its lease lost")
        t_lost = time.monotonic() - t_cut
        time.sleep(1)  # it tries to register again while cut off: bounded, no wedge
    finally:
        ip("-n", NS_E, "link", "set", VETH_E, "up")
    t_up = time.monotonic()
    wait_for(lambda: part.member() not in (None, old), 30, "the cut-off agent to register again")
    new = part.member()
    wait_for(lambda: both() and new in stay.last_view()["members"], 30,
             "a view with the agent's new id")
    wait_for(lambda: part.in_view() and part.last_view()["epoch"] == stay.last_view()["epoch"], 10,
             "both agents on the newest view")
    t_back = time.monotonic() - t_up
    for a, n in ((stay, "stay"), (part, "part")):
        eps = [v["epoch"] for v in a.views()]
        check(eps == sorted(set(eps)), "%s agent's epochs not strictly increasing: %s" % (n, eps))
        check(not a.bad_lines, "%s agent printed non-JSON: %r" % (n, a.bad_lines[:2]))
    before = max(v["epoch"] for v in part.views() if old in v["members"])
    after = min(v["epoch"] for v in part.views() if new in v["members"])
    check(after > before, "epoch %d with the new id is not above %d with the old" % (after, before))
    check(old not in stay.last_view()["members"], "the old id is back in the newest view")
    print("partition of %.1f s (agent TTL %d s): view without it after %.2f s, lease lost reported "
          "after %.2f s, rejoined and in the newest view %.2f s after the link came up; epochs "
          "%d -> %d" % (t_up - t_cut, TTL, t_without, t_lost, t_back, before, after), flush=True)


def main():
    need(["etcd", "etcdctl", "ip", os.path.join(BIN, "eepd"), os.path.join(BIN, "eep-agent")])
    atexit.register(cleanup_ns)
    try:
        return run_cases([("partition", case_partition)])
    finally:
        cleanup_ns()


if __name__ == "__main__":
    T.run_main(main)
