"""Pure: a gang pod bound to a Node that no longer exists, and what removing it writes.

When an instance dies, its Node object is deleted, but its pods stay "Running" in the API until
kube-controller-manager's pod garbage collector removes them after a 40 s quarantine checked
every 20 s (kubernetes pkg/controller/podgc/gc_controller.go: quarantineTime, gcCheckPeriod,
gcOrphaned). The operator does for its own gang pods what PodGC would do then: a pod not yet
terminal is marked Failed with the DisruptionTarget condition PodGC sets (reason
DeletionByPodGC: a disruption, failures.py, which spends no maxRetries), then force-deleted.
Only a deletion counts: a NotReady node may come back. Only pods of a gang that still runs are
removed (a finished precompile job's Succeeded pods keep their logs), and the Event says what
follows: Volcano restarts a live gang; a gang being deleted finishes stopping.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from trainium_operator.api import naming
from trainium_operator.domain.failures import NOT_CHARGED, Failure, make_failure
from trainium_operator.domain.model import Child, from_volcano

Json = dict[str, Any]
#: The DisruptionTarget reason PodGC sets on a pod whose node is gone (k8s.io/api core/v1).
REASON = "DeletionByPodGC"
#: The Event reason on the TrainiumJob.
EVENT_REASON = "NodeGone"
_TERMINAL = frozenset({"Succeeded", "Failed"})
#: What removing a pod does for its gang: Volcano restarts a live one (RestartJob on a failed or
#: evicted pod); one being deleted or suspended stops without waiting for PodGC.
RESTARTS, STOPS = "restarts", "stops"


@dataclass(frozen=True)
class Orphan:
    """One of our gang pods bound to a node that no longer exists (what the pod index keeps)."""

    namespace: str
    name: str
    uid: str
    node: str
    phase: str = ""


def from_index(entry: Mapping[str, Any]) -> Orphan | None:
    """The pod as the gang pod index keeps it; None when it is not bound or lacks a field."""
    ns, name, uid, node = (entry.get(k) for k in ("namespace", "name", "uid", "node"))
    if not (isinstance(ns, str) and isinstance(name, str) and isinstance(uid, str)):
        return None
    if not (isinstance(node, str) and name and uid and node):
        return None
    return Orphan(ns, name, uid, node, phase=str(entry.get("phase") or ""))


def orphaned(pods: Iterable[Orphan], exists: Callable[[str], bool]) -> list[Orphan]:
    """The pods whose node does not exist (`exists` asks the node index), by name."""
    return sorted((p for p in pods if not exists(p.node)), key=lambda p: (p.namespace, p.name))


def gang_of(pod: Orphan) -> str:
    """The Volcano job a gang pod belongs to ("": not one of ours), by its name."""
    return naming.gang_of(pod.name)


def fate(pod: Orphan, gang: Mapping[str, Any] | None) -> str | None:
    """What removing the pod does (RESTARTS, STOPS); None: leave it, nothing would follow.

    A Succeeded pod is left whatever its gang does (it holds a finished rank's log and blocks
    nothing), and so is any pod of a gang that finished or is gone.
    """
    if gang is None or pod.phase == "Succeeded":
        return None
    state = from_volcano(((gang.get("status") or {}).get("state") or {}).get("phase"))
    if state in (Child.SUCCEEDED, Child.FAILED):
        return None
    stopping = (gang.get("metadata") or {}).get("deletionTimestamp")
    if stopping or state in (Child.ABORTED, Child.TERMINATING):
        return STOPS
    return RESTARTS


def status_patch(pod: Orphan, now: str) -> Json | None:
    """What PodGC writes before it deletes: Failed with DisruptionTarget; None when terminal.

    The uid in the patch is a precondition: a new pod of the same name is left alone.
    """
    if pod.phase in _TERMINAL:
        return None
    condition = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": REASON,
        "message": _said(pod),
        "lastTransitionTime": now,
    }
    return {
        "metadata": {"uid": pod.uid},
        "status": {"phase": "Failed", "conditions": [condition]},
    }


def event_message(pod: Orphan, outcome: str = RESTARTS) -> str:
    """The Event on the job: which node went, which pod goes, what follows."""
    then = "the gang restarts" if outcome == RESTARTS else f"its gang {gang_of(pod)} can stop"
    return f"node {pod.node} was deleted: its pod {pod.name} removed so {then}"


def _said(pod: Orphan) -> str:
    return f"trainium-operator: node {pod.node} no longer exists"


def explain(failure: Failure | None, removed: Sequence[Orphan]) -> Failure | None:
    """The gang's failure, the pods this pass removed for their deleted Node its evidence (a
    disruption, as their DisruptionTarget says): Volcano's restart deletes such a pod within
    milliseconds, often before a list or the pod watch shows it Failed (then the restart would
    count as Unknown, spending a runPolicy.maxRetries). A disruption already seen stays."""
    if not removed or (failure is not None and failure.reason in NOT_CHARGED):
        return failure
    pod = removed[-1]
    said = f"pod {pod.name}: Evicted ({REASON}): {_said(pod)}"
    return replace(make_failure("Evicted", said), node=pod.node)
