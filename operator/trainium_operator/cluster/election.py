"""The operator's own Lease and namespace, for the leader election (runtime/leadership.py)."""

from __future__ import annotations

from typing import Any

from kubernetes import config
from kubernetes.client import V1Lease
from kubernetes.client.exceptions import ApiException

from trainium_operator.cluster.k8s import coordination, to_dict

Json = dict[str, Any]


def current_namespace() -> str:
    """The namespace of the kubeconfig's current context (outside a pod), else "default"."""
    try:
        _contexts, current = config.list_kube_config_contexts()
        return str((current or {}).get("context", {}).get("namespace") or "default")
    except (config.ConfigException, OSError, TypeError):
        return "default"


class ElectionLease:
    """The operator's own Lease, for runtime/leadership.py: unfenced (it is how a term begins),
    one try per call (the election's loop is the retry) and a short deadline (a renewal that
    takes longer than the renew deadline is worth nothing)."""

    def __init__(self, namespace: str, name: str, timeout: float = 5.0) -> None:
        self.namespace, self.name, self.timeout = namespace, name, timeout

    def get(self) -> Json | None:
        try:
            found = coordination().read_namespaced_lease(
                self.name, self.namespace, _request_timeout=self.timeout
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return to_dict(found)

    def create(self, body: Json) -> Json:
        made = coordination().create_namespaced_lease(
            self.namespace, V1Lease.model_validate(body), _request_timeout=self.timeout
        )
        return to_dict(made) or {}

    def replace(self, body: Json) -> Json:
        """PUT with the resourceVersion read: 409 when anyone wrote it since."""
        lease = V1Lease.model_validate(body)
        done = coordination().replace_namespaced_lease(
            self.name, self.namespace, lease, _request_timeout=self.timeout
        )
        return to_dict(done) or {}
