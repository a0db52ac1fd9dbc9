"""Does a set of rendered Roles/ClusterRoles and bindings allow one API request? RBAC semantics.

Mirrors the Kubernetes RBAC authorizer for resource requests: a ClusterRoleBinding grants its
ClusterRole everywhere (cluster-scoped requests and every namespace); a RoleBinding grants its
Role or ClusterRole only for requests in the binding's own namespace. A rule matches when verb,
API group and resource ("pods", or "pods/log" for a subresource) match, "*" included, and its
resourceNames (if any) contain the request's name. A ClusterRole with an aggregationRule has the
rules of every ClusterRole its selectors match (matchLabels), as the aggregation controller does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from k8s_semantics import ApiRequest

Obj = dict[str, Any]


@dataclass(frozen=True)
class Subject:
    """The identity whose bindings count: a ServiceAccount (the operator's) or a User."""

    name: str
    namespace: str = ""
    kind: str = "ServiceAccount"


def describe(r: ApiRequest) -> str:
    """One line a person can read: `create batch.volcano.sh/jobs in ns/x name`."""
    res = f"{r.resource}/{r.subresource}" if r.subresource else r.resource
    where = f" in {r.namespace}" if r.namespace else " (cluster-wide)"
    return f"{r.verb} {r.api_group or 'core'}/{res}{where}" + (f" {r.name}" if r.name else "")


def _binds(binding: Obj, subject: Subject | None) -> bool:
    if subject is None:
        return True
    default_ns = binding["metadata"].get("namespace")
    return any(
        s.get("kind") == subject.kind
        and s.get("name") == subject.name
        and (
            subject.kind != "ServiceAccount" or s.get("namespace", default_ns) == subject.namespace
        )
        for s in binding.get("subjects") or []
    )


def _matches(values: Iterable[str], wanted: str) -> bool:
    values = list(values or [])
    return "*" in values or wanted in values


def rule_allows(rule: Obj, r: ApiRequest) -> bool:
    """One PolicyRule against one request."""
    resource = f"{r.resource}/{r.subresource}" if r.subresource else r.resource
    resources = list(rule.get("resources") or [])
    # "*" matches everything, subresources included; "*/log" matches every log subresource.
    resource_ok = _matches(resources, resource) or (
        r.subresource is not None and f"*/{r.subresource}" in resources
    )
    names = rule.get("resourceNames")
    return (
        _matches(rule.get("verbs", []), r.verb)
        and _matches(rule.get("apiGroups", []), r.api_group)
        and resource_ok
        and (not names or (r.name is not None and r.name in names))
    )


def _aggregated(docs: list[Obj], role: Obj, seen: frozenset[str]) -> list[Obj]:
    """The rules of every ClusterRole matched by role's aggregationRule (recursively)."""
    out: list[Obj] = []
    for selector in role["aggregationRule"].get("clusterRoleSelectors") or []:
        if set(selector) - {"matchLabels"}:
            raise NotImplementedError(f"aggregation selector {selector}")
        wanted = (selector.get("matchLabels") or {}).items()
        for d in docs:
            md = d.get("metadata") or {}
            matches = wanted <= (md.get("labels") or {}).items()
            if d.get("kind") == "ClusterRole" and md.get("name") not in seen and matches:
                out += _rules(docs, "ClusterRole", md["name"], None, seen)
    return out


def _rules(
    docs: list[Obj], kind: str, name: str, namespace: str | None, seen: frozenset[str] = frozenset()
) -> list[Obj]:
    for d in docs:
        md = d.get("metadata") or {}
        same = d.get("kind") == kind and md.get("name") == name
        if same and kind == "ClusterRole" and d.get("aggregationRule"):
            return _aggregated(docs, d, seen | {name})
        if same and (kind == "ClusterRole" or md.get("namespace") == namespace):
            return list(d.get("rules") or [])
    return []  # a binding to a missing role grants nothing, as in Kubernetes


def grants(docs: list[Obj], subject: Subject | None = None) -> list[tuple[str | None, Obj]]:
    """Every (namespace or None for cluster-wide, rule) the bindings in docs give the subject."""
    out: list[tuple[str | None, Obj]] = []
    for b in docs:
        kind = b.get("kind")
        if kind not in ("ClusterRoleBinding", "RoleBinding") or not _binds(b, subject):
            continue
        ref, ns = b["roleRef"], b["metadata"].get("namespace")
        scope = None if kind == "ClusterRoleBinding" else ns
        role_ns = ns if ref["kind"] == "Role" else None
        out += [(scope, rule) for rule in _rules(docs, ref["kind"], ref["name"], role_ns)]
    return out


def allows(docs: list[Obj], r: ApiRequest, subject: Subject | None = None) -> bool:
    """Whether the rendered RBAC in docs lets the subject make request r."""
    for scope, rule in grants(docs, subject):
        # A RoleBinding covers only requests inside its namespace: never cluster-scoped objects
        # nor all-namespace lists/watches (namespace None).
        if scope is not None and r.namespace != scope:
            continue
        if rule_allows(rule, r):
            return True
    return False


def denied(
    docs: list[Obj], requests: Iterable[ApiRequest], subject: Subject | None = None
) -> list[str]:
    """Each distinct request the RBAC would refuse, described, sorted."""
    return sorted({describe(r) for r in requests if not allows(docs, r, subject)})
