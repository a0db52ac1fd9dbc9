"""What a job's passes carry from one to the next: one value in, one value out, kept by its record.

A pass reads its job's Memory (observe.Views.memory) and returns the next one (reconcile's
Outcome.memory); the runtime stores it whole (records.remember). To remember something new
between passes, add a field here, set it where the pass learns it, and say in `for_a_new_term`
whether it outlives a change of leader (records.py applies that when this replica's term starts).
What the watches learn (checkpoints, rank 0's address, failed pods) is not here: the pod watch
changes it while a pass runs, so it lives in the record beside this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainium_operator.cluster.eventlooks import EventLook


@dataclass(frozen=True)
class Memory:
    """One job's memory between passes (empty for a new object)."""

    #: When rank 0's live metrics were last read (monotonic seconds): one read per interval.
    metrics_read_at: float | None = None
    #: status.progress as the last reading made it, written or not: the next reading starts
    #: from it, so a hang counts from when the step last moved, not from the last write.
    progress: dict[str, Any] | None = None
    #: The last look at the live gang's FailedCreate Events: one list per look, not per pass.
    events_looked: EventLook | None = None
    #: The resourceVersion our last status patch produced (its watch event needs no pass).
    written_version: str | None = None
    #: A pass wrote (or read) a finished phase for this object: nothing is created again.
    finished: bool = False

    def for_a_new_term(self) -> Memory:
        """What a new leadership term keeps: not what our earlier writes and looks said."""
        return Memory(metrics_read_at=self.metrics_read_at, finished=self.finished)
