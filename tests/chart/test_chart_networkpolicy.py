"""The chart's NetworkPolicies select what the operator really creates and allow what it uses.

The training pods' labels and ports come from the operator's own builder (a TorchX dry run of
the tutorial job), the operator pods' from the chart's Deployment: a renamed label or port on
either side fails here. tests/cluster/test_chart_networkpolicy.py checks the same selectors on a
real API server against a pod the operator created through Volcano.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from helmchart import by_kind, one, render
from trainium_operator.api.spec import parse
from trainium_operator.manifests import builders, ownership
from trainium_trainer import contract

REPO = Path(__file__).resolve().parents[2]
Obj = dict[str, Any]


def policies(*sets: str) -> dict[tuple[str, str], Obj]:
    """{(namespace, name): NetworkPolicy} of the chart rendered in namespace `ops`."""
    docs = by_kind(render(*sets), "NetworkPolicy")
    return {(d["metadata"]["namespace"], d["metadata"]["name"]): d for d in docs}


def selects(selector: Obj, labels: dict[str, str]) -> bool:
    """Whether a matchLabels-only LabelSelector selects these labels."""
    assert set(selector) <= {"matchLabels"}, selector
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def pod_templates(stage: str) -> list[Obj]:
    """The pod templates of the Volcano job the operator builds for the tutorial's stage."""
    doc = yaml.safe_load((REPO / "examples" / "bert-large-pretrain.yaml").read_text())
    owner = ownership.Owner(doc["metadata"]["name"], "team-a", "uid-1")
    job = builders.build_vcjob(parse(doc), owner, stage)
    return [task["template"] for task in job["spec"]["tasks"]]


def train_pods() -> list[Obj]:
    return pod_templates("train")


def operator_pod_labels(*sets: str) -> dict[str, str]:
    deployment = one(render(*sets), "Deployment")
    labels: dict[str, str] = deployment["spec"]["template"]["metadata"]["labels"]
    return labels


def test_on_by_default_ingress_only_on_the_ports_the_operator_serves() -> None:
    [policy] = policies().values()
    assert policy["metadata"]["namespace"] == "ops"
    assert selects(policy["spec"]["podSelector"], operator_pod_labels())
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert "egress" not in policy["spec"]
    container = one(render(), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    served = {p["name"] for p in container["ports"]}
    allowed = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    assert allowed == served == {"health", "metrics"}
    # Any source: the kubelet's probes come from the node, Prometheus from anywhere.
    assert all("from" not in rule for rule in policy["spec"]["ingress"])
    assert not policies("networkPolicy.enabled=false")


def test_metrics_sources_can_be_narrowed() -> None:
    narrowed = "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.team=mon"
    [policy] = policies(narrowed).values()
    health, metrics = policy["spec"]["ingress"]
    assert "from" not in health
    assert metrics["from"] == [{"namespaceSelector": {"matchLabels": {"team": "mon"}}}]


def test_training_policy_selects_the_training_pods_and_lets_the_operator_in() -> None:
    found = policies("watchNamespaces={team-a,team-b}")
    assert set(found) == {
        ("ops", "t-trainium-operator"),
        ("team-a", "t-trainium-operator-training"),
        ("team-b", "t-trainium-operator-training"),
    }
    policy = found[("team-a", "t-trainium-operator-training")]["spec"]
    assert policy["policyTypes"] == ["Ingress"]
    for pod in pod_templates("train"):
        assert selects(policy["podSelector"], pod["metadata"]["labels"])
        ports = {p["name"]: p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
        assert ports[contract.METRICS_PORT_NAME] == contract.METRICS_PORT
    for pod in pod_templates("precompile"):  # no metrics there: left alone
        assert not selects(policy["podSelector"], pod["metadata"]["labels"])
    operator, gang = policy["ingress"]
    [peer] = operator["from"]
    assert peer["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "ops"}}
    assert selects(peer["podSelector"], operator_pod_labels())
    assert operator["ports"] == [{"port": contract.METRICS_PORT_NAME, "protocol": "TCP"}]
    # The gang's pods reach each other on every port (rendezvous, collectives' bootstrap).
    [peer] = gang["from"]
    assert set(peer) == {"podSelector"} and "ports" not in gang
    assert all(selects(peer["podSelector"], p["metadata"]["labels"]) for p in train_pods())


def test_training_namespaces_are_a_value_and_none_when_watching_everything() -> None:
    assert [ns for ns, _ in policies()] == ["ops"]
    found = policies("networkPolicy.training.namespaces={ml}", "watchNamespaces={team-a}")
    assert sorted(ns for ns, _ in found) == ["ml", "ops"]


def test_prometheus_keeps_scraping_the_trainers_with_the_pod_monitor() -> None:
    def rules(*sets: str) -> list[Obj]:
        found = policies("watchNamespaces={team-a}", *sets)
        return list(found[("team-a", "t-trainium-operator-training")]["spec"]["ingress"])

    assert len(rules()) == 2
    *_, scrape = rules("metrics.podMonitor.enabled=true")
    assert scrape == {"ports": [{"port": "metrics", "protocol": "TCP"}]}  # any source
    *_, scrape = rules("networkPolicy.training.metricsFrom[0].podSelector.matchLabels.app=prom")
    assert scrape["from"] == [{"podSelector": {"matchLabels": {"app": "prom"}}}]


def test_egress_is_off_by_default_and_lists_what_the_operator_talks_to() -> None:
    [policy] = policies("networkPolicy.egress.enabled=true").values()
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    dns, api, credentials, metrics = spec["egress"]
    assert dns == {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]}
    assert api == {"ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]}
    assert {p["port"] for p in credentials["ports"]} == {80}
    assert {t["ipBlock"]["cidr"] for t in credentials["to"]} >= {
        "169.254.169.254/32",  # instance metadata
        "169.254.170.23/32",  # EKS Pod Identity agent
    }
    [peer] = metrics["to"]
    assert peer["namespaceSelector"] == {}
    assert all(selects(peer["podSelector"], p["metadata"]["labels"]) for p in train_pods())
    assert metrics["ports"] == [{"port": contract.METRICS_PORT, "protocol": "TCP"}]
    [policy] = policies(
        "networkPolicy.egress.enabled=true", "networkPolicy.egress.apiServerPorts={8443}",
        "networkPolicy.egress.extraRules[0].ports[0].port=3128",
    ).values()  # fmt: skip
    _, api, *_, proxy = policy["spec"]["egress"]
    assert [p["port"] for p in api["ports"]] == [443, 8443]
    assert proxy == {"ports": [{"port": 3128}]}
