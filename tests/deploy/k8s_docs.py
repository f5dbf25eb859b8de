"""k8s_docs.py - what the deploy tests share: the manifests of deploy/k8s/ and their pod specs.

pod_specs(doc) yields (where, pod spec) for every pod template a document holds, whatever the
workload kind: Deployment, StatefulSet, Job (spec.template), and the JobSet (spec.replicatedJobs[]
.template, a Job template: .spec.template), so the tests check the workers too."""
import os

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
K8S = os.path.join(ROOT, "deploy", "k8s")


def manifest_files():
    return sorted(f for f in os.listdir(K8S) if f.endswith(".yaml") and f != "kustomization.yaml")


def load(name):
    with open(os.path.join(K8S, name)) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def pod_specs(doc):
    spec = doc.get("spec") or {}
    kind = doc.get("kind")
    if kind in ("Deployment", "StatefulSet", "Job", "DaemonSet", "ReplicaSet"):
        yield "%s/%s" % (kind, doc["metadata"]["name"]), spec.get("template", {}).get("spec", {})
    elif kind == "JobSet":
        for rj in spec.get("replicatedJobs", []):
            yield ("JobSet/%s/%s" % (doc["metadata"]["name"], rj.get("name")),
                   rj.get("template", {}).get("spec", {}).get("template", {}).get("spec", {}))


def pod_labels(doc):
    """The labels of the pods a workload makes (its templates' metadata.labels)."""
    spec = doc.get("spec") or {}
    if doc.get("kind") == "JobSet":
        return [rj["template"]["spec"]["template"].get("metadata", {}).get("labels", {})
                for rj in spec.get("replicatedJobs", [])]
    if "template" in spec:
        return [spec["template"].get("metadata", {}).get("labels", {})]
    return []


def config_map():
    """data of the eep-config ConfigMap (config.yaml)."""
    for d in load("config.yaml"):
        if d.get("kind") == "ConfigMap":
            return d.get("data", {})
    return {}
