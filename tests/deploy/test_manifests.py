#!/usr/bin/env python3
"""test_manifests.py - the Kubernetes manifests of deploy/k8s/, offline (issue 28).

1. Schemas: every document is validated, strictly (no unknown fields), against the Kubernetes
   schemas bundled with kubernetes-validate (PyPI, a maintained validator; installed here into a
   venv under $BUILD, pinned).  The JobSet is a CRD whose schema is not bundled: its own fields
   are checked by hand (apiVersion, known keys), and each replicated Job's template is validated
   as a batch/v1 Job, which covers its pod template.
2. Knobs: every EEP_* variable a manifest sets is a knob (eep-info --config lists it): a renamed
   knob must not silently detach a deployment.
3. Probes against the code: eepd's probe paths are ones eepd_metrics.c serves, on the port its
   EEP_EEPD_METRICS_PORT sets, bound to every interface; etcd's on its --listen-metrics-urls port;
   then a real eepd and a real etcd on 127.0.0.1 answer 200 on every probe path.
4. Wiring: every Service / PodDisruptionBudget / NetworkPolicy selector matches pods of some
   workload, Service target ports are container ports, every container has resource requests and
   a command the image has (build/bin or deploy/), etcd has 3 members spread by anti-affinity
   and a PDB keeping quorum, and kustomization.yaml lists every manifest.
Exit 0 pass, 1 fail, 77 skip.
"""
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("BUILD", os.path.join(ROOT, "build"))
if not os.path.isabs(BUILD):
    BUILD = os.path.join(ROOT, BUILD)
VALIDATOR = "kubernetes-validate==1.37.0"  # bundles the schemas up to Kubernetes 1.37
K8S_VERSION = "1.33.0"  # the oldest release with backoffLimitPerIndex and podReplacementPolicy GA


def ensure_validator():
    """Import kubernetes_validate, else make the venv, install it, and run this file there."""
    try:
        import kubernetes_validate  # noqa: F401
        return
    except ImportError:
        pass
    if os.environ.get("EEP_K8S_VENV_REEXEC"):
        print("FAIL: kubernetes_validate still missing inside the venv")
        sys.exit(1)
    venv = os.path.join(BUILD, "venv-k8s")
    py = os.path.join(venv, "bin", "python3")
    if not os.path.exists(py):
        r = subprocess.run([sys.executable, "-m", "venv", venv], capture_output=True, text=True)
        if r.returncode != 0:
            print("FAIL: cannot make a venv (apt-get install python3-venv): %s" % r.stderr)
            sys.exit(1)
    r = subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", VALIDATOR],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        print("FAIL: pip install %s failed (is PyPI reachable?): %s" % (VALIDATOR, r.stderr[-800:]))
        sys.exit(1)
    env = dict(os.environ, EEP_K8S_VENV_REEXEC="1")
    os.execve(py, [py, os.path.abspath(__file__)] + sys.argv[1:], env)


ensure_validator()
import kubernetes_validate  # noqa: E402
import yaml  # noqa: E402

sys.path.insert(0, HERE)
from k8s_docs import K8S, config_map, load, manifest_files, pod_labels, pod_specs  # noqa: E402

failures = []
procs = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def http_code(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as f:
            return f.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def wait_for(cond, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.1)
    return False


def validate(doc, where):
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        return True
    except kubernetes_validate.ValidationError as e:
        fail("%s: %s at %s" % (where, e.message, "/".join(str(p) for p in e.path)))
    except kubernetes_validate.SchemaNotFoundError as e:
        fail("%s: no schema (%s)" % (where, e))
    return False


JOBSET_KEYS = {"apiVersion", "kind", "metadata", "spec"}
JOBSET_SPEC_KEYS = {"replicatedJobs", "network", "successPolicy", "failurePolicy",
                    "startupPolicy", "suspend", "coordinator", "managedBy",
                    "ttlSecondsAfterFinished"}
JOBSET_RJ_KEYS = {"name", "replicas", "template", "dependsOn", "groupName"}


def validate_jobset(doc, where):
    """The JobSet CRD's schema is not bundled: its own fields by hand, each Job template as a Job."""
    if doc.get("apiVersion") != "jobset.x-k8s.io/v1alpha2":
        fail("%s: apiVersion %s, expected jobset.x-k8s.io/v1alpha2" % (where, doc.get("apiVersion")))
    for keys, allowed, at in ((doc, JOBSET_KEYS, ""), (doc.get("spec", {}), JOBSET_SPEC_KEYS, "spec")):
        for k in set(keys) - allowed:
            fail("%s: unknown JobSet field %s.%s" % (where, at, k))
    rjs = doc.get("spec", {}).get("replicatedJobs") or []
    if not rjs:
        fail("%s: no replicatedJobs" % where)
    for rj in rjs:
        for k in set(rj) - JOBSET_RJ_KEYS:
            fail("%s: unknown replicatedJobs field %s" % (where, k))
        if not isinstance(rj.get("replicas", 1), int) or rj.get("replicas", 1) < 1:
            fail("%s: replicatedJob %s: bad replicas" % (where, rj.get("name")))
        job = {"apiVersion": "batch/v1", "kind": "Job",
               "metadata": dict(rj.get("template", {}).get("metadata", {}),
                                name="%s-%s" % (doc["metadata"]["name"], rj.get("name"))),
               "spec": rj.get("template", {}).get("spec", {})}
        validate(job, "%s/%s (its Job template, validated as a batch/v1 Job)" % (where,
                                                                               rj.get("name")))


def selects(selector, labels):
    """Whether a label selector (matchLabels / plain map) selects pods with these labels."""
    ml = selector.get("matchLabels", selector) if isinstance(selector, dict) else {}
    return bool(ml) and all(labels.get(k) == v for k, v in ml.items())


def container_port(c, port):
    """A probe's or a Service's port (number or name) as the container's port number."""
    if isinstance(port, int):
        return port
    for p in c.get("ports", []):
        if p.get("name") == port:
            return p["containerPort"]
    return None


def env_of(c):
    env = {e["name"]: e.get("value") for e in c.get("env", [])}
    if any(r.get("configMapRef") for r in c.get("envFrom", [])):
        env = dict(config_map(), **env)
    return env


def probes(c):
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        if kind in c:
            yield kind, c[kind]


def main():
    info = subprocess.run([os.path.join(BUILD, "bin", "eep-info"), "--config"],
                          capture_output=True, text=True, check=True).stdout
    knobs = {line.split("=", 1)[0] for line in info.splitlines() if line.startswith("EEP_")}
    assert "EEP_LOG_LEVEL" in knobs, "eep-info --config printed no knobs"
    docs = [(name, d) for name in manifest_files() for d in load(name)]
    workloads = [(n, d) for n, d in docs if list(pod_specs(d))]
    all_labels = [lab for _, d in workloads for lab in pod_labels(d)]

    # 1. schemas
    n_valid = n_jobset = 0
    for name, d in docs:
        where = "%s: %s/%s" % (name, d.get("kind"), d.get("metadata", {}).get("name"))
        if d.get("kind") == "JobSet":
            validate_jobset(d, where)
            n_jobset += 1
        elif validate(d, where):
            n_valid += 1
    with open(os.path.join(K8S, "kustomization.yaml")) as f:
        kust = yaml.safe_load(f)
    missing = set(manifest_files()) - set(kust.get("resources", []))
    if missing:
        fail("kustomization.yaml does not apply %s" % sorted(missing))
    print("schemas (Kubernetes %s, strict): %d documents valid; %d JobSet checked by hand, its "
          "Job templates against batch/v1 Job" % (K8S_VERSION, n_valid, n_jobset), flush=True)

    # 2. knobs
    checked = 0
    for name, d in docs:
        names = [k for k in (d.get("data") or {}) if k.startswith("EEP_")] \
            if d.get("kind") == "ConfigMap" else []
        for _, spec in pod_specs(d):
            for c in spec.get("containers", []):
                names += [e["name"] for e in c.get("env", []) if e["name"].startswith("EEP_")]
        for var in names:
            checked += 1
            if var not in knobs:
                fail("%s: %s is not a knob" % (name, var))
    if checked == 0:
        fail("no EEP_* settings found")
    print("%d EEP_* settings are knobs" % checked, flush=True)

    # 3. probes against the code (statically here, served for real below)
    with open(os.path.join(ROOT, "control", "eepd", "eepd_metrics.c")) as f:
        served = set(re.findall(r'strcmp\(url, "(/[a-z]+)"\)', f.read()))
    eepd_paths, etcd_paths, n_probes = set(), set(), 0
    for name, d in workloads:
        for where, spec in pod_specs(d):
            for c in spec.get("containers", []):
                cmd = (c.get("command") or [""])[0]
                env = env_of(c)
                for kind, p in probes(c):
                    n_probes += 1
                    hg = p.get("httpGet")
                    if hg is None:
                        fail("%s/%s: %s is not an HTTP probe" % (where, c["name"], kind))
                        continue
                    port = container_port(c, hg["port"])
                    if cmd == "eepd":
                        if hg["path"].split("?")[0] not in served:
                            fail("%s: %s path %s is not served by eepd_metrics.c (%s)"
                                 % (where, kind, hg["path"], sorted(served)))
                        if str(port) != env.get("EEP_EEPD_METRICS_PORT"):
                            fail("%s: %s port %s is not EEP_EEPD_METRICS_PORT %s"
                                 % (where, kind, port, env.get("EEP_EEPD_METRICS_PORT")))
                        if env.get("EEP_EEPD_METRICS_ADDR") != "0.0.0.0":
                            fail("%s: EEP_EEPD_METRICS_ADDR %s: the kubelet cannot reach it"
                                 % (where, env.get("EEP_EEPD_METRICS_ADDR")))
                        eepd_paths.add(hg["path"])
                    elif cmd == "etcd":
                        m = re.search(r"--listen-metrics-urls=http://[^:]+:(\d+)",
                                      " ".join(c.get("args", [])))
                        if not m or int(m.group(1)) != port:
                            fail("%s: %s port %s is not etcd's --listen-metrics-urls port"
                                 % (where, kind, port))
                        etcd_paths.add(hg["path"])
                    else:
                        fail("%s/%s: a probe on a container the test cannot check" % (where, cmd))
                if cmd == "eepd":
                    listen = env.get("EEP_EEPD_LISTEN", "")
                    if container_port(c, "grpc") != int(listen.rsplit(":", 1)[-1] or 0):
                        fail("%s: grpc containerPort is not EEP_EEPD_LISTEN %s" % (where, listen))
                    if not {"readinessProbe", "livenessProbe"} <= {k for k, _ in probes(c)}:
                        fail("%s: eepd needs a readiness and a liveness probe" % where)
    if not eepd_paths or not etcd_paths:
        fail("probes: eepd %s, etcd %s" % (sorted(eepd_paths), sorted(etcd_paths)))
    print("%d probes: eepd %s, etcd %s match the code" % (n_probes, sorted(eepd_paths),
                                                           sorted(etcd_paths)), flush=True)
    serve_probes(eepd_paths, etcd_paths)

    # 4. wiring
    for name, d in docs:
        kind, spec = d.get("kind"), d.get("spec") or {}
        sel = None
        if kind == "Service":
            sel = spec.get("selector")
        elif kind == "PodDisruptionBudget":
            sel = spec.get("selector")
        elif kind == "NetworkPolicy" and spec.get("podSelector"):
            sel = spec["podSelector"]
        if sel is not None and not any(selects(sel, lab) for lab in all_labels):
            fail("%s: %s/%s selects no pods of any workload: %s" % (name, kind,
                                                                     d["metadata"]["name"], sel))
        if kind == "Service":
            targets = [c for _, d2 in workloads for lab in pod_labels(d2) if selects(sel, lab)
                       for _, ps in pod_specs(d2) for c in ps.get("containers", [])]
            for p in spec.get("ports", []):
                t = p.get("targetPort", p["port"])
                if targets and not any(container_port(c, t) in
                                       [q["containerPort"] for q in c.get("ports", [])]
                                       for c in targets):
                    fail("%s: Service %s port %s targets no container port" % (
                        name, d["metadata"]["name"], t))
    for name, d in workloads:
        for where, spec in pod_specs(d):
            for c in spec.get("containers", []):
                if not c.get("resources", {}).get("requests"):
                    fail("%s/%s: no resource requests" % (where, c["name"]))
                cmd = (c.get("command") or [""])[0]
                if cmd != "etcd" and not (os.path.exists(os.path.join(BUILD, "bin", cmd)) or
                                          os.path.exists(os.path.join(ROOT, "deploy", cmd))):
                    fail("%s: command %s is neither a built tool nor a deploy/ script" % (where,
                                                                                        cmd))
    etcd = [d for _, d in docs if d.get("kind") == "StatefulSet" and d["metadata"]["name"] == "etcd"]
    if not etcd or etcd[0]["spec"].get("replicas") != 3:
        fail("etcd is not a 3-member StatefulSet")
    else:
        aff = etcd[0]["spec"]["template"]["spec"].get("affinity", {}).get("podAntiAffinity", {})
        if not aff.get("requiredDuringSchedulingIgnoredDuringExecution"):
            fail("etcd members are not spread by required anti-affinity")
    pdbs = [d for _, d in docs if d.get("kind") == "PodDisruptionBudget"]
    if not any(selects(p["spec"]["selector"], {"app": "etcd"}) and
               p["spec"].get("maxUnavailable") == 1 for p in pdbs):
        fail("no PodDisruptionBudget keeps etcd's quorum (maxUnavailable 1)")
    print("selectors, ports, resources, commands, etcd spread and PDB: checked", flush=True)


def serve_probes(eepd_paths, etcd_paths):
    """A real etcd and eepd on 127.0.0.1 answer 200 on every probe path of the manifests."""
    if shutil.which("etcd") is None or not os.path.exists(os.path.join(BUILD, "bin", "eepd")):
        print("skip part: etcd or eepd missing, the probe paths are not served for real")
        return
    tmp = tempfile.mkdtemp(prefix="eep-manifests-")
    cport, pport, mport, gport, hport = (free_port() for _ in range(5))
    try:
        procs.append(subprocess.Popen([
            "etcd", "--name", "m0", "--data-dir", os.path.join(tmp, "data"),
            "--listen-client-urls", "http://127.0.0.1:%d" % cport,
            "--advertise-client-urls", "http://127.0.0.1:%d" % cport,
            "--listen-peer-urls", "http://127.0.0.1:%d" % pport,
            "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % pport,
            "--initial-cluster", "m0=http://127.0.0.1:%d" % pport,
            "--listen-metrics-urls", "http://127.0.0.1:%d" % mport],
            stdout=open(os.path.join(tmp, "etcd.log"), "wb"), stderr=subprocess.STDOUT))
        for path in sorted(etcd_paths):
            url = "http://127.0.0.1:%d%s" % (mport, path)
            if not wait_for(lambda: http_code(url) == 200, 20):
                fail("etcd does not answer 200 on probe path %s (%s)" % (path, http_code(url)))
        env = dict(os.environ, EEP_ETCD_ENDPOINTS="127.0.0.1:%d" % cport, EEP_JOB="manifests",
                   EEP_EEPD_LISTEN="127.0.0.1:%d" % gport, EEP_EEPD_METRICS_PORT=str(hport),
                   EEP_EEPD_METRICS_ADDR="127.0.0.1", EEP_EEPD_ID="m1")
        procs.append(subprocess.Popen([os.path.join(BUILD, "bin", "eepd")], env=env,
                                      stdout=open(os.path.join(tmp, "eepd.log"), "wb"),
                                      stderr=subprocess.STDOUT))
        for path in sorted(eepd_paths):
            url = "http://127.0.0.1:%d%s" % (hport, path)
            if not wait_for(lambda: http_code(url) == 200, 20):
                fail("eepd does not answer 200 on probe path %s (%s)" % (path, http_code(url)))
        print("served: etcd %s and eepd %s answer 200" % (sorted(etcd_paths), sorted(eepd_paths)),
              flush=True)
    finally:
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


main()
for f in failures:
    print("FAIL:", f)
print("%d failures" % len(failures))
sys.exit(1 if failures else 0)
