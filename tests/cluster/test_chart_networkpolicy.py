"""The chart's NetworkPolicies, applied to a real API server, select the real pods (issue 26).

The API server validates the policies and evaluates their selectors (as `kubectl get -l`): the
operator's policy must select the pods of the chart's Deployment, the training policy a pod the
operator created through a real Volcano job, and each `from`/`to` peer the other side. The
tier has no CNI, so what is checked is what a CNI would be given, not packets.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from cluster import Cluster, wait_until
from harness import OperatorProcess
from helmchart import CHART, helm
from jobs import create, fsx_claim, get_json, small_job
from kubelet import Behavior, FakeKubelet
from trainium_operator.api import naming

Obj = dict[str, Any]
#: The release the session installed (tests/cluster/conftest.py).
RELEASE, OPERATOR_NS = "trainium-operator", "trainium-system"


def label_selector(selector: Obj) -> str:
    """A matchLabels LabelSelector as `kubectl -l` text."""
    assert set(selector) <= {"matchLabels"}, selector
    return ",".join(f"{k}={v}" for k, v in selector.get("matchLabels", {}).items())


def pods_selected(cluster: Cluster, namespace: str, selector: Obj) -> set[str]:
    proc = cluster.kubectl("get", "pods", "-n", namespace, "-l", label_selector(selector),
                           "-o", "json")  # fmt: skip
    return {p["metadata"]["name"] for p in json.loads(proc.stdout)["items"]}


def namespaces_selected(cluster: Cluster, selector: Obj) -> set[str]:
    proc = cluster.kubectl("get", "namespaces", "-l", label_selector(selector), "-o", "json")
    return {n["metadata"]["name"] for n in json.loads(proc.stdout)["items"]}


@pytest.fixture
def operator_pod(cluster: Cluster, installed: str) -> Iterator[str]:
    """A pod of the chart's Deployment: its ReplicaSet's, else one made from its template."""
    deployment = get_json(cluster, "deployment", "-n", OPERATOR_NS, RELEASE)
    template = deployment["spec"]["template"]
    existing = pods_selected(cluster, OPERATOR_NS, deployment["spec"]["selector"])
    if existing:
        yield sorted(existing)[0]
        return
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "operator-like", "namespace": OPERATOR_NS,
                        "labels": template["metadata"]["labels"]},
           "spec": template["spec"]}  # fmt: skip
    cluster.apply(pod)
    yield "operator-like"
    cluster.kubectl("delete", "pod", "-n", OPERATOR_NS, "operator-like", "--wait=false")


def test_policies_select_the_operators_and_the_training_pods(
    cluster: Cluster,
    kubelet: FakeKubelet,
    running_operator: OperatorProcess,
    ns: str,
    operator_pod: str,
) -> None:
    fsx_claim(cluster, ns)
    kubelet.plan({}, Behavior(outcome="RunForever"), namespace=ns)
    create(cluster, small_job("watched", ns))
    vcjob = naming.vcjob_name("watched", "train")
    trainer = naming.pod_name(vcjob, 0)
    wait_until(lambda: trainer in kubelet.running(ns), 120, f"pod {trainer} running")

    text = helm("template", RELEASE, str(CHART), "-n", OPERATOR_NS,
                "--set", f"watchNamespaces={{{ns}}}", "--set", "networkPolicy.egress.enabled=true",
                "--show-only", "templates/networkpolicy.yaml").stdout  # fmt: skip
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=text)  # validated by the server
    found = {d["metadata"]["namespace"]: d for d in yaml.safe_load_all(text) if d}
    try:
        mine, training = found[OPERATOR_NS]["spec"], found[ns]["spec"]
        assert pods_selected(cluster, OPERATOR_NS, mine["podSelector"]) >= {operator_pod}
        assert pods_selected(cluster, ns, training["podSelector"]) == {trainer}

        # In: the operator's pods, on the port the trainer's container names `metrics`.
        operator_rule, gang_rule = training["ingress"]
        [peer] = operator_rule["from"]
        assert namespaces_selected(cluster, peer["namespaceSelector"]) == {OPERATOR_NS}
        assert operator_pod in pods_selected(cluster, OPERATOR_NS, peer["podSelector"])
        pod = get_json(cluster, "pod", "-n", ns, trainer)
        ports = {p["name"]: p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
        [port] = operator_rule["ports"]
        assert port["port"] in ports
        [peer] = gang_rule["from"]
        assert trainer in pods_selected(cluster, ns, peer["podSelector"])

        # Out (networkPolicy.egress.enabled): the same pod and port from the operator's side.
        [to_trainers] = [r for r in mine["egress"] if "podSelector" in str(r.get("to"))]
        [peer] = to_trainers["to"]
        assert ns in namespaces_selected(cluster, peer["namespaceSelector"])
        assert pods_selected(cluster, ns, peer["podSelector"]) == {trainer}
        assert [p["port"] for p in to_trainers["ports"]] == [ports[port["port"]]]
    finally:
        kubelet.finish(ns)
        cluster.kubectl("delete", "-f", "-", "--wait=false", stdin=text, check=False)
