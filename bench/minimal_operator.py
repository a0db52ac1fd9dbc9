"""The yardstick: a minimal kopf operator doing one create and one status patch per TrainiumJob.

Same kopf, same persistence settings and the same child name as the product, so the ratio of
the two isolates what the product does beyond the minimum. Run by bench/operator_scale.py.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import kopf
import kubernetes

from trainium_operator.api import naming

GROUP = "trainium.dev"
TASK = {
    "name": "compile",
    "replicas": 1,
    "template": {"spec": {"restartPolicy": "Never",
                          "containers": [{"name": "compile", "image": "registry.example/t:1"}]}},
}  # fmt: skip


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    """The product's kopf settings (handlers.configure), nothing else."""
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300


@functools.cache
def _api() -> kubernetes.client.CustomObjectsApi:
    kubernetes.config.load_kube_config()
    client = kubernetes.client.ApiClient()
    client.user_agent = "minimal-operator/1"
    return kubernetes.client.CustomObjectsApi(client)


@kopf.on.create(GROUP, "v1alpha1", "trainiumjobs")
def create(namespace: str, name: str, uid: str, patch: kopf.Patch, **_: Any) -> None:
    """One Volcano job (409 tolerated), then one status patch."""
    owner = {"apiVersion": f"{GROUP}/v1alpha1", "kind": "TrainiumJob", "name": name, "uid": uid,
             "controller": True, "blockOwnerDeletion": True}  # fmt: skip
    body = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {
            "name": naming.vcjob_name(name, "precompile"),
            "ownerReferences": [owner],
            "labels": {f"{GROUP}/job-name": name},
        },
        # One task: a real API server's Volcano CRD wants at least one (bench --cluster).
        "spec": {"queue": "default", "minAvailable": 1, "tasks": [TASK]},
    }
    try:
        _api().create_namespaced_custom_object(
            "batch.volcano.sh", "v1alpha1", namespace, "jobs", body
        )
    except kubernetes.client.ApiException as exc:
        if exc.status != 409:
            raise
    patch.status["phase"] = "Precompiling"
