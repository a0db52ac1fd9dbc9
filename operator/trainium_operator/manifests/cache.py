"""The managed compile cache, pure: an entry's identity, its record and the lease of its writer.

A cache entry is the graphs of one cache key compiled into one cacheset on one volume: the same
key on another claim, file system or `cache.path` is another entry. A coordination.k8s.io Lease
admits one writer per entry at a time and says who is compiling since when; the record (a
ConfigMap of the same name in the job's namespace), written once per compile, says Ready or
Failed, who filled it, when and how long it took.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from trainium_operator.api.spec import TrainiumJobSpec

# An entry's identity lives in cachekey.py (the builders label precompile jobs with it).
from trainium_operator.domain.cachekey import LABEL_CACHE_ENTRY as LABEL_CACHE_ENTRY
from trainium_operator.domain.cachekey import Identity as Identity
from trainium_operator.domain.cachekey import identity as identity
from trainium_operator.manifests.ownership import (
    LABEL_CACHE_KEY,
    LABEL_CACHE_NAME,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    Owner,
)

Json = dict[str, Any]
#: A record's states (records of older operators may say "Compiling": not Ready either).
READY, FAILED = "Ready", "Failed"
#: A record that is not this entry's, or not written by a compiling job: never a hit.
UNVERIFIED = "Unverified"
#: Informational on the Lease: holders are judged by their job, not by renewals (a compile
#: can take hours, and an operator that is down renews nothing).
LEASE_SECONDS = 3600


def holder(owner: Owner) -> str:
    """A job as a lease holder: namespace, name and uid (a re-created job is another holder)."""
    return f"{owner.namespace}/{owner.name}/{owner.uid}"


@dataclass(frozen=True)
class Entry:
    """A record as read back."""

    state: str
    compiled_by: str = ""
    seconds: float | None = None


def read_entry(record: Json | None, ident: Identity) -> Entry | None:
    """The record's state; UNVERIFIED unless it is this entry's, written by a compiling job.

    A record edited by hand (`key: bogus`) or made by hand with our labels and `state: Ready`
    must not send a job to train on graphs nobody compiled.
    """
    if record is None:
        return None
    data = record.get("data") or {}
    state = str(data.get("state") or "") if _genuine(record, ident) else UNVERIFIED
    return Entry(state, str(data.get("compiledBy") or ""), _duration(data.get("durationSeconds")))


def _genuine(record: Json, ident: Identity) -> bool:
    """The full identity matches, and the writer is a job (namespace/name/uid) of its namespace."""
    data = record.get("data") or {}
    mine = {"key": ident.key, "cacheName": ident.name, "volume": ident.volume}
    if any(data.get(k) != v for k, v in mine.items()):
        return False
    parts = str(data.get("writer") or "").split("/")
    if len(parts) != 3 or not all(parts):
        return False
    namespace = (record.get("metadata") or {}).get("namespace")
    same_place = namespace is None or parts[0] == namespace
    return same_place and data.get("compiledBy") == f"{parts[0]}/{parts[1]}"


def read_holder(lease: Json | None) -> str | None:
    """Who holds the lease (namespace/name/uid), if anyone."""
    return ((lease or {}).get("spec") or {}).get("holderIdentity") or None


def acquired_at(lease: Json | None) -> str:
    """When the lease's holder took it: the compile's start ("" when unknown)."""
    return str(((lease or {}).get("spec") or {}).get("acquireTime") or "")


def _labels(ident: Identity) -> dict[str, str]:
    return {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_CACHE_KEY: ident.key,
        LABEL_CACHE_NAME: ident.name,
        LABEL_CACHE_ENTRY: ident.record_name,
    }


def record(
    ident: Identity,
    spec: TrainiumJobSpec,
    owner: Owner,
    state: str,
    *,
    started_at: str,
    now: str,
) -> Json:
    """The record of a compile's outcome; not owned by the job: it outlives it."""
    data = {
        "state": state,
        "key": ident.key,
        "cacheName": ident.name,
        "volume": ident.volume,
        "cachePath": spec.storage.mountPath.rstrip("/") + "/" + spec.cache.path,
        "compiledBy": f"{owner.namespace}/{owner.name}",
        "writer": holder(owner),
        "startedAt": started_at,
        "completedAt": now,
        "durationSeconds": f"{seconds_between(started_at, now):.0f}",
        "instanceType": spec.instanceType,
        "nodes": str(spec.nodes),
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": ident.record_name,
            "namespace": owner.namespace,
            "labels": _labels(ident),
        },
        "data": data,
    }


def lease(ident: Identity, owner: Owner, now_micro: str) -> Json:
    """The writer's lease on an entry, held by one job."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": ident.record_name,
            "namespace": owner.namespace,
            "labels": _labels(ident),
        },
        "spec": {
            "holderIdentity": holder(owner),
            "leaseDurationSeconds": LEASE_SECONDS,
            "acquireTime": now_micro,
            "renewTime": now_micro,
        },
    }


def seconds_between(start: str, end: str) -> float:
    """Seconds from start to end, never below 0 (0 when the start is unknown).

    A Lease's acquireTime has microseconds, our timestamps whole seconds: a compile recorded
    within the second its lease was taken ends "before" it started.
    """
    if not start:
        return 0.0
    return max(0.0, (_parse(end) - _parse(start)).total_seconds())


def _duration(text: Any) -> float | None:
    """A record's durationSeconds: None when absent or not a number, never below 0."""
    try:
        seconds = float(text)
    except (TypeError, ValueError):
        return None
    return max(0.0, seconds) if seconds == seconds else None  # NaN is no duration


def _parse(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
