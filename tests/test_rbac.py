"""Unit tests of the RBAC checker (tests/rbac.py): no helm, no server."""

from __future__ import annotations

from typing import Any

from k8s_semantics import ApiRequest as Req
from rbac import Subject, allows, denied, describe, rule_allows

SA = Subject("op", "ops")


def cluster_role(name: str, *rules: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"kind": "ClusterRole", "metadata": {"name": name}, "rules": list(rules)},
        {
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": "op", "namespace": "ops"}],
        },
    ]


def role(ns: str, *rules: dict[str, Any], ref_kind: str = "Role") -> list[dict[str, Any]]:
    docs = [
        {"kind": "RoleBinding", "metadata": {"name": "app", "namespace": ns},
         "roleRef": {"kind": ref_kind, "name": "app"},
         "subjects": [{"kind": "ServiceAccount", "name": "op", "namespace": "ops"}]},
    ]  # fmt: skip
    if ref_kind == "Role":
        docs.append({"kind": "Role", "metadata": {"name": "app", "namespace": ns}, "rules": rules})
    return docs


PODS = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}
LOGS = {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}
STATUS = {"apiGroups": ["trainium.dev"], "resources": ["trainiumjobs/status"], "verbs": ["patch"]}


def test_verb_group_and_resource_must_all_match() -> None:
    assert rule_allows(PODS, Req("get", "", "pods", namespace="a"))
    assert not rule_allows(PODS, Req("delete", "", "pods", namespace="a"))
    assert not rule_allows(PODS, Req("get", "apps", "pods", namespace="a"))
    assert not rule_allows(PODS, Req("get", "", "services", namespace="a"))


def test_subresource_needs_its_own_rule() -> None:
    assert not rule_allows(PODS, Req("get", "", "pods", "log", "a"))
    assert rule_allows(LOGS, Req("get", "", "pods", "log", "a"))
    assert not rule_allows(LOGS, Req("get", "", "pods", None, "a"))
    assert rule_allows(STATUS, Req("patch", "trainium.dev", "trainiumjobs", "status", "a", "j"))
    assert not rule_allows(STATUS, Req("patch", "trainium.dev", "trainiumjobs", None, "a", "j"))


def test_wildcards_follow_kubernetes() -> None:
    star = {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}
    assert rule_allows(star, Req("delete", "x.io", "things", "status"))
    any_log = {"apiGroups": [""], "resources": ["*/log"], "verbs": ["get"]}
    assert rule_allows(any_log, Req("get", "", "pods", "log", "a"))
    assert not rule_allows(any_log, Req("get", "", "pods", None, "a"))


def test_resource_names_restrict_to_named_requests() -> None:
    rule = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"],
            "resourceNames": ["one"]}  # fmt: skip
    assert rule_allows(rule, Req("get", "", "configmaps", namespace="a", name="one"))
    assert not rule_allows(rule, Req("get", "", "configmaps", namespace="a", name="two"))
    assert not rule_allows(rule, Req("list", "", "configmaps", namespace="a"))


def test_cluster_role_binding_covers_cluster_scope_and_every_namespace() -> None:
    docs = cluster_role("c", PODS, {"apiGroups": [""], "resources": ["persistentvolumes"],
                                    "verbs": ["create"]})  # fmt: skip
    assert allows(docs, Req("list", "", "pods"), SA)  # all namespaces
    assert allows(docs, Req("list", "", "pods", namespace="anything"), SA)
    assert allows(docs, Req("create", "", "persistentvolumes"), SA)


def test_role_binding_covers_only_its_namespace() -> None:
    docs = role("team-a", PODS)
    assert allows(docs, Req("get", "", "pods", namespace="team-a", name="p"), SA)
    assert not allows(docs, Req("get", "", "pods", namespace="team-b", name="p"), SA)
    assert not allows(docs, Req("list", "", "pods"), SA)  # all-namespace list needs a ClusterRole


def test_role_binding_to_a_cluster_role_is_still_namespaced() -> None:
    docs = [*cluster_role("app", PODS)[:1], *role("team-a", ref_kind="ClusterRole")]
    assert allows(docs, Req("get", "", "pods", namespace="team-a"), SA)
    assert not allows(docs, Req("get", "", "pods", namespace="team-b"), SA)
    assert not allows(docs, Req("get", "", "pods"), SA)


def test_a_role_in_another_namespace_or_missing_grants_nothing() -> None:
    docs = role("team-a", PODS)
    docs[1]["metadata"]["namespace"] = "elsewhere"  # Role not in the binding's namespace
    assert not allows(docs, Req("get", "", "pods", namespace="team-a"), SA)
    assert not allows(role("team-a", ref_kind="ClusterRole"), Req("get", "", "pods", "team-a"), SA)


def test_only_bindings_of_the_subject_count() -> None:
    docs = cluster_role("c", PODS)
    assert not allows(docs, Req("get", "", "pods", namespace="a"), Subject("other", "ops"))
    assert not allows(docs, Req("get", "", "pods", namespace="a"), Subject("op", "elsewhere"))
    assert allows(docs, Req("get", "", "pods", namespace="a"))  # no subject: any binding


def test_denied_names_each_distinct_refused_request() -> None:
    docs = cluster_role("c", PODS)
    reqs = [
        Req("get", "", "pods", namespace="a"),
        Req("delete", "", "pods", namespace="a"),
        Req("delete", "", "pods", namespace="a"),
        Req("get", "", "pods", "log", "a", "p"),
    ]
    assert denied(docs, reqs, SA) == ["delete core/pods in a", "get core/pods/log in a p"]
    assert describe(Req("create", "", "persistentvolumes")) == (
        "create core/persistentvolumes (cluster-wide)"
    )


def aggregating(name: str, label: str, **labels: str) -> dict[str, Any]:
    """A built-in-style ClusterRole whose rules come from the roles carrying label=true."""
    return {"kind": "ClusterRole", "metadata": {"name": name, "labels": labels},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {label: "true"}}]},
            "rules": []}  # fmt: skip


def user_binding(user: str, role: str, ns: str) -> dict[str, Any]:
    return {"kind": "RoleBinding", "metadata": {"name": f"{user}-{role}", "namespace": ns},
            "roleRef": {"kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "User", "name": user}]}  # fmt: skip


def test_aggregated_cluster_role_has_the_rules_of_the_roles_it_selects() -> None:
    piece = {"kind": "ClusterRole", "rules": [PODS],
             "metadata": {"name": "pods-reader", "labels": {"agg/view": "true"}}}  # fmt: skip
    other = {"kind": "ClusterRole", "rules": [LOGS], "metadata": {"name": "logs", "labels": {}}}
    docs = [piece, other, aggregating("view", "agg/view", **{"agg/edit": "true"}),
            aggregating("edit", "agg/edit"), user_binding("alice", "edit", "a")]  # fmt: skip
    alice = Subject("alice", kind="User")
    assert allows(docs, Req("list", "", "pods", namespace="a"), alice)  # edit <- view <- piece
    assert not allows(docs, Req("get", "", "pods", "log", "a"), alice)  # not selected
    assert not allows(docs, Req("list", "", "pods", namespace="b"), alice)
    assert not allows(docs, Req("list", "", "pods", namespace="a"), Subject("alice"))  # an SA
