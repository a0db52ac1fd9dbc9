"""Pure: nodes a failure pointed at, kept on status and out of the job's next gangs.

A Neuron runtime or device error, an EFA set-up failure or a failed preflight says more about
the node than about the job; HyperPod avoids such repeat offenders, and so does this job: each
one lands in status.excludedNodes (bounded, newest last) and every Volcano job the operator
creates afterwards carries a required node affinity that keeps them out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from trainium_operator.domain.failures import Failure

Json = dict[str, Any]
#: The CRD's maxItems of status.excludedNodes: the oldest entry goes first past it.
MAX_EXCLUDED = 16
#: The node field a required affinity can match exactly (matchFields supports only this one).
NODE_NAME_FIELD = "metadata.name"


def excluded(status: Mapping[str, Any]) -> list[Json]:
    """status.excludedNodes as written; malformed entries are dropped."""
    entries = status.get("excludedNodes")
    if not isinstance(entries, list):
        return []
    return [e for e in entries if isinstance(e, dict) and isinstance(e.get("node"), str)]


def names(status: Mapping[str, Any]) -> tuple[str, ...]:
    """The excluded node names, oldest first."""
    return tuple(e["node"] for e in excluded(status))


def newly_faulty(failure: Failure | None, status: Mapping[str, Any]) -> str | None:
    """The node this failure points at, when it is not excluded yet."""
    if failure is None or not failure.node_fault or failure.node in names(status):
        return None
    return failure.node


def record(status: Mapping[str, Any], node: str, reason: str, now: str) -> list[Json]:
    """status.excludedNodes with one more node (newest last, at most MAX_EXCLUDED)."""
    kept = [e for e in excluded(status) if e["node"] != node]
    return [*kept, {"node": node, "reason": reason, "time": now}][-MAX_EXCLUDED:]


def affinity(nodes: Sequence[str]) -> Json:
    """A pod's required node affinity that keeps it off these nodes ({} when there are none).

    One requirement per node, ANDed in one term: the API server allows a single value in a
    `metadata.name` field requirement ("must be only one value when operator is 'In' or
    'NotIn' for node field selector"), so the second bad node would refuse every new gang.
    """
    if not nodes:
        return {}
    fields = [{"key": NODE_NAME_FIELD, "operator": "NotIn", "values": [n]} for n in nodes]
    term = {"matchFields": fields}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [term]
    }}}  # fmt: skip


def event(node: str, failure: Failure) -> str:
    """The Warning Event's message: which node, why, and what happens next."""
    return (
        f"node {node} excluded from this job's next gangs ({failure.reason}): {failure.message}; "
        "the gang is recreated with a node affinity that keeps it out"
    )
