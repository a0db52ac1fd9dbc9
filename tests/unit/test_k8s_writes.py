"""A record write costs one request when the caller saw the record, and still lands when not."""

from __future__ import annotations

from typing import Any

import pytest
from test_k8s_retries import api_error

from trainium_operator.cluster import cacheio, k8s

Json = dict[str, Any]
RECORD: Json = {
    "metadata": {"name": "r", "namespace": "ns", "labels": {"a": "b"}},
    "data": {"state": "Ready", "gone": None},
}


class ConfigMaps:
    """core/v1 ConfigMaps of one namespace: the two calls put_configmap makes, recorded."""

    def __init__(self, *present: str) -> None:
        self.present = set(present)
        self.calls: list[str] = []

    def create_namespaced_config_map(self, namespace: str, body: Json, **_: Any) -> Json:
        self.calls.append("create")
        if body["metadata"]["name"] in self.present:
            raise api_error(409, "AlreadyExists")
        assert None not in body["data"].values()  # a create has no keys to remove
        self.present.add(body["metadata"]["name"])
        return body

    def patch_namespaced_config_map(self, name: str, namespace: str, body: Json, **_: Any) -> Json:
        self.calls.append("patch")
        if name not in self.present:
            raise api_error(404, "NotFound")
        return {"metadata": {"name": name}, **body}


@pytest.mark.parametrize(
    ("present", "exists", "calls"),
    [
        (True, True, ["patch"]),  # seen: one request
        (False, True, ["patch", "create"]),  # seen, deleted since: created
        (False, False, ["create"]),
        (True, False, ["create", "patch"]),  # not seen yet (a lagging watch): merged
    ],
)
def test_put_configmap(
    monkeypatch: pytest.MonkeyPatch, present: bool, exists: bool, calls: list[str]
) -> None:
    api = ConfigMaps(*(["r"] if present else []))
    monkeypatch.setattr(k8s, "core", lambda: api)
    written = cacheio.put_configmap(RECORD, exists=exists)
    assert api.calls == calls and written["data"]["state"] == "Ready"
