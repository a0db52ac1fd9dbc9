"""The rendered RBAC: framework and application rules, exact verbs, no "*", no Secrets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from helmchart import by_kind, render
from k8s_semantics import ApiRequest as Req
from rbac import Subject, allows

SA = Subject("t-trainium-operator", "ops")
FRAMEWORK = {
    ("", "events"): {"create"},
    ("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"},
}
ELECTION = {  # the replicas' leader election (the default): one Lease, get/update by name
    ("coordination.k8s.io", "leases"): {"create", "get", "update"},
}
CLUSTER_SCOPED = {
    ("", "persistentvolumes"): {"get", "list", "watch", "create", "patch", "delete"},
    ("scheduling.volcano.sh", "queues"): {"get", "list", "watch"},
    ("scheduling.k8s.io", "priorityclasses"): {"get", "list", "watch"},
    # spec.elastic counts the nodes that could hold the gang; a deleted Node's gang pods go at once
    ("", "nodes"): {"get", "list", "watch"},
    # Kueue jobs: the admitted flavor's labels; the priority-class label's value
    ("kueue.x-k8s.io", "resourceflavors"): {"get", "list", "watch"},
    ("kueue.x-k8s.io", "workloadpriorityclasses"): {"get"},
    # spec.devices dra: device taints on the slices, the devices our claims hold (one watch each)
    ("resource.k8s.io", "resourceslices"): {"list", "watch"},
    ("resource.k8s.io", "resourceclaims"): {"list", "watch"},
    # our Workloads: one watch of every namespace (the operator keeps those of its namespaces)
    ("kueue.x-k8s.io", "workloads"): {"list", "watch"},
}
NAMESPACED = {
    ("trainium.dev", "trainiumjobs"): {"get", "list", "watch", "patch", "delete"},
    ("trainium.dev", "trainiumjobs/status"): {"patch"},
    ("batch.volcano.sh", "jobs"): {"get", "list", "watch", "create", "patch", "delete"},
    ("", "persistentvolumeclaims"): {"get", "list", "watch", "create"},
    ("", "configmaps"): {"get", "list", "watch", "create", "patch"},
    ("", "pods"): {"list", "watch", "delete"},  # delete, pods/status: a deleted Node's pods
    ("", "pods/status"): {"patch"},
    ("", "pods/log"): {"get"},
    ("", "events"): {"list"},
    ("coordination.k8s.io", "leases"): {"get", "list", "watch", "create", "patch", "delete"},
    ("resource.k8s.io", "resourceclaimtemplates"): {"create"},
    # Kueue jobs own a Workload per stage (watched above), mark it Finished, name a LocalQueue
    ("kueue.x-k8s.io", "workloads"): {"get", "create", "patch", "delete"},
    ("kueue.x-k8s.io", "workloads/status"): {"patch"},
    ("kueue.x-k8s.io", "localqueues"): {"get"},
}


def flat(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for res in rule["resources"]:
                out.setdefault((group, res), set()).update(rule["verbs"])
    return out


def union(*rules: dict[tuple[str, str], set[str]]) -> dict[tuple[str, str], set[str]]:
    """Verb sets per (group, resource), merged as one role holding every rule would."""
    out: dict[tuple[str, str], set[str]] = {}
    for one in rules:
        for key, verbs in one.items():
            out.setdefault(key, set()).update(verbs)
    return out


def named(docs: list[dict[str, Any]], kind: str, suffix: str) -> list[dict[str, Any]]:
    return [d for d in by_kind(docs, kind) if d["metadata"]["name"].endswith(suffix)]


def test_default_cluster_roles_are_exactly_framework_and_application(helm_bin: Path) -> None:
    docs = render("rbac.userRoles=false")
    [framework] = named(docs, "ClusterRole", "-framework")
    [application] = named(docs, "ClusterRole", "-application")
    assert flat(framework) == FRAMEWORK | ELECTION
    assert flat(application) == union(CLUSTER_SCOPED, NAMESPACED)
    assert not by_kind(docs, "Role")
    [standalone] = named(
        render("peering.enabled=false", "replicaCount=1"), "ClusterRole", "-framework"
    )
    assert flat(standalone) == FRAMEWORK
    renew = [r for r in framework["rules"] if r["verbs"] == ["get", "update"]]
    assert renew and renew[0]["resourceNames"] == ["trainium"]  # only the election's Lease


def test_watch_namespaces_moves_application_rules_into_roles(helm_bin: Path) -> None:
    docs = render("watchNamespaces={team-a,team-b}", "rbac.userRoles=false")
    [application] = named(docs, "ClusterRole", "-application")
    assert flat(application) == CLUSTER_SCOPED
    roles = by_kind(docs, "Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    assert all(flat(r) == NAMESPACED for r in roles)
    [framework] = named(docs, "ClusterRole", "-framework")
    assert ("coordination.k8s.io", "leases") in flat(framework)  # the election's, by name
    bindings = by_kind(docs, "RoleBinding")
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    job = Req("create", "batch.volcano.sh", "jobs", namespace="team-a", name="j")
    assert allows(docs, job, SA)
    assert not allows(docs, Req("create", "batch.volcano.sh", "jobs", namespace="other"), SA)
    assert allows(docs, Req("create", "", "persistentvolumes", name="pv"), SA)


#: Kubernetes' bootstrap roles, as far as aggregation goes: view -> edit -> admin.
BUILTIN = [
    {"kind": "ClusterRole", "metadata": {"name": name, "labels": labels},
     "aggregationRule": {"clusterRoleSelectors": [
         {"matchLabels": {f"rbac.authorization.k8s.io/aggregate-to-{name}": "true"}}]}}
    for name, labels in [
        ("admin", {}),
        ("edit", {"rbac.authorization.k8s.io/aggregate-to-admin": "true"}),
        ("view", {"rbac.authorization.k8s.io/aggregate-to-edit": "true"}),
    ]
]  # fmt: skip
TJ = ("trainium.dev", "trainiumjobs")


def bound(user: str, role: str, ns: str) -> dict[str, Any]:
    return {"kind": "RoleBinding", "metadata": {"name": f"{user}-{role}", "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": role},
            "subjects": [{"kind": "User", "name": user}]}  # fmt: skip


def test_namespace_users_get_trainiumjobs_through_edit_view_and_admin(helm_bin: Path) -> None:
    docs = render() + BUILTIN + [bound("ed", "edit", "team-a"), bound("vi", "view", "team-a"),
                                 bound("ad", "admin", "team-a")]  # fmt: skip
    ed, vi, ad = (Subject(u, kind="User") for u in ("ed", "vi", "ad"))
    create = Req("create", *TJ, namespace="team-a", name="bert")
    for user in (ed, ad):
        assert allows(docs, create, user)
        assert allows(docs, Req("delete", *TJ, namespace="team-a", name="bert"), user)
        assert not allows(docs, Req("create", *TJ, namespace="team-b", name="bert"), user)
    assert not allows(docs, create, vi)
    for verb in ("get", "list", "watch"):
        assert allows(docs, Req(verb, *TJ, namespace="team-a"), vi)
    assert allows(docs, Req("get", *TJ, "status", "team-a", "bert"), vi)
    assert not allows(docs, Req("patch", *TJ, "status", "team-a", "bert"), ed)  # operator's


def test_user_roles_can_be_left_out(helm_bin: Path) -> None:
    names = {d["metadata"]["name"] for d in by_kind(render("rbac.userRoles=false"), "ClusterRole")}
    assert names == {"t-trainium-operator-framework", "t-trainium-operator-application"}


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


KUEUE = {k for k in CLUSTER_SCOPED | NAMESPACED if k[0] == "kueue.x-k8s.io"}


def test_kueue_rules_can_be_left_out(helm_bin: Path) -> None:
    """rbac.kueue=false: not one kueue.x-k8s.io rule, cluster-wide or per namespace (issue 43)."""
    for extra in ([], ["watchNamespaces={team-a}"]):
        docs = render("rbac.kueue=false", "rbac.userRoles=false", *extra)
        for role in by_kind(docs, "ClusterRole") + by_kind(docs, "Role"):
            assert not set(flat(role)) & KUEUE, role["metadata"]["name"]
    [application] = named(render("rbac.kueue=false"), "ClusterRole", "-application")
    assert set(flat(application)) == set(CLUSTER_SCOPED | NAMESPACED) - KUEUE
