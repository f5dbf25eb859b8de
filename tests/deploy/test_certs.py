#!/usr/bin/env python3
"""test_certs.py - deploy/make-certs.sh and the TLS wiring of deploy/k8s/ (issue 25).

1. The script makes a CA and certificates that openssl verifies, and secrets.yaml holds the three
   Secrets (tls.crt, tls.key, ca.crt) with the same bytes.
2. Every Secret a manifest mounts is one the script makes, and every TLS file a manifest names
   (EEP_ETCD_CA/CERT/KEY, EEP_EEPD_TLS_*, etcd's --*-file flags) is a key of a Secret mounted
   at that directory in that container.
3. End to end on 127.0.0.1: etcd with the script's serving cert and --client-cert-auth, eepd with
   the client cert and its own serving cert; eepctl health over TLS answers, etcdctl without a
   client certificate is refused.
Exit 0 pass, 1 fail, 77 skip.
"""
import base64
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

try:
    import yaml
except ImportError:
    print("skip: python3-yaml is not installed")
    sys.exit(77)

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))
sys.path.insert(0, here)
from k8s_docs import pod_specs  # noqa: E402
build = os.environ.get("BUILD", os.path.join(root, "build"))
k8s = os.path.join(root, "deploy", "k8s")
for tool in ("openssl", "etcd", "etcdctl"):
    if shutil.which(tool) is None:
        print("skip: %s is not installed" % tool)
        sys.exit(77)
for b in ("eepd", "eepctl"):
    if not os.path.exists(os.path.join(build, "bin", b)):
        print("skip: %s is not built" % b)
        sys.exit(77)

failures = []
procs = []
tmp = tempfile.mkdtemp(prefix="eep-certs-")


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_for(cond, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.1)
    return False


def main():
    certs = os.path.join(tmp, "certs")
    r = subprocess.run([os.path.join(root, "deploy", "make-certs.sh"), certs], capture_output=True,
                       text=True, timeout=60)
    if r.returncode != 0:
        fail("make-certs.sh exited %d: %s" % (r.returncode, r.stderr))
        return
    pem = lambda n: os.path.join(certs, n)  # noqa: E731
    names = ("etcd-server", "etcd-client", "eepd-server", "eepctl")
    r = subprocess.run(["openssl", "verify", "-CAfile", pem("ca.pem")] +
                       [pem(n + ".pem") for n in names], capture_output=True, text=True)
    if r.returncode != 0:
        fail("openssl verify: %s %s" % (r.stdout, r.stderr))
    with open(pem("secrets.yaml")) as f:
        secrets = {d["metadata"]["name"]: d for d in yaml.safe_load_all(f) if d}
    made = {"eep-etcd-server": "etcd-server", "eep-etcd-client": "etcd-client",
            "eep-eepd-tls": "eepd-server"}
    for name, base in made.items():
        data = secrets.get(name, {}).get("data", {})
        for key, path in (("tls.crt", base + ".pem"), ("tls.key", base + ".key"),
                          ("ca.crt", "ca.pem")):
            with open(pem(path), "rb") as f:
                if base64.b64decode(data.get(key, "")) != f.read():
                    fail("secrets.yaml: %s/%s is not %s" % (name, key, path))

    # 2. the manifests' TLS files are keys of Secrets mounted where they are named
    checked = 0
    for fn in sorted(os.listdir(k8s)):
        if not fn.endswith(".yaml"):
            continue
        with open(os.path.join(k8s, fn)) as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
        config = {}
        for d in docs:
            if d.get("kind") == "ConfigMap":
                config.update(d.get("data", {}))
        if fn != "config.yaml":
            with open(os.path.join(k8s, "config.yaml")) as f:
                for d in yaml.safe_load_all(f):
                    if d and d.get("kind") == "ConfigMap":
                        config.update(d.get("data", {}))
        for _, spec in (ps for d in docs for ps in pod_specs(d)):
            vols = {v["name"]: v["secret"]["secretName"] for v in spec.get("volumes", [])
                    if "secret" in v}
            for v in vols.values():
                if v not in made:
                    fail("%s mounts Secret %s, which make-certs.sh does not make" % (fn, v))
            for c in spec.get("containers", []):
                mounts = {m["mountPath"].rstrip("/"): vols[m["name"]]
                          for m in c.get("volumeMounts", []) if m["name"] in vols}
                files = [e["value"] for e in c.get("env", []) if "value" in e and
                         re.match(r"EEP_(ETCD_(CA|CERT|KEY)|EEPD_TLS_(CERT|KEY|CA))$", e["name"])]
                if any(ref.get("configMapRef") for ref in c.get("envFrom", [])):
                    files += [v for k, v in config.items()
                              if k in ("EEP_ETCD_CA", "EEP_ETCD_CERT", "EEP_ETCD_KEY")]
                files += re.findall(r"--[a-z-]*(?:file) (\S+)",
                                    " ".join(c.get("args", []) + c.get("command", [])))
                for path in files:
                    checked += 1
                    d_, base = os.path.split(path)
                    if d_ not in mounts:
                        fail("%s/%s: %s is in no mounted Secret" % (fn, c["name"], path))
                    elif base not in ("tls.crt", "tls.key", "ca.crt"):
                        fail("%s/%s: %s is no key of Secret %s" % (fn, c["name"], path,
                                                                   mounts[d_]))
    if checked < 15:  # etcd 6 flags, eepd 3 + 3 from the ConfigMap, ranks 3 from it
        fail("only %d TLS file references checked" % checked)

    # 3. end to end with these certificates
    cport, pport, gport = free_port(), free_port(), free_port()
    log = open(os.path.join(tmp, "etcd.log"), "wb")
    procs.append(subprocess.Popen([
        "etcd", "--name", "t0", "--data-dir", os.path.join(tmp, "data"),
        "--listen-client-urls", "https://127.0.0.1:%d" % cport,
        "--advertise-client-urls", "https://127.0.0.1:%d" % cport,
        "--listen-peer-urls", "http://127.0.0.1:%d" % pport,
        "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % pport,
        "--initial-cluster", "t0=http://127.0.0.1:%d" % pport,
        "--client-cert-auth", "--trusted-ca-file", pem("ca.pem"),
        "--cert-file", pem("etcd-server.pem"), "--key-file", pem("etcd-server.key")],
        stdout=log, stderr=subprocess.STDOUT))
    env3 = dict(os.environ, ETCDCTL_API="3")
    ctl = ["etcdctl", "--endpoints", "127.0.0.1:%d" % cport, "--dial-timeout", "2s",
           "--command-timeout", "3s", "--cacert", pem("ca.pem")]
    mtls = ["--cert", pem("etcd-client.pem"), "--key", pem("etcd-client.key")]
    if not wait_for(lambda: subprocess.run(ctl + mtls + ["put", "/t", "1"], env=env3,
                                           capture_output=True).returncode == 0, 30):
        fail("etcdctl with the client certificate could not write")
        return
    if subprocess.run(ctl + ["put", "/t", "2"], env=env3, capture_output=True).returncode == 0:
        fail("etcd took a client without a certificate")
    env = dict(os.environ, EEP_ETCD_ENDPOINTS="127.0.0.1:%d" % cport, EEP_JOB="certs",
               EEP_ETCD_CA=pem("ca.pem"), EEP_ETCD_CERT=pem("etcd-client.pem"),
               EEP_ETCD_KEY=pem("etcd-client.key"), EEP_EEPD_LISTEN="127.0.0.1:%d" % gport,
               EEP_EEPD_TLS_CERT=pem("eepd-server.pem"), EEP_EEPD_TLS_KEY=pem("eepd-server.key"),
               EEP_EEPD_TLS_CA=pem("ca.pem"), EEP_EEPD_METRICS_PORT="0", EEP_EEPD_ID="t1")
    procs.append(subprocess.Popen([os.path.join(build, "bin", "eepd")], env=env,
                                  stdout=open(os.path.join(tmp, "eepd.log"), "wb"),
                                  stderr=subprocess.STDOUT))
    eepctl = [os.path.join(build, "bin", "eepctl"), "--addr", "127.0.0.1:%d" % gport,
              "--timeout-ms", "2000", "--ca", pem("ca.pem"), "--cert", pem("eepctl.pem"),
              "--key", pem("eepctl.key"), "--json", "health"]
    health = []

    def healthy():
        r = subprocess.run(eepctl, capture_output=True, text=True, timeout=10)
        health[:] = [r.stdout + r.stderr]
        return r.returncode == 0 and '"etcd_ok":true' in r.stdout.replace(" ", "")

    if not wait_for(healthy, 30):
        fail("eepd over TLS with etcd over mutual TLS not healthy: %s" % health)
    print("make-certs.sh: certificates verified, 3 Secrets, %d TLS file references in the "
          "manifests checked, etcd (mTLS) + eepd (TLS) healthy with them" % checked, flush=True)


try:
    main()
finally:
    for p in procs:
        p.kill()
        p.wait()
    shutil.rmtree(tmp, ignore_errors=True)
sys.exit(1 if failures else 0)
