#!/usr/bin/env python3
"""test_eepd_health.py - eepd's HTTP health endpoints, what the Kubernetes probes call (issue 28).

With one etcd and two replicas on 127.0.0.1:
  /healthz  200 with etcd_ok true on both, is_leader true on exactly the leader; the epoch of the
            current view;
  /livez    200;
  /metrics  still Prometheus text, with eepd_etcd_ok 1;
  etcd killed: /healthz turns 503 (etcd_ok false) within a bounded time while /livez stays 200;
  etcd back: /healthz 200 again;
  EEP_EEPD_METRICS_ADDR that is not an IPv4 address: eepd refuses to start and names the knob.
"""
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from eepd_testlib import BIN, Agent, Eepd, Etcd, check, need, run_main, wait_for  # noqa: E402


def get(port, path):
    """(HTTP code, body) of GET http://127.0.0.1:<port><path>."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=2) as f:
            return f.status, f.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def health(d):
    code, body = get(d.metrics, "/healthz")
    return code, json.loads(body)


def main():
    need(["etcd", "etcdctl", os.path.join(BIN, "eepd"), os.path.join(BIN, "eepctl"),
          os.path.join(BIN, "eep-agent")])
    job = "health%d" % os.getpid()
    etcd = Etcd(1)
    a = Eepd(etcd, job, "h1")
    wait_for(lambda: a.health()["is_leader"], 10, "h1 to lead")
    b = Eepd(etcd, job, "h2")
    agent = Agent(etcd, job, 2, "ha")
    wait_for(lambda: agent.in_view(), 10, "the agent in a view")
    epoch = agent.last_view()["epoch"]

    wait_for(lambda: health(a)[0] == 200 and health(b)[0] == 200, 5, "both /healthz 200")
    wait_for(lambda: health(a)[1]["epoch"] == epoch, 5, "/healthz epoch %d" % epoch)
    ha, hb = health(a)[1], health(b)[1]
    check(ha["etcd_ok"] and hb["etcd_ok"] and ha["status"] == "ok", "etcd_ok on both: %s %s"
          % (ha, hb))
    check(ha["is_leader"] and not hb["is_leader"], "is_leader on the leader only: %s %s"
          % (ha, hb))
    for d in (a, b):
        code, body = get(d.metrics, "/livez")
        check(code == 200 and json.loads(body)["status"] == "ok", "/livez: %d %s" % (code, body))
    code, text = get(a.metrics, "/metrics")
    check(code == 200 and "\neepd_etcd_ok 1\n" in text and "# TYPE eepd_is_leader gauge" in text,
          "/metrics: %d %s" % (code, text[:200]))
    check(get(a.metrics, "/nope")[0] == 404, "an unknown path is 404")

    # etcd gone: not ready (503), still alive
    etcd.kill(0)
    wait_for(lambda: health(a)[0] == 503 and health(b)[0] == 503, 15,
             "/healthz 503 on both without etcd")
    check(not health(a)[1]["etcd_ok"], "etcd_ok false without etcd")
    check(get(a.metrics, "/livez")[0] == 200, "/livez stays 200 during an etcd outage")
    etcd.restart(0)
    wait_for(lambda: health(a)[0] == 200 and health(b)[0] == 200, 20,
             "/healthz 200 again with etcd back")

    # a bad bind address is refused at start, naming the knob
    env = dict(os.environ, EEP_ETCD_ENDPOINTS=etcd.endpoints(), EEP_JOB=job,
               EEP_EEPD_LISTEN="127.0.0.1:0", EEP_EEPD_METRICS_PORT="1",
               EEP_EEPD_METRICS_ADDR="all-interfaces")
    r = subprocess.run([os.path.join(BIN, "eepd")], env=env, capture_output=True, text=True,
                       timeout=20)
    check(r.returncode != 0 and "EEP_EEPD_METRICS_ADDR" in r.stderr,
          "a bad EEP_EEPD_METRICS_ADDR: exit %d, stderr %r" % (r.returncode, r.stderr[-300:]))
    print("eepd health: /healthz follows etcd and names the leader, /livez stays up: ok")
    return 0


if __name__ == "__main__":
    run_main(main)
