"""eepd_testlib.py - shared pieces of the control-plane script tests (not a test itself).

Starts etcd members, eepd replicas and eep-agent processes on 127.0.0.1 with free ports and a
temporary directory, reads the agents' JSON lines in background threads, and kills everything
it started at exit (atexit + SIGTERM handler).  Waits are bounded polls, never bare sleeps.
"""
import atexit
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

BUILD = os.environ.get("BUILD", "build")
BIN = os.path.join(BUILD, "bin")
_procs = []
_tmp = tempfile.mkdtemp(prefix="eep-ctl-test-")


def _cleanup():
    # SIGTERM first, so eepd and the agents run their shutdown paths (under ASan, LeakSanitizer
    # then checks them); SIGKILL whatever is still there after 5 s.
    for p in _procs:
        if p.poll() is None:
            try:
                os.kill(p.pid, signal.SIGCONT)
                p.terminate()
            except OSError:
                pass
    end = time.monotonic() + 5
    for p in _procs:
        try:
            p.wait(timeout=max(0.1, end - time.monotonic()))
        except Exception:
            p.kill()
            p.wait()
    bad = []
    for name in sorted(os.listdir(_tmp)):
        path = os.path.join(_tmp, name)
        if os.path.isfile(path):
            with open(path, "rb") as f:
                text = f.read().decode(errors="replace")
            if ("Sanitizer" in text and "ERROR" in text) or "runtime error:" in text:
                bad.append(name)
                print("---- sanitizer report in %s ----\n%s" % (name, text[-6000:]))
    if os.environ.get("KEEP_EEP_TEST_DIR") != "1":
        shutil.rmtree(_tmp, ignore_errors=True)
    if bad:
        print("FAIL: sanitizer errors in %s" % ", ".join(bad), flush=True)
        sys.stdout.flush()
        os._exit(1)


atexit.register(_cleanup)
signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))


def skip(reason):
    print("skip: " + reason)
    sys.exit(77)


def need(paths_or_tools):
    for t in paths_or_tools:
        if os.path.sep in t:
            if not os.path.exists(t):
                skip(t + " is not built")
        elif shutil.which(t) is None:
            skip(t + " is not installed")


_ports_given = set()
_port_next = [0]


def free_port():
    """A port on 127.0.0.1 below the kernel's ephemeral range (bind(0) and every outgoing
    connection draw from that range, so a port found free there can be some client's source
    port a moment later), from a per-process random start, free of listeners and of TIME_WAIT
    (a bind without SO_REUSEADDR) and never handed out twice by this process.  Another process
    can still take it before our server binds it: Etcd retries a start that exits for it."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            hi = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        hi = 32768
    lo = 10000
    if hi - lo < 1000:
        lo, hi = 10000, 65536
    if not _port_next[0]:
        _port_next[0] = lo + (os.getpid() * 2654435761 ^ time.time_ns()) % (hi - lo)
    for _ in range(hi - lo):
        port = _port_next[0]
        _port_next[0] = lo + (port + 1 - lo) % (hi - lo)
        if port in _ports_given:
            continue
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            s.close()
        _ports_given.add(port)
        return port
    raise AssertionError("no free port in [%d, %d)" % (lo, hi))


def now_ms():
    return time.time() * 1000.0


def wait_for(cond, timeout, what, step=0.02):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(step)
    raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def run_main(main):
    """Run a script test's main(): its return value is the exit code; a failed check or bounded
    wait (AssertionError) prints FAIL with the reason and exits 1."""
    try:
        sys.exit(main())
    except AssertionError as e:
        print("FAIL: %s" % e, flush=True)
        sys.exit(1)


def spawn(args, env=None, log=None, stdout=None):
    e = dict(os.environ)
    if env:
        e.update(env)
    out = stdout if stdout is not None else open(log, "wb") if log else subprocess.DEVNULL
    err = open(log + ".err", "wb") if (log and stdout is not None) else subprocess.STDOUT
    p = subprocess.Popen(args, env=e, stdout=out, stderr=err if log else subprocess.DEVNULL)
    _procs.append(p)
    return p


def tmp(name):
    return os.path.join(_tmp, name)


def openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True, capture_output=True)


def make_pki(name="pki"):
    """A test CA (and a rogue one) with server, client and badclient (rogue-signed) certificates
    for 127.0.0.1; returns p(file) -> its path."""
    d = tmp(name)
    os.makedirs(d)
    p = lambda n: os.path.join(d, n)  # noqa: E731
    ext = p("ext.cnf")
    with open(ext, "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for ca in ("ca", "rogue"):
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                "/CN=eep-test-" + ca, "-keyout", p(ca + ".key"), "-out", p(ca + ".pem"))
    for cn, ca in (("server", "ca"), ("client", "ca"), ("badclient", "rogue")):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=" + cn, "-keyout",
                p(cn + ".key"), "-out", p(cn + ".csr"))
        openssl("x509", "-req", "-in", p(cn + ".csr"), "-CA", p(ca + ".pem"), "-CAkey",
                p(ca + ".key"), "-CAcreateserial", "-days", "2", "-out", p(cn + ".pem"),
                "-extfile", ext)
    return p


class Etcd:
    """A cluster of n etcd members on loopback; with @p pki (make_pki) it serves https only and
    requires client certificates signed by the test CA (mutual TLS).  @p raft: (heartbeat ms,
    election timeout ms), by default short ones (50, 500); etcd's own defaults are (100, 1000)."""

    def __init__(self, n=1, name="e", pki=None, raft=(50, 500)):
        self.pki = pki
        self.raft = raft
        self.scheme = "https" if pki else "http"
        self.n = n
        for attempt in range(3):  # again on new ports when one was taken before etcd bound it
            self.names = ["%s%d" % (name if attempt == 0 else "%s%dt" % (name, attempt), i)
                          for i in range(n)]
            self.client = [free_port() for _ in range(n)]
            self.peer = [free_port() for _ in range(n)]
            self.cluster = ",".join("%s=http://127.0.0.1:%d" % (self.names[i], self.peer[i])
                                    for i in range(n))
            self.procs = [self._start(i, "new") for i in range(n)]
            if wait_for(self._serving, 30, "etcd to serve") != "taken":
                break
            for p in self.procs:
                p.kill()
                p.wait()
        check(not self._port_taken(), "etcd: a port was taken 3 times in a row")

    def _serving(self):
        """"taken" when a member lost a port (start again), True once etcd takes a write."""
        if self._port_taken():
            return "taken"
        return self.ctl("put", "/eep-test-ready", "1").returncode == 0

    def _port_taken(self):
        """True when a member exited because its port was taken after it was picked."""
        for i, p in enumerate(self.procs):
            if p.poll() is not None and "address already in use" in open(self.logs[i],
                                                                         errors="replace").read():
                return True
        return False

    def client_env(self):
        """The EEP_ETCD_* settings a client of this cluster needs (TLS files)."""
        if not self.pki:
            return {}
        return {"EEP_ETCD_CA": self.pki("ca.pem"), "EEP_ETCD_CERT": self.pki("client.pem"),
                "EEP_ETCD_KEY": self.pki("client.key")}

    def _tls_args(self):
        if not self.pki:
            return []
        return ["--cert-file", self.pki("server.pem"), "--key-file", self.pki("server.key"),
                "--client-cert-auth", "--trusted-ca-file", self.pki("ca.pem")]

    def _start(self, i, state):
        if not hasattr(self, "logs") or len(self.logs) != self.n:
            self.logs = [None] * self.n
        self.logs[i] = tmp("%s.%d.log" % (self.names[i], len(_procs)))
        return spawn([
            "etcd", "--name", self.names[i], "--data-dir", tmp(self.names[i] + ".data"),
            "--listen-client-urls", "%s://127.0.0.1:%d" % (self.scheme, self.client[i]),
            "--advertise-client-urls", "%s://127.0.0.1:%d" % (self.scheme, self.client[i]),
            "--listen-peer-urls", "http://127.0.0.1:%d" % self.peer[i],
            "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % self.peer[i],
            "--initial-cluster", self.cluster, "--initial-cluster-state", state,
            "--heartbeat-interval", str(self.raft[0]), "--election-timeout", str(self.raft[1])]
            + self._tls_args(), log=self.logs[i])

    def kill(self, i=0):
        self.procs[i].kill()
        self.procs[i].wait()

    def restart(self, i=0):
        """Start member i again on its data dir and ports (after kill); again (3 tries) while
        a port of its is taken by someone else."""
        for attempt in range(3):
            self.procs[i] = self._start(i, "existing")
            if wait_for(self._serving, 30, "etcd to serve again") != "taken":
                return
            time.sleep(0.3)
        raise AssertionError("etcd member %d: its port stayed taken" % i)

    def _gw(self, path, body):
        """etcd's JSON gateway (binary keys and values, base64): one call to the first member
        that answers."""
        data = json.dumps(body).encode()
        last = None
        ctx = None
        if self.pki:
            import ssl
            ctx = ssl.create_default_context(cafile=self.pki("ca.pem"))
            ctx.load_cert_chain(self.pki("client.pem"), self.pki("client.key"))
        for port in self.client:
            try:
                req = urllib.request.Request("%s://127.0.0.1:%d/v3/%s" % (self.scheme, port, path),
                                             data, {"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=5, context=ctx) as f:
                    return json.loads(f.read().decode())
            except OSError as e:
                last = e
        raise AssertionError("etcd gateway %s: %s" % (path, last))

    def put_bytes(self, key, value, lease=0):
        body = {"key": base64.b64encode(key.encode()).decode(),
                "value": base64.b64encode(value).decode()}
        if lease:
            body["lease"] = str(lease)
        return self._gw("kv/put", body)

    def put_many(self, pairs):
        """Put every (key, bytes) in one txn: one revision, as eepd's publish writes views/<N>
        and view/current."""
        ops = [{"request_put": {"key": base64.b64encode(k.encode()).decode(),
                                "value": base64.b64encode(v).decode()}} for k, v in pairs]
        return self._gw("kv/txn", {"success": ops})

    def get_bytes(self, key):
        r = self._gw("kv/range", {"key": base64.b64encode(key.encode()).decode()})
        kvs = r.get("kvs", [])
        return base64.b64decode(kvs[0].get("value", "")) if kvs else None

    def get_kv(self, key):
        """The raw key-value (dict with mod_revision, lease, ...) or None."""
        r = self._gw("kv/range", {"key": base64.b64encode(key.encode()).decode()})
        kvs = r.get("kvs", [])
        return kvs[0] if kvs else None

    def delete(self, key):
        return self._gw("kv/deleterange", {"key": base64.b64encode(key.encode()).decode()})

    def endpoints(self, skip=()):
        return ",".join("127.0.0.1:%d" % p for i, p in enumerate(self.client) if i not in skip)

    def ctl(self, *args):
        env = dict(os.environ, ETCDCTL_API="3")
        tls = ["--cacert", self.pki("ca.pem"), "--cert", self.pki("client.pem"), "--key",
               self.pki("client.key")] if self.pki else []
        return subprocess.run(["etcdctl", "--endpoints", self.endpoints(), "--dial-timeout",
                               "2s", "--command-timeout", "3s"] + tls + list(args), env=env,
                              capture_output=True, text=True)

    def raft_leader(self):
        """Index of the member that is the raft leader."""
        for i, port in enumerate(self.client):
            r = subprocess.run(["etcdctl", "--endpoints", "127.0.0.1:%d" % port, "endpoint",
                                "status", "-w", "json"], env=dict(os.environ, ETCDCTL_API="3"),
                               capture_output=True, text=True)
            try:
                st = json.loads(r.stdout)[0]["Status"]
            except (ValueError, IndexError, KeyError):
                continue
            if st["leader"] == st["header"]["member_id"]:
                return i
        raise AssertionError("no etcd raft leader found")

    def keys(self, prefix):
        r = self.ctl("get", "--prefix", "--keys-only", prefix)
        return [k for k in r.stdout.split("\n") if k]


class Eepd:
    def __init__(self, etcd, job, rid, extra=None):
        self.port = free_port()
        self.metrics = free_port()
        self.id = rid
        self.addr = "127.0.0.1:%d" % self.port
        env = {"EEP_ETCD_ENDPOINTS": etcd.endpoints(), "EEP_JOB": job,
               "EEP_EEPD_LISTEN": self.addr, "EEP_EEPD_ID": rid,
               "EEP_EEPD_SETTLE_MS": "300", "EEP_EEPD_LEASE_TTL_S": "2", "EEP_EEPD_HZ": "50",
               "EEP_EEPD_METRICS_PORT": str(self.metrics), "EEP_EEPD_FAULT_INJECTION": "1",
               "EEP_EEPD_NUM_EXPERTS": "16", "EEP_EEPD_REDUNDANT_EXPERTS": "1",
               "EEP_LOG_LEVEL": "info", "EEP_ETCD_TIMEOUT_MS": "2000"}
        env.update(etcd.client_env())
        if extra:
            env.update(extra)
        self.log = tmp("eepd-%s-%d.log" % (rid, len(_procs)))
        self.proc = spawn([os.path.join(BIN, "eepd")], env=env, log=self.log)
        wait_for(lambda: self.health() is not None, 20, "eepd %s to serve" % rid)

    def ctl(self, *args, check_rc=True, extra=()):
        r = subprocess.run([os.path.join(BIN, "eepctl"), "--addr", self.addr, "--timeout-ms",
                            "2000"] + list(extra) + list(args), capture_output=True, text=True)
        if check_rc and r.returncode != 0:
            raise AssertionError("eepctl %s failed: %s %s" % (args, r.stdout, r.stderr))
        return r

    def health(self):
        r = self.ctl("--json", "health", check_rc=False)
        if r.returncode != 0:
            return None
        return json.loads(r.stdout)

    def status(self):
        return json.loads(self.ctl("--json", "status").stdout)

    def metric(self, name):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.metrics,
                                    timeout=2) as f:
            for line in f.read().decode().split("\n"):
                if line.startswith(name + " "):
                    return float(line.split()[1])
        return None


class Agent:
    """An eep-agent process; its JSON lines are collected with their arrival time."""

    def __init__(self, etcd, job, ttl=2, name="a", extra_env=None, args=()):
        self.started_ms = now_ms()
        self.events = []
        self.bad_lines = []  # stdout lines that are not JSON
        self.lock = threading.Lock()
        env = {"EEP_ETCD_ENDPOINTS": etcd.endpoints(), "EEP_JOB": job, "EEP_LOG_LEVEL": "info",
               "EEP_ETCD_TIMEOUT_MS": "2000"}
        env.update(etcd.client_env())
        if extra_env:
            env.update(extra_env)
        self.log = tmp("agent-%s-%d.log" % (name, id(self)))
        self.proc = spawn([os.path.join(BIN, "eep-agent"), "--ttl", str(ttl)] + list(args),
                          env=env, log=self.log, stdout=subprocess.PIPE)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                with self.lock:
                    self.bad_lines.append(line)
                continue
            ev["rx_ms"] = now_ms()
            with self.lock:
                self.events.append(ev)

    def evs(self, kind=None):
        with self.lock:
            return [e for e in self.events if kind is None or e["event"] == kind]

    def member(self):
        r = self.evs("registered")
        return r[-1]["member"] if r else None

    def views(self):
        return self.evs("view")

    def last_view(self):
        v = self.views()
        return v[-1] if v else None

    def in_view(self):
        v = self.last_view()
        m = self.member()
        return v is not None and m is not None and m in v["members"] and v["rank"] >= 0

    def signal(self, sig):
        os.kill(self.proc.pid, sig)


def epochs_strictly_increasing(agent):
    eps = [v["epoch"] for v in agent.views()]
    return all(b > a for a, b in zip(eps, eps[1:])), eps


def pct(values):
    v = sorted(values)
    if not v:
        return "n/a"
    med = v[len(v) // 2]
    return "min %.0f ms, median %.0f ms, max %.0f ms (n=%d)" % (v[0], med, v[-1], len(v))


# ---- protobuf wire format by hand (no generated Python code needed) ---------------------------

def pb_varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def pb_bytes(num, data):
    if isinstance(data, str):
        data = data.encode()
    return pb_varint(num << 3 | 2) + pb_varint(len(data)) + data


def pb_uint(num, v):
    return pb_varint(num << 3) + pb_varint(v)


def pb_member(mid, host="forged", pid=1, gpu="", lease=0, nics=()):
    """An eep.v1.Member."""
    out = pb_bytes(1, mid) + pb_bytes(2, host) + pb_uint(4, pid)
    for n in nics:
        out += pb_bytes(5, n)
    if gpu:
        out += pb_bytes(3, gpu)
    if lease:
        out += pb_uint(7, lease)
    return out


def pb_view(epoch, member_ids, reason="forged", leader="nobody"):
    """An eep.v1.View."""
    out = pb_uint(1, epoch)
    for m in member_ids:
        out += pb_bytes(2, pb_member(m))
    return out + pb_bytes(5, reason) + pb_bytes(6, leader)


# ---- cases counted one by one (tests/run.sh reads cmocka's summary lines) ---------------------

def run_cases(cases, only=None):
    """Run each (name, fn) in turn; print cmocka-style lines so tests/run.sh counts every case.
    A case fails on AssertionError (or any exception); the others still run.  CONTROL_TEST_CASES
    (comma-separated names) runs a subset.  Returns the exit code."""
    sel = only or [c for c in os.environ.get("CONTROL_TEST_CASES", "").split(",") if c]
    failed = []
    ran = 0
    for name, fn in cases:
        if sel and name not in sel:
            continue
        ran += 1
        print("[ RUN      ] %s" % name, flush=True)
        t = time.monotonic()
        try:
            fn()
            print("[       OK ] %s (%.1f s)" % (name, time.monotonic() - t), flush=True)
        except Exception as e:  # noqa: BLE001 - a case's failure of any kind is reported
            import traceback
            traceback.print_exc()
            print("[  FAILED  ] %s: %s" % (name, e), flush=True)
            failed.append(name)
    print("[==========] %d test(s) run." % ran)
    print("[  PASSED  ] %d test(s)." % (ran - len(failed)))
    if failed:
        print("[  FAILED  ] %d test(s), listed below:" % len(failed))
        for n in failed:
            print("[  FAILED  ] %s" % n)
    sys.stdout.flush()
    return 1 if failed else 0
