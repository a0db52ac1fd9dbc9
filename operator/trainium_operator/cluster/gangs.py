"""Which Volcano job is the training gang: the TrainiumJob's annotations name it.

A replacement never reuses a name (naming.successor says why). Its name goes on the TrainiumJob,
with the replaced gang's, before the old gang is deleted: a crash between the two leaves the new
name written and the old gang named as replaced, so the next pass deletes it (again) and waits
for it, then creates the new one once; never two gangs, never the old name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from trainium_operator.api import naming
from trainium_operator.api.crd import GROUP
from trainium_operator.build.builders import LABEL_JOB, LABEL_STAGE, Owner
from trainium_operator.cluster import k8s
from trainium_operator.cluster.reads import Kind, Reader
from trainium_operator.domain.lifecycle import Blocker

Json = dict[str, Any]
#: The current training gang's name ("" or absent: the first, `<job>-train`).
ANNOTATION_TRAIN_GANG = f"{GROUP}/train-gang"
#: The gang it replaced: waited for (and deleted, if a crash left it) before the new one starts.
ANNOTATION_REPLACED_GANG = f"{GROUP}/replaced-gang"


def owner_of(meta: Mapping[str, Any]) -> Owner:
    """The Owner of a TrainiumJob's metadata, with the training gang its annotations name."""
    notes = meta.get("annotations") or {}
    return Owner(
        meta["name"], meta["namespace"], meta.get("uid", ""),
        train_gang=str(notes.get(ANNOTATION_TRAIN_GANG) or ""),
        replaced_gang=str(notes.get(ANNOTATION_REPLACED_GANG) or ""),
    )  # fmt: skip


def train_name(owner: Owner) -> str:
    """The name of the job's current training gang."""
    return naming.stage_job(owner.name, "train", None, owner.train_gang)


@dataclass(frozen=True)
class Train:
    """The training gang as read: live, still stopping, or a replaced one left undeleted."""

    job: Json | None
    stopping: bool
    #: A replaced gang a crash left undeleted (its name): deleted before its successor starts.
    leftover: str = ""


def read_train(owner: Owner, read: Reader) -> Train:
    """The current gang (None while it or the one it replaces still stops)."""
    ns, name = owner.namespace, train_name(owner)
    job = read.get(Kind.VCJOB, ns, name)
    if job is not None and _going(job):
        return Train(None, True)  # a replaced gang still stopping
    old_name = owner.replaced_gang
    old = read.get(Kind.VCJOB, ns, old_name) if old_name and old_name != name else None
    if job is not None or old is None:
        return Train(job, False)
    return Train(None, True, "" if _going(old) else old_name)


def _going(job: Json) -> bool:
    return bool(job["metadata"].get("deletionTimestamp"))


def name_successor(body: Json, owner: Owner, train_uid: str, read: Reader) -> tuple[Json, Owner]:
    """Before a gang of uid train_uid is deleted: name its successor on the TrainiumJob."""
    new, old = naming.successor(owner.name, train_uid), train_name(owner)
    if new == owner.train_gang:
        return body, owner
    notes = {ANNOTATION_TRAIN_GANG: new, ANNOTATION_REPLACED_GANG: old}
    patched = k8s.annotate_trainiumjob(owner.namespace, owner.name, notes)
    read.wrote(Kind.TRAINIUMJOB, owner.namespace, owner.name, patched)
    return patched, replace(owner, train_gang=new, replaced_gang=old)


def finish_replacing(owner: Owner, leftover: str) -> None:
    """Delete a replaced gang a crash left (foreground: its successor waits for its pods)."""
    if leftover:
        k8s.delete_vcjob(owner.namespace, leftover, foreground=True)


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
    prefix = f"{train_name(owner_of(body['metadata']))}-{naming.ROLE}-"
    return [p for p in pods if str(p["metadata"].get("name", "")).startswith(prefix)]
