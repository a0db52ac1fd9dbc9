"""What Kueue says of a job's Workloads, as observed: the vocabulary quota.py decides with.

Apart from quota.py so that model.Observed can hold a Quota without model importing the module
that imports it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from trainium_operator.domain.blocker import Blocker


class Admission(str, enum.Enum):
    """Where a stage's Workload stands with Kueue."""

    ABSENT = "Absent"
    PENDING = "Pending"  #: created, no quota reserved (or admission checks still open)
    ADMITTED = "Admitted"
    #: Kueue evicted it (Evicted=True: preempted, PodsReady timeout, deactivated): its gang
    #: stops, then the Workload is requeued (domain/eviction.py) until Kueue admits it again.
    EVICTED = "Evicted"
    FINISHED = "Finished"  #: its quota is released: the stage ended


@dataclass(frozen=True)
class Workload:
    """One stage's Workload as observed: its name, its state and Kueue's own words."""

    name: str
    state: Admission = Admission.ABSENT
    reason: str = ""
    message: str = ""
    #: Quota still reserved (QuotaReserved=True or status.admission set): a requeue clears it.
    reserved: bool = False
    #: Its PodsReady condition as (status, reason); ("", ""): none.
    pods_ready: tuple[str, str] = ("", "")
    #: Its spec.active (false: deactivated; Kueue evicts it and holds no quota for it).
    active: bool = True
    #: Behind our compile gate (kueue.x-k8s.io/admission-gated-by): Kueue does not admit it.
    gated: bool = False


@dataclass(frozen=True)
class Quota:
    """A Kueue job's Workloads, and what stops any of them from being admitted at all."""

    queue: str
    precompile: Workload
    train: Workload
    #: Kueue not installed, its LocalQueue or WorkloadPriorityClass missing (None: nothing).
    blocker: Blocker | None = None
    #: spec.elastic: this job's training Workloads of sizes its gang no longer runs at.
    stale: tuple[str, ...] = ()
    #: spec.elastic: the larger size's training Workload while a grow waits for Kueue to admit
    #: it (the gang keeps its size and its admission until then), and that size.
    grow: Workload | None = None
    grow_size: int = 0

    def of(self, stage: str) -> Workload:
        """The Workload of one stage ("precompile" or "train")."""
        return self.precompile if stage == "precompile" else self.train


def workload_state(name: str, body: Mapping[str, Any] | None) -> Workload:
    """Read a Workload's conditions the way Kueue writes them (QuotaReserved, Admitted,
    Evicted, PodsReady, Finished)."""
    if body is None:
        return Workload(name)
    return replace(_state(name, body), active=(body.get("spec") or {}).get("active") is not False)


def _state(name: str, body: Mapping[str, Any]) -> Workload:
    """workload_state from the conditions alone."""
    status = body.get("status") or {}
    conds = {c.get("type"): c for c in (status.get("conditions") or ()) if isinstance(c, Mapping)}

    def true(kind: str) -> bool:
        return (conds.get(kind) or {}).get("status") == "True"

    if true("Finished"):
        return Workload(name, Admission.FINISHED)
    ready = conds.get("PodsReady") or {}
    held = true("QuotaReserved") or bool(status.get("admission"))
    seen = (str(ready.get("status") or ""), str(ready.get("reason") or ""))
    if true("Evicted"):  # Kueue keeps Admitted until the job framework requeues it
        evicted = conds["Evicted"]
        why, msg = str(evicted.get("reason") or "Evicted"), str(evicted.get("message") or "")
        return Workload(name, Admission.EVICTED, why, msg, reserved=held, pods_ready=seen)
    if true("Admitted"):
        return Workload(name, Admission.ADMITTED, reserved=held, pods_ready=seen)
    reserved = conds.get("QuotaReserved")
    if reserved is None:
        msg = "Kueue has not considered it yet"
        return Workload(name, Admission.PENDING, "Pending", msg, reserved=held, pods_ready=seen)
    if reserved.get("status") == "True":
        why, msg = "QuotaReserved", "quota reserved; waiting for its admission checks"
    else:
        why, msg = str(reserved.get("reason") or "Pending"), str(reserved.get("message") or "")
    return Workload(name, Admission.PENDING, why, msg, reserved=held, pods_ready=seen)
