#!/usr/bin/env python3
"""test_eepctl_top_ranks.py - `eepctl top`'s per-rank source against real etcd + eepd.

Four eep-agent processes stand for four ranks; three publish (--endpoint) the URL of a FAKE rank
metrics endpoint (a small HTTP server in this script on 127.0.0.1 serving fixed Prometheus text
in the shape control/rank/rank_metrics.c renders), the fourth a URL where nothing listens.  Once
the view is known, the fakes say that every rank waited longest for one rank (the "slowed" one,
as EEP_RANK_SLOW_MS makes a real eep-rank), and top must name it: per rank (waits_most_for) and
for the job (waited_for_most), in --json and on the screen; p50s come from the histograms; each
fake's step grows at every scrape, so successive refreshes show it growing (live).  The dead URL
is reported as unreachable and does not stop the refresh.
"""
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from eepd_testlib import (BIN, Agent, Eepd, Etcd, check, free_port, need,  # noqa: E402
                          run_main, wait_for)

BOUNDS = [10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3,
          100e-3, 250e-3, 500e-3, 1.0, 2.5, 5.0, 10.0]


def fake_page(step, epoch, world, rank, dispatch_s, waits):
    """Prometheus text as a rank renders it: @p dispatch_s one duration repeated 10 times,
    @p waits {(phase, peer): seconds}."""
    out = ["# TYPE eep_step gauge", "eep_step %d" % step, "eep_epoch %d" % epoch,
           "eep_world %d" % world, "eep_rank %d" % rank,
           "# TYPE eep_dispatch_duration_seconds histogram"]
    for b in BOUNDS:
        out.append('eep_dispatch_duration_seconds_bucket{le="%g"} %d' % (b, 10 if dispatch_s <= b
                                                                          else 0))
    out += ['eep_dispatch_duration_seconds_bucket{le="+Inf"} 10',
            "eep_dispatch_duration_seconds_sum %g" % (10 * dispatch_s),
            "eep_dispatch_duration_seconds_count 10",
            "# TYPE eep_wait_seconds_total counter"]
    for (phase, peer), v in sorted(waits.items()):
        out.append('eep_wait_seconds_total{phase="%s",peer="%d"} %g' % (phase, peer, v))
    return "\n".join(out) + "\n"


class FakeRankMetrics:
    """A fake rank metrics endpoint: serves self.page(step) at /metrics, step += 1 per GET."""

    def __init__(self):
        self.step = 0
        self.page = lambda step: "eep_step %d\n" % step
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                fake.step += 1
                body = fake.page(fake.step).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d/metrics" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def main():
    need(["etcd", os.path.join(BIN, "eepd"), os.path.join(BIN, "eep-agent"),
          os.path.join(BIN, "eepctl")])
    job = "topr%d" % os.getpid()
    etcd = Etcd(1)
    d = Eepd(etcd, job, "c1")
    wait_for(lambda: d.health()["is_leader"], 10, "c1 to lead")
    fakes = [FakeRankMetrics() for _ in range(3)]
    dead_url = "http://127.0.0.1:%d/metrics" % free_port()  # nothing listens there
    agents = [Agent(etcd, job, 2, "r%d" % i, args=["--endpoint=" + f.url])
              for i, f in enumerate(fakes)]
    agents.append(Agent(etcd, job, 2, "dead", args=["--endpoint=" + dead_url]))
    wait_for(lambda: all(a.in_view() and a.last_view()["n"] == 4 for a in agents), 15,
             "four agents in one view")
    view = d.status()["view"]
    epoch = view["epoch"]
    ids = [m["id"] for m in view["members"]]
    rank_of = [ids.index(a.member()) for a in agents]
    slow = rank_of[1]  # the fake behind agents[1] plays the slowed rank
    for i, f in enumerate(fakes):
        me = rank_of[i]
        waits = {}
        for peer in range(4):
            if peer == me:
                continue
            # everyone waits a little for everyone, and much longer for the slow rank
            waits[("dispatch_data", peer)] = 2.0 if peer == slow else 0.01 * (peer + 1)
            waits[("combine", peer)] = 0.5 if peer == slow else 0.002
        f.page = (lambda me, waits: lambda step: fake_page(step, epoch, 4, me,
                                                           300e-6 if me != slow else 40e-3,
                                                           waits))(me, waits)

    r = d.ctl("--json", "top", "--iterations=3", "--interval-ms=100")
    tops = [json.loads(x) for x in r.stdout.split("\n") if x]
    check(len(tops) == 3, "three refreshes: %s" % r.stdout)
    for t in tops:
        check(t["status_ok"] and len(t["ranks"]) == 4, "four ranks in each refresh: %s" % t)
        check(t["waited_for_most"] is not None and t["waited_for_most"]["rank"] == slow,
              "top names the slowed rank %d: %s" % (slow, t["waited_for_most"]))
        # 3 ranks wait 2.5 s each for it except itself: 2 fakes (the dead one says nothing)
        check(abs(t["waited_for_most"]["s"] - 5.0) < 1e-6, "job-wide wait for it: %s" % t)
    last = tops[-1]["ranks"]
    for i, f in enumerate(fakes):
        x = last[rank_of[i]]
        check(x["ok"] and x["url"] == f.url and x["epoch"] == epoch and x["world"] == 4,
              "rank %d's page: %s" % (rank_of[i], x))
        if rank_of[i] != slow:
            check(x["waits_most_for"]["rank"] == slow and
                  abs(x["waits_most_for"]["s"] - 2.5) < 1e-6, "rank %d waits most for %d: %s"
                  % (rank_of[i], slow, x))
            check(250 < x["dispatch_p50_us"] <= 500, "p50 from the histogram: %s" % x)
        else:
            check(25000 < x["dispatch_p50_us"] <= 50000, "the slow rank's p50: %s" % x)
            check(x["waits_most_for"]["rank"] != slow, "it waits for others: %s" % x)
        check(x["combine_p50_us"] is None, "no combine histogram: null, %s" % x)
    dead = last[rank_of[3]]
    check(not dead["ok"] and dead["url"] == dead_url, "the dead URL: %s" % dead)
    steps = [t["ranks"][rank_of[0]]["step"] for t in tops]
    check(steps[0] < steps[1] < steps[2], "each refresh scrapes again (live): %s" % steps)

    out = d.ctl("top", "--iterations=1").stdout
    check("WAITS MOST FOR" in out and ("the ranks wait most for: rank %d" % slow) in out and
          "(metrics unreachable)" in out, "top's screen:\n" + out)
    print(out)
    print("ok: top names the slowed rank %d (epoch %d)" % (slow, epoch))
    return 0


if __name__ == "__main__":
    run_main(main)
