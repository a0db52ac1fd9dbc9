"""Thin I/O on Kueue's objects: Workloads (create, spec.active, status writes, delete),
flavors, queues, classes; lists and watches of a kind (cluster/ownwatch.py)."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from trainium_operator.cluster import k8s
from trainium_operator.manifests.workload import GROUP, VERSION

Json = dict[str, Any]
WORKLOADS = "workloads"
APPLY_PATCH = "application/apply-patch+yaml"


def get_workload(namespace: str, name: str) -> Json | None:
    """A Workload, or None (also when Kueue's API is not served)."""
    args = (GROUP, VERSION, namespace, WORKLOADS, name)
    return k8s.missing_is_none(k8s.custom().get_namespaced_custom_object, *args)  # type: ignore[no-any-return]


def create_workload(body: Json) -> Json | None:
    """Create a Workload; the created object, None when it existed (409). A 404 (Kueue's API
    not served) is raised: the lifecycle reports it."""
    args = (GROUP, VERSION, body["metadata"]["namespace"], WORKLOADS, body)
    return k8s.exists_is_ok(k8s.custom().create_namespaced_custom_object, *args)


def finish_workload(workload: Json, condition: Json) -> Json:
    """Add the Finished condition to the Workload's status, guarded by the version read: Kueue
    writes the same list (a lost race is a 409, retried after reading again)."""
    md = workload["metadata"]
    conds = [
        c
        for c in ((workload.get("status") or {}).get("conditions") or ())
        if c.get("type") != condition["type"]
    ]
    body: Json = {
        "metadata": {"resourceVersion": md["resourceVersion"]},
        "status": {"conditions": [*conds, condition]},
    }
    return _merge_patch(k8s.custom().patch_namespaced_custom_object_status, md, body)


def set_active(workload: Json, active: bool) -> Json:
    """Merge-patch the Workload's spec.active (runPolicy.suspend), guarded by the version
    read: a lost race is a 409, decided again after reading again."""
    md = workload["metadata"]
    guard = {"resourceVersion": md["resourceVersion"]}
    body: Json = {"metadata": guard, "spec": {"active": active}}
    return _merge_patch(k8s.custom().patch_namespaced_custom_object, md, body)


def ungate_workload(workload: Json, patch: Json) -> Json:
    """Merge-patch the Workload's admission-gated-by annotation (manifests/workload.ungated),
    guarded by the version read."""
    return _merge_patch(k8s.custom().patch_namespaced_custom_object, workload["metadata"], patch)


def _merge_patch(method: Any, md: Json, body: Json) -> Json:
    """One guarded merge patch of a Workload (its body carries the resourceVersion read)."""
    out = k8s.request(
        method, GROUP, VERSION, md["namespace"], WORKLOADS, md["name"], body,
        _content_type=k8s.MERGE_PATCH, guarded=True,
    )  # fmt: skip
    return out or {}  # type: ignore[no-any-return]


def drop_finalizer(workload: Json, finalizer: str) -> Json:
    """Remove one finalizer from the Workload, guarded by the version read (a lost race is a
    409: read again); the object after."""
    md = workload["metadata"]
    kept = [f for f in md.get("finalizers") or () if f != finalizer]
    body: Json = {"metadata": {"resourceVersion": md["resourceVersion"], "finalizers": kept}}
    return _merge_patch(k8s.custom().patch_namespaced_custom_object, md, body)


def apply_workload_status(body: Json, manager: str) -> Json:
    """Server-side apply of Workload status fields as `manager`, forced, as Kueue applies
    them; the body's resourceVersion guards it (a lost race is a 409: read again)."""
    md = body["metadata"]
    out = k8s.request(
        k8s.custom().patch_namespaced_custom_object_status,
        GROUP, VERSION, md["namespace"], WORKLOADS, md["name"], body,
        _content_type=APPLY_PATCH, field_manager=manager, force=True, guarded=True,
    )  # fmt: skip
    return out or {}  # type: ignore[no-any-return]


def delete_workload(namespace: str, name: str, uid: str) -> None:
    """Delete the Workload of uid; gone already (404), or another under the name (409): fine."""
    options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid))
    args = (GROUP, VERSION, namespace, WORKLOADS, name)
    try:
        k8s.missing_is_none(
            k8s.custom().delete_namespaced_custom_object, *args, body=options, guarded=True
        )
    except ApiException as exc:
        if exc.status != 409:
            raise


def get_flavor(name: str) -> Json | None:
    """A ResourceFlavor (cluster-scoped), or None."""
    args = (GROUP, VERSION, "resourceflavors", name)
    return k8s.missing_is_none(k8s.custom().get_cluster_custom_object, *args)  # type: ignore[no-any-return]


def get_local_queue(namespace: str, name: str) -> Json | None:
    """A LocalQueue, or None."""
    args = (GROUP, VERSION, namespace, "localqueues", name)
    return k8s.missing_is_none(k8s.custom().get_namespaced_custom_object, *args)  # type: ignore[no-any-return]


def get_priority_class(name: str) -> Json | None:
    """A WorkloadPriorityClass (cluster-scoped), or None."""
    args = (GROUP, VERSION, "workloadpriorityclasses", name)
    return k8s.missing_is_none(k8s.custom().get_cluster_custom_object, *args)  # type: ignore[no-any-return]


@functools.cache
def _watching() -> client.ApiClient:
    """Our watches' client (ownwatch.py): as kopf's watches, they run on a standby replica too,
    and the audit log tells them from a pass's requests by their agent's "(watch)"."""
    return k8s.side_client("watch", 4)


def list_objects(plural: str, selector: str) -> tuple[list[Json], str]:
    """Every object of a Kueue kind (all namespaces) and the list's resourceVersion; a 404
    (Kueue's API not served) is raised."""
    listing = client.CustomObjectsApi(_watching()).list_cluster_custom_object
    out = k8s.request(listing, GROUP, VERSION, plural, label_selector=selector)
    meta = out.get("metadata") or {}
    return list(out.get("items") or []), str(meta.get("resourceVersion") or "")


def watch_objects(plural: str, selector: str, since: str, seconds: int) -> Iterator[Json]:
    """A kind's watch events from `since` until the server ends the request (`seconds`); an
    error event (410 Gone, 404 once the CRD is deleted) is raised as ApiException."""
    stream = watch.Watch().stream(
        client.CustomObjectsApi(_watching()).list_cluster_custom_object, GROUP, VERSION, plural,
        label_selector=selector, resource_version=since, timeout_seconds=seconds,
        allow_watch_bookmarks=True, _request_timeout=(k8s.TIMEOUT, seconds + k8s.TIMEOUT),
    )  # fmt: skip
    for event in stream:
        yield {"type": event["type"], "object": event.get("raw_object", event["object"])}


def crd_appears(plural: str, seconds: int) -> bool:
    """Wait (a watch: no polling) until the kind's CRD exists; False when `seconds` pass
    without it. An existing CRD answers at once (the watch's first event)."""
    stream = watch.Watch().stream(
        client.ApiextensionsV1Api(_watching()).list_custom_resource_definition,
        field_selector=f"metadata.name={plural}.{GROUP}", timeout_seconds=seconds,
        _request_timeout=(k8s.TIMEOUT, seconds + k8s.TIMEOUT),
    )  # fmt: skip
    return any(event["type"] in ("ADDED", "MODIFIED") for event in stream)
