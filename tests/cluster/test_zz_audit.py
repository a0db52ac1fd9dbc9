"""Session-end check over the tier's audit log (named zz so it runs after every scenario)."""

from __future__ import annotations

from cluster import Cluster
from harness import OperatorProcess

OPERATOR_USER = "system:serviceaccount:trainium-system:trainium-operator"


def test_the_operator_was_never_refused(cluster: Cluster, operator: OperatorProcess) -> None:
    """Zero 403s for the operator's ServiceAccount: the chart's RBAC covers every request."""
    requests = [e for e in cluster.audit() if e.get("user", {}).get("username") == OPERATOR_USER]
    assert requests, "the operator made no request under its ServiceAccount"
    refused = sorted(
        {
            f"{e['verb']} {e.get('objectRef', {}).get('resource')} {e['requestURI']}"
            for e in requests
            if e.get("annotations", {}).get("authorization.k8s.io/decision") == "forbid"
            or (e.get("responseStatus", {}).get("code") == 403 and not terminating(e))
        }
    )
    assert refused == []


def terminating(event: dict) -> bool:
    """A 403 from NamespaceLifecycle (a test's namespace being deleted), not from RBAC."""
    message = event.get("responseStatus", {}).get("message") or ""
    return "because it is being terminated" in message
