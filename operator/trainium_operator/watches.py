"""kopf indices of every object a pass reads, by (namespace, name): the reads' watch cache.

Each index keeps only the fields observe reads (reads.slim), and is filled in the event loop
(async indexers: no worker thread per event). kopf fills every index from its initial listing
before it calls any handler, so a pass never takes "not listed yet" for "absent".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from trainium_operator.builders import LABEL_JOB, LABEL_MANAGED_BY, MANAGED_BY
from trainium_operator.cache import LABEL_CACHE_ENTRY
from trainium_operator.crd import GROUP, PLURAL, VERSION
from trainium_operator.reads import Indices, Kind, Overlay, Reader, WatchReader, slim

#: Our writes not yet seen by the watches; shared by every pass of this process.
OVERLAY = Overlay()
#: The indices by kind, once kopf has handed them over (empty: read with GETs).
_indices: dict[Kind, Mapping[Any, Any]] = {}


def reader(*, fresh: bool = False) -> Reader | None:
    """A reader for one pass; None before the indices exist (the caller reads with GETs)."""
    if len(_indices) < len(Kind):
        return None
    indices: Indices = _indices
    return WatchReader(indices, OVERLAY, fresh=fresh)


def _entry(kind: Kind, namespace: str | None, name: str, body: kopf.Body) -> dict[Any, Any]:
    return {(namespace or "", name): slim(kind, body)}


@kopf.index(GROUP, VERSION, PLURAL)
async def read_trainiumjobs(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[Any, Any]:
    """TrainiumJobs (the pass's own job, and a cache lease holder's)."""
    return _entry(Kind.TRAINIUMJOB, namespace, name, body)


@kopf.index(
    "batch.volcano.sh",
    "v1alpha1",
    "jobs",
    labels={LABEL_MANAGED_BY: MANAGED_BY, LABEL_JOB: kopf.PRESENT},
)
async def read_vcjobs(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[Any, Any]:
    """Our Volcano jobs (a job's stages)."""
    return _entry(Kind.VCJOB, namespace, name, body)


@kopf.index("", "v1", "persistentvolumeclaims")
async def read_claims(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[Any, Any]:
    """Every claim: a job may mount any claim of its namespace (spec.storage.claimName)."""
    return _entry(Kind.CLAIM, namespace, name, body)


@kopf.index("", "v1", "persistentvolumes", labels={LABEL_MANAGED_BY: MANAGED_BY})
async def read_volumes(name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    """Our static FSx PVs."""
    return _entry(Kind.VOLUME, None, name, body)


@kopf.index("", "v1", "configmaps", labels={LABEL_CACHE_ENTRY: kopf.PRESENT})
async def read_records(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[Any, Any]:
    """Compile-cache records."""
    return _entry(Kind.RECORD, namespace, name, body)


@kopf.index("coordination.k8s.io", "v1", "leases", labels={LABEL_CACHE_ENTRY: kopf.PRESENT})
async def read_leases(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[Any, Any]:
    """Compile-cache writer leases."""
    return _entry(Kind.LEASE, namespace, name, body)


@kopf.index("scheduling.volcano.sh", "v1beta1", "queues")
async def read_queues(name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    """Volcano queues (cluster-scoped)."""
    return _entry(Kind.QUEUE, None, name, body)


_BY_KIND = {
    Kind.TRAINIUMJOB: "read_trainiumjobs",
    Kind.VCJOB: "read_vcjobs",
    Kind.CLAIM: "read_claims",
    Kind.VOLUME: "read_volumes",
    Kind.RECORD: "read_records",
    Kind.LEASE: "read_leases",
    Kind.QUEUE: "read_queues",
}


@kopf.on.startup()
def keep_indices(**kwargs: Any) -> None:
    """kopf hands its indices to startup handlers: keep them for passes run off-handler too."""
    for kind, index in _BY_KIND.items():
        _indices[kind] = kwargs[index]
