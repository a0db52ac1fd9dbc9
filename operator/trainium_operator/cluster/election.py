"""The operator's own Lease and namespace, for the leader election (runtime/leadership.py)."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from trainium_operator.cluster import k8s

Json = dict[str, Any]


def current_namespace() -> str:
    """The namespace of the kubeconfig's current context (outside a pod), else "default"."""
    try:
        _contexts, current = config.list_kube_config_contexts()
        return str((current or {}).get("context", {}).get("namespace") or "default")
    except (config.ConfigException, OSError, TypeError):
        return "default"


def own_client() -> client.CoordinationV1Api:
    """A client of the renewer's own: its connection never waits behind a pass's requests."""
    return client.CoordinationV1Api(k8s.side_client("lease", 2))


class ElectionLease:
    """The operator's own Lease, for runtime/leadership.py: unfenced (it is how a term begins),
    one try per call (the election's loop is the retry), a short deadline (a renewal that takes
    longer than the renew deadline is worth nothing), and answers read as plain JSON (no model
    building: less time holding the interpreter the passes share)."""

    def __init__(
        self, namespace: str, name: str, timeout: float = 5.0, api: Any | None = None
    ) -> None:
        self.namespace, self.name, self.timeout = namespace, name, timeout
        self._api = api

    @property
    def api(self) -> Any:
        if self._api is None:
            self._api = own_client()
        return self._api

    def get(self) -> Json | None:
        try:
            found = self.api.read_namespaced_lease(
                self.name, self.namespace, _request_timeout=self.timeout, _preload_content=False
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return _json(found)

    def create(self, body: Json) -> Json:
        made = self.api.create_namespaced_lease(
            self.namespace, client.V1Lease.model_validate(body),
            _request_timeout=self.timeout, _preload_content=False,
        )  # fmt: skip
        return _json(made)

    def replace(self, body: Json) -> Json:
        """PUT with the resourceVersion read: 409 when anyone wrote it since."""
        done = self.api.replace_namespaced_lease(
            self.name, self.namespace, client.V1Lease.model_validate(body),
            _request_timeout=self.timeout, _preload_content=False,
        )  # fmt: skip
        return _json(done)


def _json(response: Any) -> Json:
    """The answer's body, parsed (an empty answer: {}); its connection goes back to the pool."""
    data = getattr(response, "data", None)
    if hasattr(response, "release_conn"):
        response.release_conn()
    out = json.loads(data) if data else {}
    return out if isinstance(out, dict) else {}
