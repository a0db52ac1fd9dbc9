"""Which Volcano job is the training gang: the TrainiumJob's annotations name it.

A replacement never reuses a name (naming.successor says why). Its name goes on the TrainiumJob,
with the replaced gang's (and a resize's size), before the old gang is deleted: a crash between
the two leaves the new name written and the old gang named as replaced, so the next pass deletes
it (again) and waits for it, then creates the new one once, at the saved size; never two gangs,
never the old name, never the old size.

A gang is the job's only if its controller reference names the job's uid (reads.ours): a job
deleted and re-applied while the garbage collector lags (or with `--cascade=orphan`) finds the
old object's gang under its first name; it takes a fresh name at once and waits, bounded, for the
old gang to go (`taken`), never reading it as its own.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from trainium_operator.api import naming
from trainium_operator.api.crd import GROUP
from trainium_operator.cluster import k8s, reads
from trainium_operator.cluster.reads import Kind, Reader
from trainium_operator.domain import elastic
from trainium_operator.domain.lifecycle import Blocker
from trainium_operator.manifests import cache
from trainium_operator.manifests.ownership import LABEL_JOB, LABEL_STAGE, Owner, controller_uid

Json = dict[str, Any]
#: (body, type, reason, message, action): post one Event about the job (report.Emit).
Emit = Callable[[Json, str, str, str, str], None]
#: The current training gang's name ("" or absent: the first, `<job>-train`).
ANNOTATION_TRAIN_GANG = f"{GROUP}/train-gang"
#: The gang it replaced: waited for (and deleted, if a crash left it) before the new one starts.
ANNOTATION_REPLACED_GANG = f"{GROUP}/replaced-gang"
#: A resize's size, written with the successor's name (elastic.Named): {"nodes": 2, "resize": 1}.
ANNOTATION_TRAIN_GANG_SIZE = f"{GROUP}/train-gang-size"


def owner_of(meta: Mapping[str, Any]) -> Owner:
    """The Owner of a TrainiumJob's metadata, with the training gang its annotations name."""
    notes = meta.get("annotations") or {}
    return Owner(
        meta["name"], meta["namespace"], meta.get("uid", ""),
        train_gang=str(notes.get(ANNOTATION_TRAIN_GANG) or ""),
        replaced_gang=str(notes.get(ANNOTATION_REPLACED_GANG) or ""),
        created=str(meta.get("creationTimestamp") or ""),
    )  # fmt: skip


def train_name(owner: Owner) -> str:
    """The name of the job's current training gang."""
    return naming.stage_job(owner.name, "train", None, owner.train_gang)


@dataclass(frozen=True)
class Train:
    """The training gang as read: live, still stopping, or a replaced one left undeleted."""

    job: Json | None
    stopping: bool
    #: A replaced gang a crash left undeleted (its name and uid): deleted before its successor.
    leftover: str = ""
    leftover_uid: str = ""
    #: An object this job does not control holding the gang's name (an old job's, an orphan).
    taken: Json | None = None


def read_train(owner: Owner, read: Reader) -> Train:
    """The current gang (None while it or the one it replaces still stops)."""
    ns, name = owner.namespace, train_name(owner)
    job, taken = reads.ours(read.get(Kind.VCJOB, ns, name), owner)
    first = naming.vcjob_name(owner.name, "train")
    if taken is None and name != first:  # renamed for it: still waited for while it stays
        taken = reads.ours(read.get(Kind.VCJOB, ns, first), owner)[1]
    if job is not None and _going(job):
        return Train(None, True)  # a replaced gang still stopping
    old_name = owner.replaced_gang
    old = None
    if old_name and old_name != name:
        old = reads.ours(read.get(Kind.VCJOB, ns, old_name), owner)[0]
    if job is not None or old is None:
        return Train(job, False, taken=taken)
    if _going(old):
        return Train(None, True, taken=taken)
    return Train(None, True, old_name, str(old["metadata"].get("uid") or ""), taken)


def _going(job: Json) -> bool:
    return bool(job["metadata"].get("deletionTimestamp"))


def name_successor(
    body: Json, owner: Owner, train_uid: str, read: Reader, size: elastic.Named | None = None
) -> tuple[Json, Owner]:
    """Before a gang of uid train_uid is deleted: name its successor on the TrainiumJob, and
    the size a resize builds it at (one guarded patch: the name never goes without it)."""
    new, old = naming.successor(owner.name, train_uid), train_name(owner)
    if new == owner.train_gang:
        return body, owner
    notes = {ANNOTATION_TRAIN_GANG: new, ANNOTATION_REPLACED_GANG: old}
    if size is not None:
        notes[ANNOTATION_TRAIN_GANG_SIZE] = json.dumps(
            {"nodes": size.nodes, "resize": size.resize}, separators=(",", ":")
        )
    patched = _annotate(body, owner, notes, read)
    return patched, replace(owner, train_gang=new, replaced_gang=old)


def named_size(meta: Mapping[str, Any]) -> elastic.Named | None:
    """The size a resize saved with the training gang's name (None: none, or malformed)."""
    raw = (meta.get("annotations") or {}).get(ANNOTATION_TRAIN_GANG_SIZE)
    try:
        found = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return None
    if not isinstance(found, dict):
        return None
    nodes, resize = found.get("nodes"), found.get("resize")
    if not (isinstance(nodes, int) and isinstance(resize, int) and nodes > 0):
        return None
    return elastic.Named(nodes, resize)


def _annotate(body: Json, owner: Owner, notes: Json, read: Reader) -> Json:
    """Patch the job's annotations if it is still the version this pass read (else 409)."""
    rv = str(body["metadata"].get("resourceVersion") or "")
    patched = k8s.annotate_trainiumjob(owner.namespace, owner.name, notes, resource_version=rv)
    read.wrote(Kind.TRAINIUMJOB, owner.namespace, owner.name, patched)
    return patched


#: Seconds a job waits for an object of another owner to free its gang's name (the garbage
#: collector deleting an old job's gang, typically within seconds) before it takes a fresh one.
NAME_WAIT_SECONDS = 120.0


def name_wait_left(holder: Json, waited: float | None) -> float:
    """Seconds still to wait for holder to go (0: start beside it now).

    An object with no controller (left by `kubectl delete --cascade=orphan`, or made by hand)
    is never collected: waiting gains nothing. One being deleted is waited for to the end.
    """
    meta = holder["metadata"]
    if meta.get("deletionTimestamp"):
        return NAME_WAIT_SECONDS
    if not controller_uid(meta):
        return 0.0
    if waited is None:
        return NAME_WAIT_SECONDS
    return max(0.0, NAME_WAIT_SECONDS - waited)


def name_taken(what: str, holder: Json, left: float = 0.0) -> Blocker:
    """The job waits for an object it does not control to leave the name its child needs."""
    meta = holder["metadata"]
    name, boss = meta.get("name", ""), controller_uid(meta)
    held = f"controlled by uid {boss}" if boss else "controlled by nothing"
    going = " and being deleted" if meta.get("deletionTimestamp") else ""
    then = f"; starting without it in {left:.0f} s if it stays" if boss and left else ""
    msg = (
        f"Volcano job {name!r} (the {what}) exists but is not this job's ({held}{going}: "
        f"left by an earlier job of this name); waiting for it to be deleted{then}"
    )
    return Blocker("NameTaken", msg)


@dataclass(frozen=True)
class Taken:
    """An object this job does not control holds the training gang's first name."""

    holder: Json
    #: The job waits for it to go (None: it starts beside it: an orphan, or waited long enough).
    blocker: Blocker | None
    #: It holds the name the job's next gang would take: the job takes a fresh one first.
    rename: bool
    #: Seconds until the job stops waiting for it (0: it does not wait).
    left: float


def taken(owner: Owner, gang: Train, now: str) -> Taken | None:
    """The training gang's first name held by another owner's object, if it is.

    The job's gang never takes that name even once it is freed: Volcano 1.16 loses a job
    created under the name of one it is still cleaning up (volcano-sh/volcano#3968; seen on
    the tier with the collector deleting the old gang just before), so it renames at once and
    waits, bounded, for the old one to go (its pods hold the nodes the new gang needs).
    """
    if gang.taken is None:
        return None
    waited = cache.seconds_between(owner.created, now) if owner.created and now else None
    left = name_wait_left(gang.taken, waited)
    blocker = name_taken("training gang", gang.taken, left) if left > 0 else None
    rename = gang.taken["metadata"].get("name") == train_name(owner)
    return Taken(gang.taken, blocker, rename, left)


def take_fresh_name(body: Json, holder: Json, read: Reader, emit: Emit) -> Json:
    """Name the training gang after the holder of its name (never reused); the job as patched."""
    owner, meta = owner_of(body["metadata"]), holder["metadata"]
    new = naming.successor(owner.name, str(meta.get("uid") or ""))
    patched = _annotate(body, owner, {ANNOTATION_TRAIN_GANG: new}, read)
    boss = controller_uid(meta)
    why = f"controlled by uid {boss}" if boss else "left without an owner"
    msg = (
        f"Volcano job {meta.get('name')!r} is not this job's ({why}); the training gang "
        f"takes the fresh name {new!r} (a name Volcano may still be cleaning up is never reused)"
    )
    emit(body, "Normal", "GangRenamed", msg, "Renaming")
    return patched


def finish_replacing(owner: Owner, train: Train | None) -> None:
    """Delete a replaced gang a crash left (foreground: its successor waits for its pods)."""
    if train is not None and train.leftover:
        k8s.delete_vcjob(owner.namespace, train.leftover, train.leftover_uid, foreground=True)


def gang_stopping(owner: Owner) -> Blocker:
    """The replaced training gang is still being deleted: its successor waits for its nodes."""
    name = owner.replaced_gang or train_name(owner)
    msg = f"waiting for the replaced training gang {name} to stop before starting a new one"
    return Blocker("GangStopping", msg, warn=False)


def stage_selector(job: str, stage: str) -> str:
    """The label selector of one stage's pods (of every gang of it)."""
    return f"{LABEL_JOB}={naming.label_value(job)},{LABEL_STAGE}={stage}"


def of_current(pods: list[Json], body: Json) -> list[Json]:
    """The pods of the job's current training gang (a replaced one's may still be stopping)."""
    gang = train_name(owner_of(body["metadata"]))
    return [p for p in pods if naming.gang_of(str(p["metadata"].get("name", ""))) == gang]
