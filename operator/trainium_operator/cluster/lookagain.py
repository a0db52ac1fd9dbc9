"""When a job must be looked at again though nothing it watches changes: its nearest deadline.

A pass returns the seconds until the soonest of them (an active deadline, a gang's startup
deadline, its Events' next look, rank 0's next reading, a shrink, a name freed); the queue wakes
the job then.
"""

from __future__ import annotations

from typing import Any

from trainium_operator.api.spec import TrainiumJobSpec
from trainium_operator.cluster.observe import Seen
from trainium_operator.cluster.reads import UNWATCHED_LOOK, Kind, Reader
from trainium_operator.domain import quota
from trainium_operator.domain.lifecycle import Decision
from trainium_operator.domain.status import now_iso
from trainium_operator.manifests import cache

Json = dict[str, Any]

#: Seconds until the next pass of a job whose status goes before its next stage (Decision.again).
AGAIN_IN = 0.1


def next_look(
    spec: TrainiumJobSpec, previous: Json, seen: Seen, shrink_in: float | None, decision: Decision
) -> float | None:
    """Seconds until this job must be looked at again though nothing it watches changes."""
    return soonest(
        deadline_in(spec, previous),
        seen.startup_left,
        seen.events_look,
        seen.progress_in,
        shrink_in,
        name_wait_left(seen),
        AGAIN_IN if decision.again else None,
    )


def name_wait_left(seen: Seen) -> float | None:
    """Seconds until the job stops waiting for an earlier object's gang (a look is due then)."""
    taken = seen.name_taken
    return taken.left if taken is not None and taken.blocker is not None else None


def soonest(*left: float | None) -> float | None:
    """The nearest deadline still ahead, if any."""
    ahead = [x for x in left if x is not None and x > 0]
    return min(ahead) if ahead else None


def deadline_in(spec: TrainiumJobSpec, previous: Json) -> float | None:
    """Seconds left of runPolicy.activeDeadlineSeconds, counted from the job's start."""
    deadline, started = spec.runPolicy.activeDeadlineSeconds, previous.get("startTime")
    if deadline is None or not isinstance(started, str):
        return None
    return deadline - cache.seconds_between(started, now_iso())


def unwatched(decision: Decision, read: Reader) -> float | None:
    """A Kueue job's next look while no watch streams its Workloads (issue 33)."""
    return quota.unwatched_look(decision, read.watched(Kind.WORKLOAD), UNWATCHED_LOOK)
