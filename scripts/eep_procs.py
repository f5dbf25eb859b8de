"""scripts/eep_procs.py - what the drivers of eep-rank processes share (scripts/gpu_elastic.py for
`make gpu-elastic`, scripts/eep_run.py for `make run`): a process whose stdout is eep-rank's JSON
lines, read incrementally and searched by time; bounded polling; free ports; a local etcd.

A JsonProc runs in a session of its own (start_new_session), so a signal to it reaches its whole
process group and never the driver's terminal group; stop() always ends it (SIGCONT first, so a
stopped process can take its SIGTERM, then SIGKILL after a grace period) and reaps it.
"""
import bisect
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import time
import urllib.request


# the kernel's TCP states (include/net/tcp_states.h), for the sockets no table lists
_TCP_STATES = {1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2",
               6: "TIME_WAIT", 7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN",
               11: "CLOSING"}


_libc = None


def _pidfd_getfd(pidfd, fd):
    """pidfd_getfd(2) (syscall 438 on x86-64 and arm64): a duplicate of another process's fd."""
    global _libc
    if _libc is None:
        import ctypes
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc.syscall(438, pidfd, fd, 0)


def now_ms():
    return int(time.time() * 1000)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_for(cond, timeout_s, step_s=0.01):
    """Poll cond() until it returns something true or timeout_s pass; returns its last value."""
    end = time.time() + timeout_s
    while time.time() < end:
        v = cond()
        if v:
            return v
        time.sleep(step_s)
    return cond()


def stats(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return {"n": 0, "median": None, "max": None}
    return {"n": len(xs), "median": round(statistics.median(xs), 1), "max": round(max(xs), 1)}


class JsonProc:
    """One process printing JSON lines to OUT (work/NAME.jsonl), stderr to work/NAME.err."""

    def __init__(self, name, cmd, env, work):
        self.name = name
        self.out = os.path.join(work, f"{name}.jsonl")
        self.err = os.path.join(work, f"{name}.err")
        self.events = []
        self.times = []  # t_ms of each event, non-decreasing: first() bisects
        self.bad = False
        self._pos = 0
        self.start_ms = now_ms()
        self.expect_death = False
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env,
                                         start_new_session=True)
        self.pid = self.proc.pid

    def poll(self):
        """Read the lines written since the last call; returns every event so far."""
        try:
            f = open(self.out)
        except OSError:
            return self.events
        with f:
            f.seek(self._pos)
            while True:
                line = f.readline()
                if not line or not line.endswith("\n"):
                    break
                self._pos = f.tell()
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(e, dict):
                    continue
                t = e.get("t_ms", 0)
                self.events.append(e)
                self.times.append(max(t, self.times[-1]) if self.times else t)
                self.bad = self.bad or (e.get("event") == "step" and "bad" in e)
        return self.events

    def alive(self):
        return self.proc.poll() is None

    def returncode(self):
        return self.proc.poll()

    def first(self, since, pred):
        """The first event at or after t_ms since for which pred(event) holds, else None."""
        self.poll()
        for i in range(bisect.bisect_left(self.times, since), len(self.events)):
            if pred(self.events[i]):
                return self.events[i]
        return None

    def last(self, pred):
        self.poll()
        for e in reversed(self.events):
            if pred(e):
                return e
        return None

    def fds(self):
        try:
            return len(os.listdir(f"/proc/{self.pid}/fd"))
        except OSError:
            return -1

    def fd_kinds(self):
        """The open fds by kind: unix/tcp/tcp-listen/udp sockets (one that no table lists is named
        from a duplicate: tcp-CLOSE, netlink, ...), pipes, anon inodes, device and file paths
        (digits folded to '#'), so that a drift says what grows; {} when gone."""
        kinds = {}
        socks = {}
        for table, name in (("unix", "unix"), ("tcp", "tcp"), ("tcp6", "tcp"), ("udp", "udp")):
            try:
                with open(f"/proc/{self.pid}/net/{table}") as fh:
                    next(fh, None)
                    for line in fh:
                        cols = line.split()
                        # unix: inode is column 6; tcp/udp: column 9, the state column 3
                        # (0A: listening, e.g. a bootstrap's or NCCL RAS's port)
                        ino = cols[6] if table == "unix" else (cols[9] if len(cols) > 9 else "")
                        listen = name == "tcp" and len(cols) > 3 and cols[3] == "0A"
                        socks[ino] = name + ("-listen" if listen else "")
            except (OSError, IndexError):
                pass
        try:
            names = os.listdir(f"/proc/{self.pid}/fd")
        except OSError:
            return {}
        for fd in names:
            try:
                t = os.readlink(f"/proc/{self.pid}/fd/{fd}")
            except OSError:
                continue
            if t.startswith("socket:["):
                k = "socket:" + (socks.get(t[8:-1]) or self._unlisted_socket(int(fd)))
            elif t.startswith("pipe:"):
                k = "pipe"
            elif t.startswith("anon_inode:"):
                k = t
            else:
                k = re.sub(r"[0-9]+", "#", t)
            kinds[k] = kinds.get(k, 0) + 1
        return kinds

    def _unlisted_socket(self, fd):
        """A socket that no /proc/net table lists (a TCP socket whose connect failed or that a reset
        closed, a netlink socket, ...), named from a duplicate of it (pidfd_getfd, Linux 5.6, needs
        ptrace rights over the process): e.g. 'tcp-CLOSE' or 'netlink'; 'other' when that fails."""
        dup = -1
        try:
            pidfd = os.pidfd_open(self.pid)
            try:
                dup = _pidfd_getfd(pidfd, fd)
            finally:
                os.close(pidfd)
            if dup < 0:
                return "other"
            s = socket.socket(fileno=dup)
            dup = -1  # the socket object owns it now
            try:
                if s.family in (socket.AF_INET, socket.AF_INET6) and s.type == socket.SOCK_STREAM:
                    state = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0]
                    return "tcp-" + _TCP_STATES.get(state, str(state))
                return {socket.AF_NETLINK: "netlink", socket.AF_UNIX: "unix"}.get(
                    s.family, f"family{int(s.family)}")
            finally:
                s.close()
        except (OSError, AttributeError, ValueError):
            return "other"
        finally:
            if dup >= 0:
                os.close(dup)

    def signal(self, sig):
        """Signal the process group (the process alone where the group is gone)."""
        try:
            os.killpg(self.pid, sig)
            return True
        except OSError:
            try:
                os.kill(self.pid, sig)
                return True
            except OSError:
                return False

    def stop(self, grace_s=10):
        """End it for good: SIGCONT + SIGTERM, SIGKILL after grace_s; reaped either way."""
        self.expect_death = True
        if self.alive():
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.proc.wait()
        # its group may hold children that outlive it
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass


def start_etcd(etcd_bin, work):
    """One etcd member on free 127.0.0.1 ports, data under work/etcd; (Popen, endpoint)."""
    cport, pport = free_port(), free_port()
    d = os.path.join(work, "etcd")
    env = dict(os.environ)
    with open(os.path.join(work, "etcd.log"), "w") as log:
        proc = subprocess.Popen(
            [etcd_bin, "--name", "m0", "--data-dir", d,
             "--listen-client-urls", f"http://127.0.0.1:{cport}",
             "--advertise-client-urls", f"http://127.0.0.1:{cport}",
             "--listen-peer-urls", f"http://127.0.0.1:{pport}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{pport}",
             "--initial-cluster", f"m0=http://127.0.0.1:{pport}", "--initial-cluster-state", "new",
             "--heartbeat-interval", "50", "--election-timeout", "500",
             "--grpc-keepalive-min-time", "500ms", "--logger", "zap", "--log-level", "warn"],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def healthy():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{cport}/health", timeout=1) as r:
                return b'"health":"true"' in r.read()
        except OSError:
            return False
    if not wait_for(healthy, 20, 0.1):
        proc.kill()
        proc.wait()
        raise RuntimeError("etcd did not become healthy in 20 s (see etcd.log)")
    return proc, f"127.0.0.1:{cport}"
