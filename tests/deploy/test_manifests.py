#!/usr/bin/env python3
"""test_manifests.py - the Kubernetes manifests parse, and every EEP_* variable they set is a real
knob (eep-info --config lists it): a renamed knob must not silently detach a deployment."""
import os
import subprocess
import sys

try:
    import yaml
except ImportError:
    print("skip: python3-yaml is not installed")
    sys.exit(77)

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))
build = os.environ.get("BUILD", os.path.join(root, "build"))
info = subprocess.run([os.path.join(build, "bin", "eep-info"), "--config"],
                      capture_output=True, text=True, check=True).stdout
knobs = {line.split("=", 1)[0] for line in info.splitlines() if line.startswith("EEP_")}
assert "EEP_LOG_LEVEL" in knobs, "eep-info --config printed no knobs"

def env_names(doc):
    """Yield every EEP_* name a manifest sets: ConfigMap data keys and container env entries."""
    if doc.get("kind") == "ConfigMap":
        yield from (k for k in doc.get("data", {}) if k.startswith("EEP_"))
    spec = doc.get("spec", {}).get("template", {}).get("spec", {})
    for c in spec.get("containers", []):
        yield from (e["name"] for e in c.get("env", []) if e["name"].startswith("EEP_"))

failures, checked = [], 0
k8s = os.path.join(root, "deploy", "k8s")
for name in sorted(os.listdir(k8s)):
    if not name.endswith(".yaml"):
        continue
    with open(os.path.join(k8s, name)) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    assert docs, f"{name}: no documents"
    for doc in docs:
        assert "kind" in doc, f"{name}: a document without kind"
        for var in env_names(doc):
            checked += 1
            if var not in knobs:
                failures.append(f"{name}: {var} is not a knob")
print(f"{checked} EEP_* settings checked")
for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures or checked == 0 else 0)
