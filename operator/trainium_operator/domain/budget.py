"""Pure: the whole-gang restart budget (runPolicy.maxRetries), kept by the operator.

Volcano restarts the gang on a failed or evicted pod (TorchX's RestartJob policies) and counts
every restart in the Volcano job's status.retryCount, evictions included; it fails the job once
retryCount reaches spec.maxRetry (pkg/controllers/job/state/running.go, restarting.go). So the
operator gives Volcano a ceiling it never reaches (VOLCANO_MAX_RETRY) and keeps the budget
itself: each new retryCount increment is attributed to the failure class of its episode, a
disruption (Evicted, Preempted) to status.disruptions, anything else (an unknown cause too:
conservative) to status.restarts, which runPolicy.maxRetries bounds.

Level-based: a cursor on status names the Volcano job instance (uid) and the retryCount already
counted, so a pass that repeats, or an operator that restarts, counts nothing twice; a recreated
Volcano job (suspend/resume, the next stage) starts a new cursor and the totals only grow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from trainium_operator.domain.failures import NODE_FAULTS, NOT_CHARGED, POLICIES, Failure

#: Node faults a failed pod shows (Volcano restarted its gang too); a node's own signal is not.
POD_NODE_FAULTS = NODE_FAULTS - {"NodeUnhealthy", "Straggler"}

#: The CRD's maximum of runPolicy.maxRetries (a drift test keeps them equal).
MAX_RETRIES_LIMIT = 100
#: Evictions and preemptions never spend runPolicy.maxRetries, but a node that evicts forever
#: must not loop a job forever: past this many the job fails with reason TooManyDisruptions.
MAX_DISRUPTIONS = 50
#: Volcano's spec.maxRetry (job and tasks): never reached while the operator runs. One Volcano
#: job counts at most MAX_RETRIES_LIMIT restarts plus MAX_DISRUPTIONS disruptions, plus the one
#: increment Volcano makes before the operator stops a gang past its limit (151); Volcano fails
#: a job at retryCount >= maxRetry, so 200 leaves room and stays the backstop when the operator
#: is away. Volcano's webhook wants maxRetry >= 0 and turns 0 into 3 (an int32 either way).
VOLCANO_MAX_RETRY = 200
#: The class of a restart no pod evidence explains (its pods were gone before a pass saw them).
UNKNOWN = "Unknown"
MAX_RETRIES_EXCEEDED = "MaxRetriesExceeded"
TOO_MANY_DISRUPTIONS = "TooManyDisruptions"
#: Reasons a job fails with when a limit is spent.
REASONS = (MAX_RETRIES_EXCEEDED, TOO_MANY_DISRUPTIONS)

Json = dict[str, Any]


@dataclass(frozen=True)
class Gang:
    """The live stage's Volcano job as observed: which instance, its retryCount, its state."""

    uid: str
    retry_count: int
    #: Volcano phase Restarting: failed pods seen now belong to the restart already counted.
    restarting: bool = False


@dataclass(frozen=True)
class Cursor:
    """What is counted of one Volcano job instance, and a failure seen but not yet counted."""

    uid: str
    retry_count: int
    #: The class of a failure seen before Volcano restarted for it (its pods may be gone then).
    pending: str | None = None


@dataclass(frozen=True)
class Tally:
    """The job's totals across all its Volcano jobs, and the cursor of the latest one."""

    restarts: int = 0
    disruptions: int = 0
    cursor: Cursor | None = None


@dataclass(frozen=True)
class Exhausted:
    """A limit is spent: the reason the job fails with, the failure class, and why."""

    reason: str
    failure: str
    message: str


@dataclass(frozen=True)
class Accounted:
    """One pass's accounting: the new tally, what it counted, and a spent limit if any."""

    tally: Tally
    #: Failure classes of the budget restarts counted in this pass.
    restarted: tuple[str, ...] = ()
    #: Failure classes of the disruptions counted in this pass.
    disrupted: tuple[str, ...] = ()
    exhausted: Exhausted | None = None


def read(status: Mapping[str, Any]) -> Tally:
    """The tally as status holds it; missing or malformed fields count as nothing yet."""
    cur = status.get("restartCursor")
    cursor = None
    if isinstance(cur, Mapping) and isinstance(cur.get("uid"), str):
        pending = cur.get("pendingFailure")
        cursor = Cursor(cur["uid"], _int(cur.get("retryCount")), pending if pending else None)
    return Tally(_int(status.get("restarts")), _int(status.get("disruptions")), cursor)


def fragment(tally: Tally) -> Json:
    """The status fields of the tally."""
    out: Json = {"restarts": tally.restarts, "disruptions": tally.disruptions}
    cur = tally.cursor
    # A cursor that counted nothing yet is left unwritten (no status write just for it): any
    # cursor of another instance, or none, reads the same, as nothing counted on this one.
    if cur is not None and (cur.retry_count or cur.pending):
        # "" and not absent: status is merge-patched, a missing key would stay
        pending = cur.pending or ""
        out["restartCursor"] = {
            "uid": cur.uid,
            "retryCount": cur.retry_count,
            "pendingFailure": pending,
        }
    return out


def settled(previous: Mapping[str, Any]) -> Json:
    """The status fields a finished job drops: the cursor only counts a live gang's restarts
    (`kubectl describe` showed its uid on every finished job). A merge-patch null removes it."""
    return {"restartCursor": None} if "restartCursor" in previous else {}


def legacy(status: Mapping[str, Any]) -> bool:
    """Status written before the operator kept the budget: restarts mirrored retryCount."""
    return bool(status) and "restarts" in status and "disruptions" not in status


def account(
    before: Tally,
    gang: Gang | None,
    failure: Failure | None,
    max_retries: int,
    *,
    mirrored: bool = False,
) -> Accounted:
    """Attribute the live Volcano job's new retryCount increments; say if a limit is spent.

    The first new increment takes the failure seen before Volcano restarted (the cursor's
    pending class), else the one seen now, else Unknown; further ones (restarts no pass saw)
    are Unknown. An increment with no cause yet waits while the gang is Restarting: the pod
    watch that carries its cause can trail the Volcano job's (found on the real tier: an
    OOMKilled job counted one Unknown restart). An increment past a limit is not counted: it
    is the failure that spends it.
    `mirrored`: status.restarts of an older operator already counted this retryCount.
    """
    if gang is None:
        return Accounted(before)
    cur = _cursor_of(before.cursor, gang, mirrored)
    new = max(0, gang.retry_count - cur.retry_count)
    seen = failure.reason if failure is not None else None
    if new and gang.restarting and cur.pending is None and seen is None:
        return Accounted(replace(before, cursor=cur))  # its cause may be on its way: wait
    tally = replace(before, cursor=replace(cur, retry_count=gang.retry_count))
    reasons = [cur.pending or seen or UNKNOWN, *[UNKNOWN] * (new - 1)][:new]
    tally, restarted, disrupted, exhausted = _count_all(tally, reasons, max_retries)
    pending = _pending(cur, new, seen, gang)
    assert tally.cursor is not None
    tally = replace(tally, cursor=replace(tally.cursor, pending=pending))
    if exhausted is None and pending is not None:
        exhausted = _spent(tally, pending, max_retries)
    return Accounted(tally, restarted, disrupted, exhausted)


def _cursor_of(cur: Cursor | None, gang: Gang, mirrored: bool) -> Cursor:
    """This instance's cursor: a new instance starts at 0 (at its retryCount if mirrored)."""
    if cur is None or cur.uid != gang.uid:
        return Cursor(gang.uid, gang.retry_count if mirrored and cur is None else 0)
    return cur


def _count_all(
    tally: Tally, reasons: list[str], max_retries: int
) -> tuple[Tally, tuple[str, ...], tuple[str, ...], Exhausted | None]:
    """Count each new increment's class in turn; the first limit spent, if any."""
    restarted: list[str] = []
    disrupted: list[str] = []
    exhausted = None
    for reason in reasons:
        tally, spent = _count(tally, reason, max_retries, restarted, disrupted)
        exhausted = exhausted or spent
    return tally, tuple(restarted), tuple(disrupted), exhausted


def _pending(cur: Cursor, new: int, seen: str | None, gang: Gang) -> str | None:
    """The failure class seen but not yet counted (Volcano has not restarted for it yet)."""
    used_seen = new > 0 and cur.pending is None and seen is not None
    if seen is not None and not gang.restarting and not used_seen:
        return seen  # Volcano has not restarted for it yet: count it when it does
    return cur.pending if new == 0 else None


def _count(
    tally: Tally, reason: str, max_retries: int, restarted: list[str], disrupted: list[str]
) -> tuple[Tally, Exhausted | None]:
    """Count one restart of this class, unless its limit is already spent.

    A failure no restart fixes (OOMKilled, a bad image) fails the job: the restart Volcano
    began for it before a pass saw it is stopped, so it is neither a restart nor a disruption.
    """
    if _fatal(reason):
        return tally, None
    spent = _spent(tally, reason, max_retries)
    if spent is not None:
        return tally, spent
    if reason in NOT_CHARGED:
        disrupted.append(reason)
        return replace(tally, disruptions=tally.disruptions + 1), None
    restarted.append(reason)
    return replace(tally, restarts=tally.restarts + 1), None


def _spent(tally: Tally, reason: str, max_retries: int) -> Exhausted | None:
    """Whether one more restart of this class is past its limit."""
    if _fatal(reason):
        return None  # the job fails with its own reason, not a spent budget
    if reason in NOT_CHARGED:
        if tally.disruptions < MAX_DISRUPTIONS:
            return None
        msg = (
            f"the gang was disrupted again ({reason}) after {tally.disruptions} evictions or "
            f"preemptions, the operator's fixed limit ({MAX_DISRUPTIONS}); they never spend "
            "runPolicy.maxRetries, but a node that keeps evicting must not loop the job forever"
        )
        return Exhausted(TOO_MANY_DISRUPTIONS, reason, msg)
    if tally.restarts < max_retries:
        return None
    msg = (
        f"the gang failed again ({reason}) after {tally.restarts} whole-gang restarts: "
        f"runPolicy.maxRetries ({max_retries}) is spent"
    )
    return Exhausted(MAX_RETRIES_EXCEEDED, reason, msg)


def _fatal(reason: str) -> bool:
    """A class no restart can fix (the lifecycle fails the job with it at once)."""
    policy = POLICIES.get(reason)
    return policy is not None and not policy.retry


def events(counted: Accounted, max_retries: int) -> list[tuple[str, str]]:
    """The Warning Events (reason, message) of the restarts counted in one pass."""
    out = []
    first = counted.tally.restarts - len(counted.restarted) + 1
    for n, why in enumerate(counted.restarted, first):
        out.append(("GangRestarted", f"whole-gang restart {n} of {max_retries} ({why})"))
    first = counted.tally.disruptions - len(counted.disrupted) + 1
    for n, why in enumerate(counted.disrupted, first):
        msg = (
            f"whole-gang restart after a disruption ({why}): it does not count against "
            f"runPolicy.maxRetries ({max_retries}); disruption {n} of at most {MAX_DISRUPTIONS}"
        )
        out.append(("GangDisrupted", msg))
    return out


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def replaced(counted: Accounted, reason: str, max_retries: int) -> Accounted:
    """The operator recreates the gang itself for this failure (a bad node, a hang): count once.

    Volcano's own restart for it, if this pass already counted one, is the same restart; a
    failure still pending on the cursor is counted here instead (the cursor dies with the job).
    """
    if reason in counted.restarted or reason in counted.disrupted:
        return counted
    cursor = counted.tally.cursor
    if reason in POD_NODE_FAULTS and cursor and cursor.retry_count and cursor.pending != reason:
        # A pod's failure: Volcano restarted this gang for it too, and an earlier pass counted
        # that restart (a failure seen before Volcano restarts stays pending until counted).
        return counted
    restarted, disrupted = list(counted.restarted), list(counted.disrupted)
    tally, spent = _count(counted.tally, reason, max_retries, restarted, disrupted)
    if tally.cursor is not None:
        tally = replace(tally, cursor=replace(tally.cursor, pending=None))
    return Accounted(tally, tuple(restarted), tuple(disrupted), spent)
