"""Thin cluster I/O with the kubernetes client: create (409 = already there), get, patch status.

Nothing here decides anything; every function is one API call or a tolerant wrapper of one.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from trainium_operator import __version__
from trainium_operator.crd import GROUP, PLURAL, VERSION

Json = dict[str, Any]
VOLCANO_GROUP, VOLCANO_VERSION, VOLCANO_JOBS = "batch.volcano.sh", "v1alpha1", "jobs"
QUEUE_GROUP, QUEUE_VERSION, QUEUES = "scheduling.volcano.sh", "v1beta1", "queues"
MERGE_PATCH = "application/merge-patch+json"


@functools.cache
def api_client() -> client.ApiClient:
    """One client per process: in-cluster service account, else $KUBECONFIG."""
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))
    api = client.ApiClient()
    api.user_agent = f"trainium-operator/{__version__}"  # audit logs name us, not the library
    return api


def core() -> client.CoreV1Api:
    """Core v1 API (PV, PVC, ConfigMap)."""
    return client.CoreV1Api(api_client())


def custom() -> client.CustomObjectsApi:
    """Custom objects API (TrainiumJobs, Volcano jobs and queues)."""
    return client.CustomObjectsApi(api_client())


def _missing_is_none(call: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return call(*args, **kwargs)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _exists_is_ok(call: Any, *args: Any, **kwargs: Any) -> bool:
    """Create; True when created now, False when it already existed (a restart adopts it)."""
    try:
        call(*args, **kwargs)
        return True
    except ApiException as exc:
        if exc.status == 409:
            return False
        raise


def to_dict(obj: Any) -> Json | None:
    """A typed client object as a plain API dict."""
    if obj is None or isinstance(obj, dict):
        return obj
    out: Json = api_client().sanitize_for_serialization(obj)
    return out


def get_trainiumjob(namespace: str, name: str) -> Json | None:
    """The TrainiumJob, or None when it is gone."""
    args = (GROUP, VERSION, namespace, PLURAL, name)
    return _missing_is_none(custom().get_namespaced_custom_object, *args)  # type: ignore[no-any-return]


def delete_trainiumjob(namespace: str, name: str) -> None:
    """Delete a TrainiumJob (its children follow through ownerReferences); gone is fine."""
    args = (GROUP, VERSION, namespace, PLURAL, name)
    _missing_is_none(custom().delete_namespaced_custom_object, *args)


def patch_trainiumjob_status(namespace: str, name: str, status: Json) -> None:
    """Merge-patch the status subresource."""
    custom().patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, name, {"status": status}, _content_type=MERGE_PATCH
    )


def get_claim(namespace: str, name: str) -> Json | None:
    """A PersistentVolumeClaim, or None."""
    return to_dict(
        _missing_is_none(core().read_namespaced_persistent_volume_claim, name, namespace)
    )


def get_volume(name: str) -> Json | None:
    """A PersistentVolume, or None."""
    return to_dict(_missing_is_none(core().read_persistent_volume, name))


def create_volume(body: Json) -> bool:
    """Create a PersistentVolume (409 tolerated)."""
    return _exists_is_ok(core().create_persistent_volume, body)


def delete_volume(name: str) -> None:
    """Delete a PersistentVolume if it exists."""
    _missing_is_none(core().delete_persistent_volume, name)


def create_claim(body: Json) -> bool:
    """Create a PersistentVolumeClaim (409 tolerated)."""
    ns = body["metadata"]["namespace"]
    return _exists_is_ok(core().create_namespaced_persistent_volume_claim, ns, body)


def get_configmap(namespace: str, name: str) -> Json | None:
    """A ConfigMap, or None."""
    return to_dict(_missing_is_none(core().read_namespaced_config_map, name, namespace))


def create_configmap(body: Json) -> bool:
    """Create a ConfigMap (409 tolerated)."""
    ns = body["metadata"]["namespace"]
    return _exists_is_ok(core().create_namespaced_config_map, ns, body)


def get_vcjob(namespace: str, name: str) -> Json | None:
    """A Volcano job, or None."""
    args = (VOLCANO_GROUP, VOLCANO_VERSION, namespace, VOLCANO_JOBS, name)
    return _missing_is_none(custom().get_namespaced_custom_object, *args)  # type: ignore[no-any-return]


def create_vcjob(body: Json) -> bool:
    """Create a Volcano job (409 tolerated)."""
    ns = body["metadata"]["namespace"]
    args = (VOLCANO_GROUP, VOLCANO_VERSION, ns, VOLCANO_JOBS, body)
    return _exists_is_ok(custom().create_namespaced_custom_object, *args)


def queue_exists(name: str) -> bool:
    """Whether the cluster-scoped Volcano queue exists."""
    args = (QUEUE_GROUP, QUEUE_VERSION, QUEUES, name)
    return _missing_is_none(custom().get_cluster_custom_object, *args) is not None
