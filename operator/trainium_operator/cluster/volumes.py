"""PersistentVolume and claim calls: one API call each, as k8s.py's are (storage.py decides)."""

from __future__ import annotations

from kubernetes import client

from trainium_operator.cluster import k8s

Json = k8s.Json


def get_claim(namespace: str, name: str) -> Json | None:
    """A PersistentVolumeClaim, or None."""
    return k8s.to_dict(
        k8s.missing_is_none(k8s.core().read_namespaced_persistent_volume_claim, name, namespace)
    )


def get_volume(name: str) -> Json | None:
    """A PersistentVolume, or None."""
    return k8s.to_dict(k8s.missing_is_none(k8s.core().read_persistent_volume, name))


def create_volume(body: Json) -> Json | None:
    """Create a PersistentVolume; the created object, None when it existed (409)."""
    return k8s.exists_is_ok(k8s.core().create_persistent_volume, body)


def delete_volume(name: str, uid: str | None = None) -> None:
    """Delete a PersistentVolume if it exists; with `uid`, only that object (else 409, raised)."""
    body = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)) if uid else None
    k8s.missing_is_none(k8s.core().delete_persistent_volume, name, body=body, guarded=bool(uid))


def release_claim_ref(volume: Json) -> Json:
    """Drop a Released PV's stale claimRef uid so the PV controller binds the new claim to it.

    Guarded by the observed resourceVersion: a PV that changed meanwhile answers 409 (retried).
    """
    md = volume["metadata"]
    ref = {"uid": None, "resourceVersion": None}
    body = {"metadata": {"resourceVersion": md["resourceVersion"]}, "spec": {"claimRef": ref}}
    patch = k8s.core().patch_persistent_volume
    return (
        k8s.to_dict(
            k8s.request(patch, md["name"], body, _content_type=k8s.MERGE_PATCH, guarded=True)
        )
        or {}
    )


def create_claim(body: Json) -> Json | None:
    """Create a PersistentVolumeClaim; the created object, None when it existed (409)."""
    ns = body["metadata"]["namespace"]
    return k8s.exists_is_ok(k8s.core().create_namespaced_persistent_volume_claim, ns, body)
