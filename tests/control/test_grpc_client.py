#!/usr/bin/env python3
"""test_grpc_client.py - an independent client (Debian's python3-grpcio) against eepd.

Real gRPC on loopback, request bytes encoded by hand (no generated Python code: grpc_tools may be
missing), replies decoded by a small protobuf wire-format reader.
  plaintext: GetStatus and WatchViews work; garbage gets INVALID_ARGUMENT, a 2 MiB request
             RESOURCE_EXHAUSTED, an unknown method UNIMPLEMENTED, and eepd keeps serving.
  TLS:       with the CA only (no client certificate) GetStatus works but Drain, Cordon and
             InjectFault are refused (UNAUTHENTICATED); with a certificate from another CA the
             handshake fails; with a valid client certificate Cordon/Uncordon work (python and
             eepctl).
"""
import os
import subprocess
import sys
import threading
import time


try:
    import grpc
except ImportError:
    # Debian's python3-grpcio lives in the system interpreter; a pyenv/venv python3 may come
    # first in PATH.
    if sys.executable != "/usr/bin/python3" and os.path.exists("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    print("skip: python3-grpcio is not installed")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from eepd_testlib import (BIN, Agent, Eepd, Etcd, check, make_pki, need,  # noqa: E402
                          pb_bytes, pb_uint, pb_varint, run_main, tmp, wait_for)

SVC = "/eep.v1.EepControl/"


def decode(buf):
    """protobuf wire format -> {field: [values]} (varints as int, length-delimited as bytes)."""
    out, i = {}, 0
    while i < len(buf):
        key, i = _read_varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _read_varint(buf, i)
        elif wt == 2:
            n, i = _read_varint(buf, i)
            v, i = bytes(buf[i:i + n]), i + n
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError("wire type %d" % wt)
        out.setdefault(num, []).append(v)
    return out


def _read_varint(buf, i):
    shift = n = 0
    while True:
        b = buf[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, i


def view_of(raw):
    v = decode(raw)
    members = [decode(m)[1][0].decode() for m in v.get(2, [])]
    return {"epoch": v.get(1, [0])[0], "members": members}


def raw(x):
    return x


def unary(ch, method, req=b""):
    return ch.unary_unary(SVC + method, request_serializer=raw, response_deserializer=raw)(
        req, timeout=5)


def code_of(fn):
    try:
        fn()
        return grpc.StatusCode.OK
    except grpc.RpcError as e:
        return e.code()


def read(path):
    with open(path, "rb") as f:
        return f.read()


def main():
    need(["etcd", "openssl", os.path.join(BIN, "eepd"), os.path.join(BIN, "eep-agent"),
          os.path.join(BIN, "eepctl")])
    job = "grpc%d" % os.getpid()
    etcd = Etcd(1)
    d = Eepd(etcd, job, "p1")
    agents = [Agent(etcd, job, 2, "g%d" % i) for i in range(2)]
    wait_for(lambda: all(a.in_view() and a.last_view()["n"] == 2 for a in agents), 15,
             "two agents in a view")

    ch = grpc.insecure_channel(d.addr)
    st = decode(unary(ch, "GetStatus"))
    view = view_of(st[4][0])
    check(st.get(2, [0])[0] == 1, "the only replica leads")
    check(view["epoch"] >= 1 and sorted(view["members"]) == sorted(a.member() for a in agents),
          "GetStatus view holds both agents: %s" % view)
    print("python GetStatus: leader %s, view %d with %d members"
          % (st[3][0].decode(), view["epoch"], len(view["members"])))

    # WatchViews: the current view first, then the next one.
    stream = ch.unary_stream(SVC + "WatchViews", request_serializer=raw,
                             response_deserializer=raw)(pb_uint(1, 0), timeout=20)
    got = []

    def reader():
        try:
            for m in stream:
                got.append(view_of(m))
        except grpc.RpcError:
            pass
    th = threading.Thread(target=reader, daemon=True)
    th.start()
    wait_for(lambda: got, 5, "the current view on the stream")
    check(got[0]["epoch"] == view["epoch"], "stream starts at the current view")
    agents.append(Agent(etcd, job, 2, "g-new"))
    wait_for(lambda: len(got) >= 2 and len(got[-1]["members"]) == 3, 10, "the next view")
    check(got[-1]["epoch"] > got[0]["epoch"], "stream epochs increase")
    stream.cancel()
    print("python WatchViews: epochs %s" % [g["epoch"] for g in got])

    # Malformed input over real gRPC.
    check(code_of(lambda: unary(ch, "GetStatus", b"\xff\xff\xff")) ==
          grpc.StatusCode.INVALID_ARGUMENT, "garbage -> INVALID_ARGUMENT")
    check(code_of(lambda: unary(ch, "Drain", pb_bytes(1, "../leader"))) ==
          grpc.StatusCode.INVALID_ARGUMENT, "bad member id -> INVALID_ARGUMENT")
    check(code_of(lambda: unary(ch, "Drain", b"\x0a" + pb_varint(2 << 20) + b"x" * (2 << 20))) ==
          grpc.StatusCode.RESOURCE_EXHAUSTED, "2 MiB -> RESOURCE_EXHAUSTED")
    check(code_of(lambda: unary(ch, "NoSuchMethod")) == grpc.StatusCode.UNIMPLEMENTED,
          "unknown method -> UNIMPLEMENTED")
    check(decode(unary(ch, "Health")).get(1, [0])[0] == 1, "still serving after bad input")
    ch.close()
    print("malformed input: INVALID_ARGUMENT / RESOURCE_EXHAUSTED / UNIMPLEMENTED, still serving")

    # TLS.
    p = make_pki()
    # Eepd() waits on a plaintext health check: start this one here, poll with eepctl's TLS.
    import eepd_testlib as lib
    port = lib.free_port()
    env = {"EEP_ETCD_ENDPOINTS": etcd.endpoints(), "EEP_JOB": job,
           "EEP_EEPD_LISTEN": "127.0.0.1:%d" % port, "EEP_EEPD_ID": "tls1",
           "EEP_EEPD_LEASE_TTL_S": "2", "EEP_EEPD_FAULT_INJECTION": "1",
           "EEP_EEPD_TLS_CERT": p("server.pem"), "EEP_EEPD_TLS_KEY": p("server.key"),
           "EEP_EEPD_TLS_CA": p("ca.pem"), "EEP_LOG_LEVEL": "info"}
    lib.spawn([os.path.join(BIN, "eepd")], env=env, log=tmp("eepd-tls.log"))
    addr = "127.0.0.1:%d" % port
    member = agents[0].member()

    def eepctl(*args, cert=True):
        flags = ["--addr", addr, "--ca", p("ca.pem")]
        if cert:
            flags += ["--cert", p("client.pem"), "--key", p("client.key")]
        return subprocess.run([os.path.join(BIN, "eepctl")] + flags + list(args),
                              capture_output=True, text=True)
    wait_for(lambda: eepctl("health", cert=False).returncode == 0, 20, "eepd over TLS")

    anon = grpc.secure_channel(addr, grpc.ssl_channel_credentials(read(p("ca.pem"))))
    check(code_of(lambda: unary(anon, "GetStatus")) == grpc.StatusCode.OK,
          "GetStatus without a client certificate")
    for m, req in (("Drain", pb_bytes(1, member)), ("Cordon", pb_bytes(1, member)),
                   ("InjectFault", pb_uint(1, 1) + pb_bytes(2, member))):
        c = code_of(lambda: unary(anon, m, req))
        check(c == grpc.StatusCode.UNAUTHENTICATED, "%s without a certificate gave %s" % (m, c))
    anon.close()
    rogue = grpc.secure_channel(addr, grpc.ssl_channel_credentials(
        read(p("ca.pem")), read(p("badclient.key")), read(p("badclient.pem"))))
    c = code_of(lambda: unary(rogue, "Drain", pb_bytes(1, member)))
    check(c != grpc.StatusCode.OK, "a certificate from another CA must not Drain")
    rogue.close()
    good = grpc.secure_channel(addr, grpc.ssl_channel_credentials(
        read(p("ca.pem")), read(p("client.key")), read(p("client.pem"))))
    check(code_of(lambda: unary(good, "Cordon", pb_bytes(1, member))) == grpc.StatusCode.OK,
          "Cordon with a valid certificate")
    check(code_of(lambda: unary(good, "Uncordon", pb_bytes(1, member))) ==
          grpc.StatusCode.OK, "Uncordon with a valid certificate")
    good.close()
    r = eepctl("drain", member, cert=False)
    check(r.returncode != 0 and "UNAUTHENTICATED" in r.stderr, "eepctl drain without cert")
    r = eepctl("--json", "drain", member)
    check(r.returncode == 0, "eepctl drain with a cert: %s %s" % (r.stdout, r.stderr))
    wait_for(lambda: member not in agents[1].last_view()["members"], 5, "the drained view")
    print("TLS: reads open; Drain/Cordon/InjectFault without a certificate -> UNAUTHENTICATED; "
          "rogue CA -> %s; valid certificate -> Cordon/Uncordon/Drain ok" % c.name)
    return 0


if __name__ == "__main__":
    run_main(main)
