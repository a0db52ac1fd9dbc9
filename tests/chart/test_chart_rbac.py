"""The rendered RBAC: framework and application rules, exact verbs, no "*", no Secrets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from helmchart import by_kind, render
from k8s_semantics import ApiRequest as Req
from rbac import Subject, allows

SA = Subject("t-trainium-operator", "ops")
FRAMEWORK = {
    ("", "events"): {"create", "patch"},
    ("events.k8s.io", "events"): {"create", "patch"},
    ("apiextensions.k8s.io", "customresourcedefinitions"): {"get", "list", "watch"},
    ("", "namespaces"): {"list", "watch"},
}
CLUSTER_SCOPED = {
    ("", "persistentvolumes"): {"get", "create", "delete"},
    ("scheduling.volcano.sh", "queues"): {"get", "list", "watch"},
}
NAMESPACED = {
    ("trainium.dev", "trainiumjobs"): {"get", "list", "watch", "patch", "delete"},
    ("trainium.dev", "trainiumjobs/status"): {"get", "patch", "update"},
    ("batch.volcano.sh", "jobs"): {"get", "list", "watch", "create", "delete"},
    ("", "persistentvolumeclaims"): {"get", "list", "watch", "create"},
    ("", "configmaps"): {"get", "create"},
    ("", "pods"): {"get", "list", "watch"},
    ("", "pods/log"): {"get"},
}


def flat(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for res in rule["resources"]:
                out.setdefault((group, res), set()).update(rule["verbs"])
    return out


def named(docs: list[dict[str, Any]], kind: str, suffix: str) -> list[dict[str, Any]]:
    return [d for d in by_kind(docs, kind) if d["metadata"]["name"].endswith(suffix)]


def test_default_cluster_roles_are_exactly_framework_and_application(helm_bin: Path) -> None:
    docs = render()
    [framework] = named(docs, "ClusterRole", "-framework")
    [application] = named(docs, "ClusterRole", "-application")
    assert flat(framework) == FRAMEWORK
    assert flat(application) == CLUSTER_SCOPED | NAMESPACED
    assert not by_kind(docs, "Role")


def test_watch_namespaces_moves_application_rules_into_roles(helm_bin: Path) -> None:
    docs = render("watchNamespaces={team-a,team-b}")
    [application] = named(docs, "ClusterRole", "-application")
    assert flat(application) == CLUSTER_SCOPED
    roles = by_kind(docs, "Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    assert all(flat(r) == NAMESPACED for r in roles)
    bindings = by_kind(docs, "RoleBinding")
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    job = Req("create", "batch.volcano.sh", "jobs", namespace="team-a", name="j")
    assert allows(docs, job, SA)
    assert not allows(docs, Req("create", "batch.volcano.sh", "jobs", namespace="other"), SA)
    assert allows(docs, Req("create", "", "persistentvolumes", name="pv"), SA)


def test_no_wildcards_no_secrets_every_binding_names_the_service_account(helm_bin: Path) -> None:
    docs = render() + render("watchNamespaces={team-a}")
    for role in by_kind(docs, "ClusterRole") + by_kind(docs, "Role"):
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert not [v for v in rule[field] if "*" in v], rule
            assert "secrets" not in rule["resources"]
    for b in by_kind(docs, "ClusterRoleBinding") + by_kind(docs, "RoleBinding"):
        assert b["subjects"] == [
            {"kind": "ServiceAccount", "name": SA.name, "namespace": SA.namespace}
        ]
