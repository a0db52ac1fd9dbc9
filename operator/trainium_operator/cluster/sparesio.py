"""A job with spare nodes in a pass: read its gang's reservation, swap when due (spares.py).

The swap is one guarded JSON patch of the live training gang: its minAvailable, its `spare`
task's and that task's pods drop to what the nodes left hold; once it runs again, a second one
asks for the replacement spares (the task's pods back to spec.spares). Volcano's webhook lets
these change on a live job, and its job controller passes them to the PodGroup, so the gang
Volcano is restarting forms again at the same world size. The patch tests the gang's uid and its
task's name: a gang replaced since the pass read it is never touched.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainium_operator.api import naming
from trainium_operator.api.instances import INSTANCE_TYPE_LABEL
from trainium_operator.api.spec import TrainiumJobSpec
from trainium_operator.cluster import k8s
from trainium_operator.cluster.observe import Seen
from trainium_operator.domain import capacity, nodes, spares
from trainium_operator.domain.elastic import NOT_FORMED
from trainium_operator.domain.model import Child
from trainium_operator.manifests import spares as spare_pods
from trainium_operator.manifests.ownership import LABEL_JOB, Owner

Json = dict[str, Any]
JSON_PATCH = "application/json-patch+json"


@dataclass(frozen=True)
class Looked:
    """status.spares to write (None: no spares) and the swap this pass made (None: none)."""

    status: Json | None
    swap: spares.Swap | None = None


def look(
    spec: TrainiumJobSpec, owner: Owner, previous: Mapping[str, Any], seen: Seen, now: str,
    found: spares.Seen,
) -> Looked:  # fmt: skip
    """Swap, or ask for the replacement spares, for the live gang (spec: at its size)."""
    if spec.spares == 0:
        return Looked(None)
    job = seen.train.job if seen.train is not None else None
    gang = _gang(spec, owner, job, seen)
    schedulable = None
    if spares.needs_count(spec, gang):
        listed = k8s.list_nodes(f"{INSTANCE_TYPE_LABEL}={spec.instanceType}")
        schedulable = capacity.schedulable(listed, spec, nodes.names(previous))
    failure = seen.observed.failure
    lost = spares.lost_node(
        failure.node if failure else None, failure.reason if failure else None,
        [*spares.lost_since(previous), *found.lost],
        {e["node"]: str(e.get("reason") or "") for e in nodes.excluded(previous)},
    )  # fmt: skip
    before = previous.get("spares") if isinstance(previous.get("spares"), Mapping) else {}
    stood = [str(n) for n in (before or {}).get("standby") or ()]
    swap = spares.decide(spec, gang, schedulable, lost, stood)
    if swap is not None and job is not None:
        patch(job, spec, swap.new, swap.new)
    elif job is not None and (again := spares.replenish(spec, gang, _standing(found))):
        patch(job, spec, *again)
    reserved = gang.reserved if gang is not None else None
    view = spares.Seen(reserved, found.standby, found.lost, found.training)
    return Looked(spares.status(spec, previous, view, swap, now), swap)


def _standing(found: spares.Seen) -> int | None:
    return None if found.standby is None else len(found.standby)


def _gang(spec: TrainiumJobSpec, owner: Owner, job: Json | None, seen: Seen) -> spares.Gang | None:
    """The swap decision's view of the live training gang (None: none lives)."""
    if job is None or seen.gang is None or seen.train_uid != seen.gang.uid:
        return None
    training = seen.observed.training
    restarted = seen.gang.retry_count > 0 or bool(owner.train_gang)
    return spares.Gang(
        spares.reserved_of(spec, job), training in NOT_FORMED, restarted,
        running=training is Child.RUNNING, replicas=spares.spare_replicas(spec, job),
    )  # fmt: skip


def patch(job: Json, spec: TrainiumJobSpec, reserved: int, replicas: int) -> Json:
    """Patch the live gang to reserve `reserved` spares of `replicas` spare pods; as patched."""
    meta, index = job["metadata"], spare_pods.SPARE_TASK_INDEX
    ops = [
        {"op": "test", "path": "/metadata/uid", "value": meta["uid"]},
        {"op": "test", "path": f"/spec/tasks/{index}/name", "value": spares.SPARE_TASK},
        {"op": "replace", "path": "/spec/minAvailable", "value": spares.gang_min(spec, reserved)},
        {"op": "replace", "path": f"/spec/tasks/{index}/minAvailable", "value": reserved},
        {"op": "replace", "path": f"/spec/tasks/{index}/replicas", "value": replicas},
    ]
    out = k8s.request(
        k8s.custom().patch_namespaced_custom_object,
        k8s.VOLCANO_GROUP, k8s.VOLCANO_VERSION, meta["namespace"], k8s.VOLCANO_JOBS,
        meta["name"], ops, _content_type=JSON_PATCH, guarded=True,
    )  # fmt: skip
    return out or {}  # type: ignore[no-any-return]


def standby(
    spec: TrainiumJobSpec, owner: Owner, previous: Mapping[str, Any], seen: Seen
) -> list[str] | None:
    """The nodes the live gang's spares stand on (None: not looked at in this pass): from the
    pods this pass listed, else listed when a running gang's status lacks some (its spare pods
    only: a handful, whatever the gang's size)."""
    job = seen.train.job if seen.train is not None else None
    if spec.spares == 0 or job is None:
        return None
    if seen.observed.training is not Child.RUNNING:
        return None  # a restarting gang's pods say nothing of where its spares will stand
    listed = standby_nodes(list(seen.pods))
    if listed:  # none running may be a restart the gang's state does not show yet: no news
        return listed
    before = previous.get("spares") if isinstance(previous.get("spares"), Mapping) else None
    known = (before or {}).get("standby")
    complete = isinstance(known, list) and len(known) >= spares.spare_replicas(spec, job)
    if complete:
        return None
    selector = f"{LABEL_JOB}={naming.label_value(owner.name)},{spare_pods.LABEL_ROLE}=spare"
    prefix = f"{job['metadata']['name']}-{spares.SPARE_TASK}-"
    pods = k8s.list_pods(owner.namespace, selector)
    return standby_nodes([p for p in pods if p["metadata"]["name"].startswith(prefix)]) or None


def standby_nodes(pods: list[Json]) -> list[str]:
    """The nodes the gang's spare pods stand by on (running ones)."""
    return sorted(
        str(p["spec"]["nodeName"])
        for p in pods
        if spare_pods.is_spare(p)
        and (p.get("status") or {}).get("phase") == "Running"
        and (p.get("spec") or {}).get("nodeName")
    )
