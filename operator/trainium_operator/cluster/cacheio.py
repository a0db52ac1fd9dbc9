"""The managed compile cache's objects: each entry's record (a ConfigMap) and its writer's Lease.

Thin calls, as in k8s.py: create (409 = someone else holds it), read, a guarded take-over, a
merge of the record's data.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from trainium_operator.cluster import k8s

Json = dict[str, Any]


def get_configmap(namespace: str, name: str) -> Json | None:
    """A ConfigMap, or None."""
    return k8s.to_dict(k8s.missing_is_none(k8s.core().read_namespaced_config_map, name, namespace))


def create_configmap(body: Json) -> Json | None:
    """Create a ConfigMap; the created object, None when it existed (409)."""
    ns = body["metadata"]["namespace"]
    return k8s.exists_is_ok(k8s.core().create_namespaced_config_map, ns, body)


def get_lease(namespace: str, name: str) -> Json | None:
    """A Lease, or None."""
    return k8s.to_dict(
        k8s.missing_is_none(k8s.coordination().read_namespaced_lease, name, namespace)
    )


def create_lease(body: Json) -> Json:
    """Create a Lease; an existing one is NOT success here: someone else holds it (409)."""
    ns = body["metadata"]["namespace"]
    return k8s.to_dict(k8s.request(k8s.coordination().create_namespaced_lease, ns, body)) or {}


def take_lease(observed: Json, holder: str, now_micro: str) -> Json:
    """Take over a stale Lease; guarded by the resourceVersion read (409 when it moved)."""
    md, spec = observed["metadata"], observed.get("spec") or {}
    body = {
        "metadata": {"resourceVersion": md["resourceVersion"]},
        "spec": {
            "holderIdentity": holder,
            "acquireTime": now_micro,
            "renewTime": now_micro,
            "leaseTransitions": int(spec.get("leaseTransitions") or 0) + 1,
        },
    }
    patch = k8s.coordination().patch_namespaced_lease
    args = (md["name"], md["namespace"], body)
    return k8s.to_dict(k8s.request(patch, *args, _content_type=k8s.MERGE_PATCH, guarded=True)) or {}


def delete_lease(observed: Json) -> None:
    """Release a Lease we hold (gone already is fine); preconditioned on its uid."""
    md = observed["metadata"]
    body = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=md["uid"]))
    delete = k8s.coordination().delete_namespaced_lease
    k8s.missing_is_none(delete, md["name"], md["namespace"], body=body, guarded=True)


def put_configmap(body: Json, *, exists: bool = False) -> Json:
    """Create a ConfigMap, or merge its data into the existing one (None values remove keys).

    `exists`: the caller saw it, so the merge goes first (one request, not a refused create);
    a ConfigMap gone meanwhile is created. Returns the ConfigMap as written.
    """
    if exists:
        try:
            return _merge_configmap(body)
        except ApiException as exc:
            if exc.status != 404:
                raise
    data = {k: v for k, v in (body.get("data") or {}).items() if v is not None}
    created = create_configmap({**body, "data": data})
    return created if created is not None else _merge_configmap(body)


def _merge_configmap(body: Json) -> Json:
    """Merge-patch a ConfigMap's labels and data (a missing one answers 404)."""
    md = body["metadata"]
    patch = {"metadata": {"labels": md.get("labels", {})}, "data": body.get("data", {})}
    out = k8s.request(
        k8s.core().patch_namespaced_config_map, md["name"], md["namespace"], patch,
        _content_type=k8s.MERGE_PATCH,
    )  # fmt: skip
    return k8s.to_dict(out) or {}
