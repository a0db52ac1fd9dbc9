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

from trainium_operator.builders import (
    LABEL_CACHE_KEY,
    LABEL_CACHE_NAME,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    Owner,
)
from trainium_operator.cachekey import cache_key, cache_name
from trainium_operator.crd import GROUP
from trainium_operator.naming import short_hash
from trainium_operator.spec import TrainiumJobSpec

Json = dict[str, Any]
#: A record's states (records of older operators may say "Compiling": not Ready either).
READY, FAILED = "Ready", "Failed"
LABEL_CACHE_ENTRY = f"{GROUP}/cache-entry"
#: Informational on the Lease: holders are judged by their job, not by renewals (a compile
#: can take hours, and an operator that is down renews nothing).
LEASE_SECONDS = 3600


@dataclass(frozen=True)
class Identity:
    """Where graphs were compiled (volume, cache path, cacheset) and which graphs (the key)."""

    volume: str
    path: str
    name: str
    key: str

    @property
    def record_name(self) -> str:
        """The record's and the lease's name: a DNS label unique per identity."""
        place = short_hash(f"{self.volume}|{self.path}|{self.name}")
        return f"trainium-cache-{place}-{self.key[:16]}"


def identity(spec: TrainiumJobSpec) -> Identity:
    """The cache entry a job reads and fills."""
    key = cache_key(spec)
    fsx = spec.storage.fsx
    volume = f"fsx:{fsx.fileSystemId}" if fsx else f"claim:{spec.storage.claimName}"
    return Identity(volume, spec.cache.path, cache_name(spec, key), key)


def holder(owner: Owner) -> str:
    """A job as a lease holder: namespace, name and uid (a re-created job is another holder)."""
    return f"{owner.namespace}/{owner.name}/{owner.uid}"


@dataclass(frozen=True)
class Entry:
    """A record as read back."""

    state: str
    compiled_by: str = ""
    seconds: float | None = None


def read_entry(record: Json | None) -> Entry | None:
    """The record's state; a record from before states existed counts as Ready."""
    if record is None:
        return None
    data = record.get("data") or {}
    seconds = data.get("durationSeconds")
    return Entry(
        state=data.get("state", READY),
        compiled_by=data.get("compiledBy", ""),
        seconds=float(seconds) if seconds else None,
    )


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
    """Seconds between two RFC 3339 timestamps (0 when the start is unknown)."""
    if not start:
        return 0.0
    return (_parse(end) - _parse(start)).total_seconds()


def _parse(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
