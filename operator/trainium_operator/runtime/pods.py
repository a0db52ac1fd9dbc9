"""Pod triage for the pod watch: what a gang pod's event shows is kept in its job's record.

The failed container's log tail is read here, before the wake: Volcano deletes a failed pod
~60 ms after it fails, and its log with it, long before a pass would read it. A training pod
whose container ended with a newer checkpoint report wakes its job too (the initial listing only
remembers it, so a restarted operator keeps what the pods say). handlers.on_pod only calls
`changed`.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Mapping
from typing import Any

from trainium_operator.cluster import k8s, scrape
from trainium_operator.domain import checkpoints, failures
from trainium_operator.manifests.ownership import (
    ANNOTATION_OWNER,
    LABEL_STAGE,
    controller_uid,
    owner_name,
    owner_uid,
)
from trainium_operator.runtime.passes import Passes
from trainium_operator.runtime.records import Key

Json = dict[str, Any]
log = logging.getLogger(__name__)
#: Volcano's annotation with the job version a pod was made for (a restart makes the next).
JOB_VERSION = "volcano.sh/job-version"


async def changed(
    passes: Passes, type: str | None, pod: Json, labels: dict[str, str], context: Any
) -> None:
    """One pod watch event: remember its checkpoint and rank 0's address; tell a failure."""
    meta = pod["metadata"]
    key = owner_key(meta, passes)
    if key is None:
        return
    newer = remember_checkpoint(passes, key, labels, pod["status"], create=type != "DELETED")
    addressed = _remember_rank0(passes, key, type, pod, labels)
    if type is None:
        return
    if troubled(pod["status"]):
        shown = as_shown(pod, labels)
        # A deleted pod's log is gone with it (the API server answers 404): read none.
        gone = type == "DELETED"
        tail = () if gone else await _log_tail(passes, key, shown, gang_instance(meta))
        passes.pod_event(key, shown, context=context, log=tail, gone=gone)
    elif newer or addressed:
        passes.wake(key, context=context or contextvars.copy_context())


def owner_key(meta: Mapping[str, Any], passes: Passes) -> Key | None:
    """The uid of the job a child belongs to: its owner-uid annotation or ownerReference;
    children made before either existed resolve their owner's name (records.resolve)."""
    uid = owner_uid(meta)
    if uid:
        return uid
    ns, _sep, name = ((meta.get("annotations") or {}).get(ANNOTATION_OWNER) or "").partition("/")
    return passes.records.resolve(ns, name) if ns and name else None


def name_holder(namespace: str, meta: Mapping[str, Any], passes: Passes) -> Key | None:
    """The job that holds the name of the one a child was made for, now (it may be another
    object: it waits for an earlier one's child to free the name its own child needs)."""
    try:
        return passes.records.resolve(namespace, owner_name(meta))
    except ValueError:
        return None


def as_shown(pod: Json, labels: Mapping[str, str]) -> Json:
    """What the pod watch event says of a pod that classification weighs (failures.py)."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    kept = ("name", "namespace", "uid", "deletionTimestamp", "deletionGracePeriodSeconds")
    metadata = {k: meta.get(k) for k in kept if meta.get(k) is not None}
    # ownerReferences: which Volcano job instance the pod was of (gangpods.of_instance).
    owners = list(meta.get("ownerReferences") or [])
    return {
        "metadata": {**metadata, "labels": dict(labels), "ownerReferences": owners},
        "spec": {"nodeName": spec.get("nodeName")} if spec.get("nodeName") else {},
        "status": dict(pod["status"]),
    }


def gang_instance(meta: Mapping[str, Any]) -> str:
    """Which run of which Volcano job the pod was made for: its owner's uid and job version."""
    version = (meta.get("annotations") or {}).get(JOB_VERSION, "")
    return f"{controller_uid(meta)}/{version}"


async def _log_tail(passes: Passes, key: Key, pod: Json, instance: str) -> tuple[str, ...]:
    """The failed container's log tail, read once per pod; () when gone or unreadable.

    A peer killed by its deletion is read only for the first few of its gang instance."""
    md = pod["metadata"]
    container = failures.failed_container(pod)
    if not container or not md.get("uid") or passes.records.has_log(key, md["uid"]):
        return ()
    if not passes.records.live_job(key):  # killed by the job's own deletion: nothing to tell
        return ()
    shown = failures.classify_pod(pod)
    if shown is not None and shown.reason in failures.GANG_DISRUPTIONS:
        return ()  # the disruption explains it: no log read delays telling the pass
    if failures.stopped_peer(pod) and not passes.records.peer_read(key, instance):
        passes.records.log_gone(key, md["uid"])  # nor does a pass read it (gone by then: 404)
        return ()  # a peer stopped with its gang: the first few read say what the rest would
    try:
        job = passes.records.get(key)
        namespace = md.get("namespace") or (job.namespace if job else "")
        lines = await asyncio.to_thread(
            k8s.pod_log_tail, namespace, md["name"], container, failures.LOG_TAIL_LINES
        )
    except Exception as exc:  # evidence only: the pass still classifies by the pod's state
        log.debug("log of pod %s/%s not read: %s", md.get("namespace"), md["name"], exc)
        return ()
    if not lines:  # 404 (Volcano deleted the pod) or nothing written: no pass reads it again
        passes.records.log_gone(key, md["uid"])
    return tuple(lines)


def remember_checkpoint(
    passes: Passes, key: Key, labels: Mapping[str, str], status: Json, *, create: bool = True
) -> bool:
    """Keep the newest checkpoint a training pod reported; whether it is newer than the last."""
    if labels.get(LABEL_STAGE) != "train":
        return False
    found = checkpoints.from_pod({"status": dict(status)})
    return passes.records.checkpoint(key, found, create=create)


def _remember_rank0(
    passes: Passes, key: Key, type: str | None, pod: Json, labels: Mapping[str, str]
) -> bool:
    """Keep where rank 0 serves its live metrics (a pass reads them without listing pods);
    whether rank 0 has a new address (its job is woken to read it)."""
    job, meta = passes.records.get(key), pod["metadata"]
    if job is None or not scrape.is_rank0(str(meta.get("name") or ""), labels):
        return False
    gone = type == "DELETED" or meta.get("deletionTimestamp")
    kept = ((job.rank0_pod or {}).get("metadata") or {}).get("name")
    if gone and kept not in (None, meta.get("name")):
        return False  # a replaced gang's pod 0 going after its successor's came: keep that one
    return passes.records.rank0(key, None if gone else scrape.slim_rank0(pod))


def troubled(status: Json) -> bool:
    """A container terminated non-zero or stuck waiting on an error; or the pod failed.

    Or it is being disrupted (DisruptionTarget): evicted pods go within milliseconds, and
    Volcano restarts the gang on the deletion's first event, before the pod has failed.
    """
    if status.get("phase") == "Failed" or status.get("reason") == "Evicted":
        return True
    for cond in status.get("conditions") or []:
        if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
            return True
    for cs in status.get("containerStatuses") or []:
        for key in ("state", "lastState"):
            term = (cs.get(key) or {}).get("terminated") or {}
            if term.get("exitCode") not in (None, 0):
                return True
        waiting = ((cs.get("state") or {}).get("waiting") or {}).get("reason") or ""
        if waiting and waiting not in ("ContainerCreating", "PodInitializing"):
            return True
    return False
