"""kopf indices of every object a pass reads, by (namespace, name): the reads' watch cache.

Each index keeps only the fields observe reads (reads.slim), and is filled in the event loop
(async indexers: no worker thread per event). kopf fills every index from its initial listing
before it calls any handler, so a pass never takes "not listed yet" for "absent". Each watch
event also lets go of our own write it shows (reads.Overlay.shown): a settled job is never read
again, and its last patch would otherwise be held until a sweep. The indices and the overlay
belong to the runtime (kopf's memo), not to this module. Kueue's kinds are not here: kopf holds
every event until each of its indexed kinds is listed, and a kind whose CRD comes later stalled
everything (issue 41); our own watches index them (cluster/ownwatch.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from trainium_operator.api.crd import GROUP, PLURAL, VERSION
from trainium_operator.cluster.reads import Kind, Overlay, slim
from trainium_operator.domain import health
from trainium_operator.manifests.cache import LABEL_CACHE_ENTRY
from trainium_operator.manifests.ownership import (
    ANNOTATION_OWNER,
    LABEL_JOB,
    LABEL_MANAGED_BY,
    LABEL_STAGE,
    MANAGED_BY,
    owner_name,
    owner_uid,
)
from trainium_trainer.contract import STAGE_PRECOMPILE as PRECOMPILE


def _entry(
    kind: Kind, namespace: str | None, name: str, body: kopf.Body, memo: Any = None
) -> dict[Any, Any]:
    passes = getattr(memo, "passes", None)  # absent when called outside an operator (tests)
    if passes is not None:
        overlay: Overlay = passes.reads.overlay
        overlay.shown((kind, namespace or "", name), body)
    return {(namespace or "", name): slim(kind, body)}


@kopf.index(GROUP, VERSION, PLURAL)
async def read_trainiumjobs(
    namespace: str | None, name: str, body: kopf.Body, memo: Any = None, **_: Any
) -> dict[Any, Any]:
    """TrainiumJobs (the pass's own job, and a cache lease holder's)."""
    return _entry(Kind.TRAINIUMJOB, namespace, name, body, memo)


@kopf.index(
    "batch.volcano.sh",
    "v1alpha1",
    "jobs",
    labels={LABEL_MANAGED_BY: MANAGED_BY, LABEL_JOB: kopf.PRESENT},
)
async def read_vcjobs(
    namespace: str | None, name: str, body: kopf.Body, memo: Any = None, **_: Any
) -> dict[Any, Any]:
    """Our Volcano jobs (a job's stages)."""
    return _entry(Kind.VCJOB, namespace, name, body, memo)


@kopf.index("", "v1", "persistentvolumeclaims")
async def read_claims(
    namespace: str | None, name: str, body: kopf.Body, memo: Any = None, **_: Any
) -> dict[Any, Any]:
    """Every claim: a job may mount any claim of its namespace (spec.storage.claimName)."""
    return _entry(Kind.CLAIM, namespace, name, body, memo)


@kopf.index("", "v1", "persistentvolumes", labels={LABEL_MANAGED_BY: MANAGED_BY})
async def read_volumes(name: str, body: kopf.Body, memo: Any = None, **_: Any) -> dict[Any, Any]:
    """Our static FSx PVs."""
    return _entry(Kind.VOLUME, None, name, body, memo)


@kopf.index("", "v1", "configmaps", labels={LABEL_CACHE_ENTRY: kopf.PRESENT})
async def read_records(
    namespace: str | None, name: str, body: kopf.Body, memo: Any = None, **_: Any
) -> dict[Any, Any]:
    """Compile-cache records."""
    return _entry(Kind.RECORD, namespace, name, body, memo)


@kopf.index("coordination.k8s.io", "v1", "leases", labels={LABEL_CACHE_ENTRY: kopf.PRESENT})
async def read_leases(
    namespace: str | None, name: str, body: kopf.Body, memo: Any = None, **_: Any
) -> dict[Any, Any]:
    """Compile-cache writer leases."""
    return _entry(Kind.LEASE, namespace, name, body, memo)


@kopf.index("scheduling.volcano.sh", "v1beta1", "queues")
async def read_queues(name: str, body: kopf.Body, memo: Any = None, **_: Any) -> dict[Any, Any]:
    """Volcano queues (cluster-scoped)."""
    return _entry(Kind.QUEUE, None, name, body, memo)


@kopf.index("scheduling.k8s.io", "v1", "priorityclasses")
async def read_priorityclasses(
    name: str, body: kopf.Body, memo: Any = None, **_: Any
) -> dict[Any, Any]:
    """PriorityClasses (cluster-scoped): a job names one its gang's pods need (issue 26)."""
    return _entry(Kind.PRIORITY, None, name, body, memo)


@kopf.index(
    "batch.volcano.sh",
    "v1alpha1",
    "jobs",
    labels={
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_STAGE: PRECOMPILE,
        LABEL_CACHE_ENTRY: kopf.PRESENT,
    },
)
async def precompiles(
    namespace: str | None, body: kopf.Body, labels: Mapping[str, str], **_: Any
) -> dict[Any, Any]:
    """Precompile Volcano jobs by (namespace, cache entry): who else compiles an entry."""
    return {(namespace or "", labels[LABEL_CACHE_ENTRY]): slim_precompile(body)}


def slim_precompile(body: Mapping[str, Any]) -> dict[str, Any]:
    """What observe.compiling_elsewhere reads of a precompile job: name, owner, state."""
    meta = body.get("metadata") or {}
    try:
        owner = {ANNOTATION_OWNER: f"{meta.get('namespace') or ''}/{owner_name(meta)}"}
    except ValueError:  # not ours after all: it names no owner
        owner = {}
    kept = {k: meta[k] for k in ("name", "deletionTimestamp", "ownerReferences") if k in meta}
    state = (body.get("status") or {}).get("state")
    return {"metadata": {**kept, "annotations": owner}, "status": {"state": state or {}}}


@kopf.index("", "v1", "nodes")
async def node_names(name: str, **_: Any) -> dict[Any, Any]:
    """The names of the Nodes that exist (names only): a gang pod bound elsewhere is orphaned."""
    return {name: True}


@kopf.index("", "v1", "nodes")
async def node_health(name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    """Unhealthy Nodes only, with why (domain/health.py): a gang on one leaves it early."""
    said = health.node_verdict(body)
    return {name: said} if said else {}


@kopf.index("", "v1", "pods", labels={LABEL_MANAGED_BY: MANAGED_BY})
async def gang_pods(
    namespace: str | None,
    name: str,
    meta: kopf.Meta,
    spec: kopf.Spec,
    status: kopf.Status,
    **_: Any,
) -> dict[Any, Any]:
    """Our bound pods, by ("node", node) -> job uid (a Node's deletion wakes its jobs) and by
    ("job", uid) -> the pod (a pass finds its pods whose node is gone, cluster/orphans.py)."""
    node, job = spec.get("nodeName"), owner_uid(meta)
    if not node or not job:
        return {}
    pod = {"namespace": namespace or "", "name": name, "uid": meta.get("uid"), "node": node}
    return {("node", node): job, ("job", job): {**pod, "phase": status.get("phase")}}


_BY_KIND = {
    Kind.TRAINIUMJOB: "read_trainiumjobs",
    Kind.VCJOB: "read_vcjobs",
    Kind.CLAIM: "read_claims",
    Kind.VOLUME: "read_volumes",
    Kind.RECORD: "read_records",
    Kind.LEASE: "read_leases",
    Kind.QUEUE: "read_queues",
    Kind.PRIORITY: "read_priorityclasses",
}


@kopf.index("scheduling.volcano.sh", "v1beta1", "queues")
async def queue_children(name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    """Volcano queues by parent: a queue with children is not a leaf (Volcano refuses jobs)."""
    spec = body.get("spec")
    parent = spec.get("parent") if isinstance(spec, Mapping) else None
    return {parent: name} if parent else {}


def indices(kwargs: Mapping[str, Any]) -> dict[Kind, Mapping[Any, Any]]:
    """The read indices by kind, from what kopf hands a startup handler (all but Kueue's kinds:
    runtime/kueuewatch.py watches those, outside kopf's barrier)."""
    return {kind: kwargs[index] for kind, index in _BY_KIND.items()}
