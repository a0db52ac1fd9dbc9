"""Thin I/O: read rank 0's live metrics while the training gang runs, at most once per interval.

The pod and its named containerPort (contract.METRICS_PORT_NAME) say where to read; the figures
and every decision about them live in progress.py. A read that fails (the trainer is loading
graphs, the pod moved) is no reading, never an error of the pass.
"""

from __future__ import annotations

import datetime
import os
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from trainium_operator.api import naming
from trainium_operator.api.spec import TrainiumJobSpec
from trainium_operator.cluster import gangpods, k8s
from trainium_operator.domain import failures, progress, stragglers
from trainium_operator.domain.lifecycle import Child
from trainium_operator.manifests import ownership
from trainium_operator.manifests.ownership import Owner
from trainium_trainer import contract

Json = dict[str, Any]
#: The chart's progressIntervalSeconds.
INTERVAL_ENV = "TRAINIUM_PROGRESS_INTERVAL_SECONDS"
#: The chart's progressWriteSeconds: the least time between two progress writes of one job.
WRITE_ENV = "TRAINIUM_PROGRESS_WRITE_SECONDS"
#: The chart's firstStepAllowanceSeconds: a hang's extra time before the first step.
ALLOWANCE_ENV = "TRAINIUM_FIRST_STEP_ALLOWANCE_SECONDS"
#: One read may take this long; a pass must not hang on a trainer that does not answer.
TIMEOUT_SECONDS = 5.0
#: Lines of rank 0's log a Hung failure carries.
HUNG_LOG_LINES = 20
#: Marks a progress to be removed from status (merge-patch null).
CLEAR: Json = {}


@dataclass(frozen=True)
class Reading:
    """What this pass learned: status.progress to write (CLEAR: remove), a hang, the next read."""

    write: Json | None = None
    hung: failures.Failure | None = None
    next_read_in: float | None = None
    #: When rank 0 was last read (monotonic seconds), for the job's record: one read per interval.
    read_at: float | None = None
    #: The progress the last reading made (written or not), for the job's record.
    latest: Json | None = None
    #: Each node's step seconds by its index in the gang, read now (None: no reading now).
    node_steps: Mapping[int, float] | None = None


def interval() -> float:
    """Seconds between two reads of one job (the chart's progressIntervalSeconds)."""
    return max(1.0, _seconds(INTERVAL_ENV, progress.DEFAULT_INTERVAL_SECONDS))


def write_every() -> float:
    """Seconds between two progress writes of one job (the chart's progressWriteSeconds)."""
    return max(1.0, _seconds(WRITE_ENV, progress.WRITE_EVERY_SECONDS))


def first_step_allowance() -> int:
    """A hang's extra seconds before the first step (the chart's firstStepAllowanceSeconds)."""
    return max(0, int(_seconds(ALLOWANCE_ENV, progress.FIRST_STEP_ALLOWANCE_SECONDS)))


def _seconds(name: str, default: float) -> float:
    """A number of seconds from the environment; the default when unset or not a number."""
    try:
        return float(os.environ.get(name) or default)
    except ValueError:
        return float(default)


@dataclass(frozen=True)
class Sight:
    """What a progress look starts from: the training gang, the job's status, the time, and
    what the job's record and the pod watch know."""

    training: Child
    gang_uid: str | None
    status: Json
    now: str
    #: When the job's record says rank 0 was last read (monotonic seconds).
    last_read: float | None = None
    #: Monotonic now (None: the clock's).
    clock: float | None = None
    #: Rank 0's pod as the pod watch showed it.
    rank0: Json | None = None
    #: The pod watch runs: no rank0 means no pod to read (else the gang's pods are listed).
    watched: bool = False
    #: The progress the job's last reading made (its record's memory), written or not.
    last_progress: Json | None = None


def look(spec: TrainiumJobSpec, owner: Owner, sight: Sight) -> Reading:
    """Read rank 0 when due and the gang runs; drop status.progress once no gang trains."""
    status, training, uid = sight.status, sight.training, sight.gang_uid
    previous = status.get("progress") if isinstance(status.get("progress"), dict) else None
    if training is Child.SUCCEEDED:  # kubectl get keeps the final step/total, not a blank
        return Reading(write=progress.finished(previous))
    if training not in (Child.RUNNING, Child.PENDING, Child.RESTARTING) or uid is None:
        return Reading(write=CLEAR if previous else None)
    if training is not Child.RUNNING:
        # A replaced gang (a hang restart, a bad node) shows nothing until its first reading:
        # the old gang's step and ETA are not this one's.
        old = previous is not None and previous.get("gang") not in (None, uid)
        return Reading(write=CLEAR if old else None, read_at=sight.last_read)
    clock = time.monotonic() if sight.clock is None else sight.clock
    last_read = sight.last_read
    kept = sight.last_progress
    if last_read is not None and clock - last_read < interval():
        left = interval() - (clock - last_read)
        return Reading(next_read_in=left, read_at=last_read, latest=kept)
    pod = sight.rank0 if sight.rank0 is not None or sight.watched else _rank0_pod(owner)
    if pod is None and sight.watched:
        # Nothing to read, so nothing new to judge: the pod watch wakes the job once rank 0 has
        # an address (a look per interval had made ~7 passes per job at 1000 jobs without pods).
        return Reading(read_at=last_read, latest=kept)
    return _read(spec, owner, pod, previous, replace(sight, clock=clock))


def _read(
    spec: TrainiumJobSpec, owner: Owner, pod: Json | None, previous: Json | None, sight: Sight
) -> Reading:
    """One reading of rank 0's metrics: the new progress, and whether the gang is hung."""
    text = read_metrics(*address) if pod and (address := _address(pod)) else None
    sample = progress.parse(text) if text is not None else None
    assert sight.gang_uid is not None
    base = newest(previous, sight.last_progress, sight.gang_uid)
    new = progress.advance(base, sample, sight.gang_uid, sight.now)
    deadline = spec.runPolicy.progressDeadlineSeconds
    why = progress.hung(new, deadline, sight.now, first_step_allowance())
    hung = failures.make_failure("Hung", why, _log_tail(owner, pod)) if why else None
    due = progress.write_due(previous, new, sight.now, write_every())
    write = new if due or hung else None
    if write is None and "step" not in new and previous and previous.get("gang") != new["gang"]:
        write = CLEAR  # an earlier gang's step and ETA are not this one's
    return Reading(
        write=write, hung=hung, next_read_in=interval(), read_at=sight.clock, latest=new,
        node_steps=stragglers.parse(text) if text else None,
    )  # fmt: skip


def newest(written: Json | None, remembered: Json | None, gang: str) -> Json | None:
    """What a reading starts from: the last reading of this gang (remembered) unless status has
    a newer one. Status is written at most every progressWriteSeconds; judged from it, every
    unwritten reading saw the step move again, and a hang counted from the next write."""
    if not remembered or remembered.get("gang") != gang:
        return written
    if not written or written.get("gang") != gang:
        return remembered
    then, now = written.get("observedAt"), remembered.get("observedAt")
    if not isinstance(then, str) or not isinstance(now, str):
        return remembered if isinstance(now, str) else written
    return remembered if progress.seconds_between(then, now) >= 0 else written


def is_rank0(pod: str, labels: Mapping[str, str]) -> bool:
    """Whether the pod is a training gang's pod 0 (the one whose metrics a pass reads).

    By its name's end: each replacement gang has a name of its own (naming.successor); the
    watch maps the pod to its job by its labels.
    """
    train = labels.get(ownership.LABEL_STAGE) == contract.STAGE_TRAIN
    return train and naming.node_index(pod) == 0


def slim_rank0(pod: Mapping[str, Any]) -> Json | None:
    """What a read needs of rank 0's pod: name, containers' names and ports, IP (None: no IP)."""
    ip = (pod.get("status") or {}).get("podIP")
    if not ip:
        return None
    containers = [
        {"name": c.get("name"), "ports": list(c.get("ports") or [])}
        for c in (pod.get("spec") or {}).get("containers") or []
    ]
    name = (pod.get("metadata") or {}).get("name")
    return {"metadata": {"name": name}, "spec": {"containers": containers}, "status": {"podIP": ip}}


def _rank0_pod(owner: Owner) -> Json | None:
    """Pod 0 of the training gang (every node's local rank 0 serves the same figures)."""
    pods = gangpods.gang_pods(owner, contract.STAGE_TRAIN)
    first = naming.pod_name(naming.stage_job(owner.name, "train", None, owner.train_gang), 0)
    running = [p for p in pods if (p.get("status") or {}).get("podIP")]
    return next((p for p in running if p["metadata"]["name"] == first), None) or next(
        iter(running), None
    )


def _address(pod: Mapping[str, Any]) -> tuple[str, int] | None:
    """The pod's IP and its named metrics port (the pod spec is the one source of the port)."""
    ip = (pod.get("status") or {}).get("podIP")
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == contract.METRICS_PORT_NAME and ip:
                return str(ip), int(port["containerPort"])
    return None


def read_metrics(ip: str, port: int, timeout: float = TIMEOUT_SECONDS) -> str:
    """GET http://ip:port/metrics; empty text when the trainer does not answer."""
    host = f"[{ip}]" if ":" in ip else ip
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=timeout) as resp:
            return str(resp.read(1 << 20).decode("utf-8", "replace"))
    except (OSError, urllib.error.URLError, ValueError):
        return ""


def _log_tail(owner: Owner, pod: Json | None) -> list[str]:
    """The last lines of the rank-0 pod's trainer log (its ranks' lines, prefixed by --tee)."""
    if pod is None:
        return []
    container = ((pod.get("spec") or {}).get("containers") or [{}])[0].get("name")
    if not container:
        return []
    return k8s.pod_log_tail(owner.namespace, pod["metadata"]["name"], container, HUNG_LOG_LINES)


def timestamp(seconds: float) -> str:
    """An epoch time as RFC 3339 with microseconds (status.progress's times)."""
    moment = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def read_time() -> str:
    """Now, to the microsecond: a hang is judged at the first reading past its deadline, not a
    whole second later (whole seconds made 60.4 s read as 60, and the next reading declared it)."""
    return timestamp(time.time())
