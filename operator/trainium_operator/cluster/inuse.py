"""Kueue's `kueue.x-k8s.io/resource-in-use` finalizer on our Workloads, kept as its job framework
keeps it (pkg/controller/jobframework/reconciler.go).

Kueue counts a deleted Workload's quota until that finalizer goes, so a Workload deleted by anyone
(a user, the garbage collector after its job was deleted, a namespace's deletion) keeps its quota
while its stage's gang still runs. Added when the Workload is created (workload.build_workload);
removed once it is Finished (its quota released already), just before a delete of our own (the
job no longer needs it), and, for one being deleted, once no Volcano job or pod of its stage is
left (`sweep`, queued from the Workload watch: also the Workloads of a job deleted while the
operator was down, which that watch lists when it starts).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainium_operator.cluster import k8s, kueueio
from trainium_operator.cluster.reads import Kind, Reader
from trainium_operator.domain.kueuestate import Admission, workload_state
from trainium_operator.manifests import ownership
from trainium_operator.manifests.workload import RESOURCE_IN_USE

Json = dict[str, Any]


def held(body: Mapping[str, Any] | None) -> bool:
    """Whether the Workload carries the finalizer."""
    return RESOURCE_IN_USE in (((body or {}).get("metadata") or {}).get("finalizers") or ())


def deleting(body: Mapping[str, Any] | None) -> bool:
    """Whether the Workload is being deleted (only finalizers keep it)."""
    return bool(((body or {}).get("metadata") or {}).get("deletionTimestamp"))


def finished(body: Mapping[str, Any]) -> bool:
    """Whether Kueue's Finished condition is on it (its quota is released)."""
    name = str(body["metadata"].get("name") or "")
    return workload_state(name, body).state is Admission.FINISHED


def release(body: Json, read: Reader) -> None:
    """Remove the finalizer from the Workload read (no request when it has none)."""
    if not held(body):
        return
    md = body["metadata"]
    written = kueueio.drop_finalizer(body, RESOURCE_IN_USE)
    if deleting(body):
        read.deleted(Kind.WORKLOAD, md["namespace"], md["name"])
    else:
        read.wrote(Kind.WORKLOAD, md["namespace"], md["name"], written)


def gang_gone(body: Mapping[str, Any]) -> bool:
    """No Volcano job and no pod of the Workload's job and stage is left (running or
    terminating): the quota it counts is no longer used."""
    md = body["metadata"]
    uid, labels = ownership.owner_uid(md), md.get("labels") or {}
    keys = (ownership.LABEL_JOB, ownership.LABEL_STAGE)
    if not uid or not all(labels.get(k) for k in keys):
        return True  # not made by a gang of ours: nothing to wait for
    selector = ",".join(f"{k}={labels[k]}" for k in keys)
    for child in (*k8s.list_vcjobs(md["namespace"], selector),
                  *k8s.list_pods(md["namespace"], selector)):  # fmt: skip
        if ownership.owner_uid(child.get("metadata") or {}) == uid:
            return False
    return True


def sweep(namespace: str, name: str) -> bool:
    """Remove the finalizer of a Workload being deleted (or Finished) once its gang is gone;
    False: its gang still runs, look again later."""
    body = kueueio.get_workload(namespace, name)
    if body is None or not held(body):
        return True
    if not (deleting(body) or finished(body)):
        return True  # a live Workload: its job's passes keep it
    if not finished(body) and not gang_gone(body):
        return False
    kueueio.drop_finalizer(body, RESOURCE_IN_USE)
    return True
