#!/usr/bin/env python3
"""test_dockerfile.py - a static lint of deploy/Dockerfile (issue 28; CI does not build images).

The recipe is multi-stage on Debian 12 (every FROM is debian:12 or an earlier stage), the final
stage copies its files from a build stage and runs as a non-root numeric user, the same uid the
manifests' pods run as (runAsUser); tags and pip versions are pinned; every apt-get install skips
recommends and cleans the lists in the same RUN; the tools the manifests run (their commands)
are installed on the image's PATH; every EEP_* variable it sets is a knob.  Each rule is also
checked to fire on a planted bad line.  Exit 0 pass, 1 fail.
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("BUILD", os.path.join(ROOT, "build"))
sys.path.insert(0, HERE)
from k8s_docs import load, manifest_files, pod_specs  # noqa: E402


def instructions(text):
    """(KEYWORD, argument) per instruction: comments dropped, continuation lines joined."""
    out, cur = [], ""
    for line in text.splitlines():
        s = line.strip()
        if not cur and (not s or s.startswith("#")):
            continue
        cur += " " + s[:-1] if s.endswith("\\") else " " + s
        if not s.endswith("\\"):
            kw, _, arg = cur.strip().partition(" ")
            out.append((kw.upper(), arg.strip()))
            cur = ""
    return out


def lint(text, run_as, commands, knobs):
    """@return the problems of Dockerfile @p text."""
    bad = []
    ins = instructions(text)
    args = {m.group(1): m.group(2) for kw, a in ins if kw == "ARG"
            for m in [re.match(r"(\w+)=(\S+)", a)] if m}
    stages, final = [], []
    for kw, a in ins:
        if kw == "FROM":
            m = re.match(r"(\S+)(?:\s+AS\s+(\S+))?$", a, re.I)
            image = re.sub(r"\$\{?(\w+)\}?", lambda v: args.get(v.group(1), "?"), m.group(1))
            if image not in stages and not re.match(r"debian:12(\.[0-9]+)*(-slim)?$", image):
                bad.append("FROM %s: not Debian 12 (debian:12[-slim]) nor an earlier stage" % image)
            stages.append(m.group(2) or image)
            final = []
        else:
            final.append((kw, a))
        if ":latest" in a:
            bad.append("%s %s: an unpinned :latest tag" % (kw, a))
        if kw == "RUN":
            for inst in re.findall(r"apt-get install[^&;]*", a):
                if "--no-install-recommends" not in inst:
                    bad.append("apt-get install without --no-install-recommends: %s" % inst)
            if "apt-get install" in a and "rm -rf /var/lib/apt/lists" not in a:
                bad.append("a RUN installs with apt-get but does not remove /var/lib/apt/lists")
            for pkg in re.findall(r"pip install\s+((?:--?\S+\s+(?:/\S+\s+)?)*)(\S+)", a):
                if "==" not in pkg[1]:
                    bad.append("pip install %s: not pinned (==)" % pkg[1])
        if kw == "ADD" and re.search(r"https?://", a):
            bad.append("ADD of a URL (use RUN curl with a checksum, or COPY)")
    if len(stages) < 2:
        bad.append("not multi-stage (%d FROM)" % len(stages))
    if not any(kw == "COPY" and "--from=" in a for kw, a in final):
        bad.append("the final stage copies nothing from an earlier stage")
    users = [a for kw, a in final if kw == "USER"]
    if not users:
        bad.append("the final stage sets no USER (it would run as root)")
    else:
        uid = users[-1].split(":")[0]
        if not uid.isdigit() or uid == "0":
            bad.append("USER %s: not a numeric non-root uid (runAsNonRoot needs a number)" % uid)
        elif run_as and {int(uid)} != run_as:
            bad.append("USER %s is not the manifests' runAsUser %s" % (uid, sorted(run_as)))
    env = " ".join(a for kw, a in final if kw == "ENV")
    path_dirs = re.findall(r"PATH=([^\s]+)", env)
    on_path = path_dirs[0].split(":") if path_dirs else []
    built = " ".join(a for kw, a in ins if kw == "RUN")
    for cmd in sorted(commands):
        if cmd == "etcd":
            continue
        installed = ("make install PREFIX=/opt/eep" in built and
                     os.path.exists(os.path.join(BUILD, "bin", cmd))) or \
            re.search(r"/opt/eep/bin/%s\b" % re.escape(cmd), built)
        if not installed or "/opt/eep/bin" not in on_path:
            bad.append("the manifests run %s, which is not installed on the image's PATH" % cmd)
    for name in re.findall(r"\b(EEP_[A-Z0-9_]+)=", env):
        if knobs and name not in knobs:
            bad.append("ENV %s is not a knob" % name)
    return bad


def main():
    with open(os.path.join(ROOT, "deploy", "Dockerfile")) as f:
        text = f.read()
    run_as, commands = set(), set()
    for name in manifest_files():
        for d in load(name):
            for _, spec in pod_specs(d):
                images = {c.get("image", "") for c in spec.get("containers", [])}
                if any(i.startswith("elasticep:") for i in images):
                    run_as.add(spec.get("securityContext", {}).get("runAsUser"))
                    commands |= {(c.get("command") or [""])[0] for c in spec["containers"]}
    info = subprocess.run([os.path.join(BUILD, "bin", "eep-info"), "--config"],
                          capture_output=True, text=True)
    knobs = {ln.split("=", 1)[0] for ln in info.stdout.splitlines() if ln.startswith("EEP_")}
    failures = lint(text, run_as, commands, knobs)
    for f in failures:
        print("FAIL: deploy/Dockerfile:", f)
    # every rule fires on a planted violation
    plants = {
        "Debian 12": text.replace("ARG DEBIAN=debian:12.8-slim", "ARG DEBIAN=ubuntu:24.04"),
        "numeric non-root": text.replace("USER 10001:10001", "USER root"),
        "runAsUser": text.replace("USER 10001:10001", "USER 4242"),
        "no USER": text.replace("USER 10001:10001\n", ""),
        "no-install-recommends": text.replace("apt-get install -y --no-install-recommends \\\n"
                                              "        build-essential",
                                              "apt-get install -y build-essential"),
        "lists": text.replace(" \\\n && rm -rf /var/lib/apt/lists/*\nWORKDIR", "\nWORKDIR"),
        "not pinned": text.replace("nvidia-nccl-cu13==${NCCL_VER}", "nvidia-nccl-cu13"),
        "copies nothing": text.replace("COPY --from=build /opt/eep /opt/eep", "COPY . /opt/eep"),
        "not installed on the image's PATH": text.replace("ENV PATH=/opt/eep/bin:${PATH}",
                                                          "ENV PATH=/usr/bin"),
    }
    missed = 0
    for rule, planted in plants.items():
        if planted == text:
            print("FAIL: could not plant a violation of '%s'" % rule)
            missed += 1
        elif not any(rule in p for p in lint(planted, run_as, commands, knobs)):
            print("FAIL: the rule '%s' did not fire on its planted violation" % rule)
            missed += 1
    print("deploy/Dockerfile: %d problems; %d rules each fire on a planted violation "
          "(%d missed); user %s, commands %s" % (len(failures), len(plants), missed,
                                                 sorted(run_as), sorted(commands)))
    return 1 if failures or missed else 0


sys.exit(main())
