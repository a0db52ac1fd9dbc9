"""Pure: how many nodes of the cluster could hold one pod of this job's gang right now.

An elastic job shrinks to, and grows back to, what the nodes hold: a node counts when it is
Ready, not cordoned, not unhealthy (health.py), carries the job's instance type and
nodeSelector labels, has no NoSchedule or NoExecute taint the job does not tolerate, and is not
in status.excludedNodes. What other jobs use on it is not counted (Volcano decides that): a
grown gang that does not fit is shrunk again after spec.elastic.shrinkAfterSeconds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from trainium_operator.api.instances import INSTANCE_TYPE_LABEL
from trainium_operator.api.spec import TrainiumJobSpec
from trainium_operator.domain import health

Json = dict[str, Any]
_HARD = frozenset({"NoSchedule", "NoExecute"})


def schedulable(nodes: Iterable[Mapping[str, Any]], spec: TrainiumJobSpec,
                excluded: Sequence[str] = ()) -> int:  # fmt: skip
    """The nodes one pod of the job's gang could be placed on now."""
    return sum(1 for node in nodes if fits(node, spec, excluded))


def fits(node: Mapping[str, Any], spec: TrainiumJobSpec, excluded: Sequence[str] = ()) -> bool:
    """Whether one pod of the job could be placed on this node (resources aside)."""
    meta, node_spec = node.get("metadata") or {}, node.get("spec") or {}
    if meta.get("deletionTimestamp") or meta.get("name") in excluded:
        return False
    if node_spec.get("unschedulable") or not ready(node) or health.node_verdict(node):
        return False
    labels = meta.get("labels") or {}
    wanted = {**spec.scheduling.nodeSelector, INSTANCE_TYPE_LABEL: spec.instanceType}
    if any(labels.get(k) != v for k, v in wanted.items()):
        return False
    taints = [t for t in node_spec.get("taints") or () if t.get("effect") in _HARD]
    return all(tolerated(t, spec.scheduling.tolerations) for t in taints)


def ready(node: Mapping[str, Any]) -> bool:
    """The node's Ready condition is True."""
    for cond in (node.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def tolerated(taint: Mapping[str, Any], tolerations: Sequence[Mapping[str, Any]]) -> bool:
    """Whether any toleration tolerates the taint (the pod API's matching rules)."""
    return any(_tolerates(t, taint) for t in tolerations)


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    effect = toleration.get("effect")
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if toleration.get("operator") == "Exists":
        return not key or key == taint.get("key")
    return key == taint.get("key") and (toleration.get("value") or "") == (taint.get("value") or "")
