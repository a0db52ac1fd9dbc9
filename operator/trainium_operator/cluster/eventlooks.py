"""A pending gang's FailedCreate Events, looked at a few times as it ages (nothing watches them).

Volcano says it cannot create a gang's pods (a missing PriorityClass, a quota) only in Events on
its job; a pass lists them at each look (15 s, 1, 5, 15 min, then every 15 min) and the job's
record keeps what the look found, so the passes between looks list nothing. A DRA job's look
also reads its pods: a ResourceClaim nothing can allocate (no DRA driver, Volcano's DRA off)
leaves them Pending, and only the scheduler's PodScheduled message or the kubelet says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainium_operator.api import naming
from trainium_operator.cluster import k8s
from trainium_operator.domain import lifecycle, unschedulable
from trainium_operator.domain.lifecycle import Blocker, Child
from trainium_operator.manifests import cache, dra

Json = dict[str, Any]


#: A FailedCreate Event older than this no longer speaks for the gang (Volcano retries sooner).
RECENT_SECONDS = 600.0
#: Ages (seconds) of a pending gang at which its Events are read again: nothing watches Events,
#: so a gang whose pods cannot be created is found by these few looks, not by polling.
EVENT_LOOKS = (15.0, 60.0, 300.0, 900.0)


@dataclass(frozen=True)
class EventLook:
    """What one look at a pending gang's FailedCreate Events found (kept in the job's record)."""

    #: The Volcano job instance looked at (its uid) and which look it was (look_number).
    gang: str
    number: int
    #: The Volcano job's name, and the newest FailedCreate's time and words ("" if none).
    job: str = ""
    at: str = ""
    message: str = ""
    #: A DRA gang's ResourceClaim nothing allocates: what the job's condition says ("" if none).
    claim: str = ""


#: The condition reason of a gang held by a ResourceClaim that cannot be allocated.
CLAIM_NOT_ALLOCATED = "ClaimNotAllocated"
#: The kubelet's Event on a pod whose claims it cannot prepare (pkg/kubelet/events).
KUBELET_DRA = "FailedPrepareDynamicResources"
#: The label Volcano's job controller puts on its pods (volcano.sh/job-name).
VOLCANO_JOB_LABEL = "volcano.sh/job-name"


def look_number(age: float) -> int:
    """Which look a gang of this age is due (0: none yet): EVENT_LOOKS, then one per last."""
    last = EVENT_LOOKS[-1]
    passed = sum(1 for at in EVENT_LOOKS if at <= age)
    return passed + (int((age - last) // last) if age >= last else 0)


def look_at_events(
    namespace: str, job: Json | None, now: str, last: EventLook | None = None, owner: str = ""
) -> EventLook | None:
    """The pending gang's newest FailedCreate Event as of its latest look (None: no look due).

    Listed once per look, not per pass: every pass of a gang pending past its first look had
    listed Events (4.5 lists per job at 1000 jobs). A young gang is Volcano still at work.
    owner: the TrainiumJob of a DRA job (spec.devices dra), whose pods each look reads too.
    """
    if job is None or _state(job) is not Child.PENDING or not now:
        return None
    number = look_number(_age(job, now))
    if number == 0:
        return None
    md = job["metadata"]
    gang = str(md.get("uid") or md["name"])
    if last is not None and (last.gang, last.number) == (gang, number):
        return last
    events = [e for e in k8s.list_events(namespace, md["name"], "FailedCreate") if _about(e, job)]
    newest = max(events, key=_event_time, default=None)
    claim = claim_look(namespace, job, owner) if owner else ""
    if newest is None:
        return EventLook(gang, number, md["name"], claim=claim)
    said = " ".join(str(newest.get("message") or "no message").split())
    return EventLook(gang, number, md["name"], _event_time(newest), said, claim)


def claim_look(namespace: str, job: Json, owner: str) -> str:
    """Why a DRA gang's pods wait on their ResourceClaim, for the job's condition ("": they don't).

    The scheduler says it in the pod's PodScheduled message; a Volcano without DRA binds the pod
    anyway and only the kubelet's Event on the pod says the claim was never allocated.
    """
    md = job["metadata"]
    listed = k8s.list_pods(namespace, f"{VOLCANO_JOB_LABEL}={md['name']}")
    pods = [p for p in listed if _of_job(p, md.get("uid"))]
    stuck = unschedulable.unallocated_claim(pods) or _unprepared(namespace, pods)
    if stuck is None:
        return ""
    return unschedulable.claim_message(stuck, dra.DEVICE_CLASS, naming.claim_template_name(owner))


def _unprepared(namespace: str, pods: list[Json]) -> unschedulable.ClaimStuck | None:
    """A pod bound with its claim unallocated: the kubelet's FailedPrepareDynamicResources."""
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or (pod.get("status") or {}).get("phase", "Pending") != "Pending":
            continue
        name = pod["metadata"]["name"]
        events = [e for e in k8s.list_events(namespace, name, KUBELET_DRA) if _on_pod(e, pod)]
        newest = max(events, key=_event_time, default=None)
        if newest is not None:
            said = " ".join(str(newest.get("message") or "no message").split())
            return unschedulable.ClaimStuck(name, unschedulable.pod_claim(pod), said, node)
        return None  # one bound pod tells for the gang: the rest wait on the same scheduler
    return None


def _of_job(pod: Json, uid: str | None) -> bool:
    """The pod is of this Volcano job instance (a replaced one's pods share its name)."""
    owners = pod["metadata"].get("ownerReferences") or []
    return uid is None or not owners or any(o.get("uid") == uid for o in owners)


def _on_pod(event: Json, pod: Json) -> bool:
    """The Event is about this pod (kind and, when both say, uid)."""
    ref = event.get("involvedObject") or {}
    return ref.get("kind") == "Pod" and ref.get("uid") in (None, pod["metadata"].get("uid"))


def failed_create(looked: EventLook | None, now: str) -> Blocker | None:
    """Why Volcano cannot create or place a pending gang's pods: a claim nothing allocates (as
    of the latest look), or its newest FailedCreate while recent."""
    if looked is not None and looked.claim:
        return Blocker(CLAIM_NOT_ALLOCATED, looked.claim)
    if looked is None or not looked.at or not now:
        return None
    if cache.seconds_between(looked.at, now) > RECENT_SECONDS:
        return None
    msg = f"Volcano cannot create the pods of {looked.job} (FailedCreate): {looked.message}"
    return Blocker("FailedCreate", msg)


def _about(event: Json, job: Json) -> bool:
    """The Event is about this Volcano job (kind, group and, when both say, uid)."""
    ref = event.get("involvedObject") or {}
    uid, job_uid = ref.get("uid"), job["metadata"].get("uid")
    group = str(ref.get("apiVersion") or "").partition("/")[0]
    return ref.get("kind") == "Job" and group == "batch.volcano.sh" and uid in (None, job_uid)


def _event_time(event: Json) -> str:
    """When an Event last happened, whichever field its writer filled."""
    series = (event.get("series") or {}).get("lastObservedTime")
    md = event.get("metadata") or {}
    times = (
        series,
        event.get("lastTimestamp"),
        event.get("eventTime"),
        md.get("creationTimestamp"),
    )
    return next((str(t) for t in times if t), "")


def next_event_look(job: Json | None, now: str) -> float | None:
    """Seconds until the next look at a pending gang's Events (None: no more looks)."""
    if job is None or _state(job) is not Child.PENDING or not now:
        return None
    age = _age(job, now)
    return next((at - age for at in EVENT_LOOKS if at > age), None)


def _age(job: Json, now: str) -> float:
    """Seconds since the Volcano job was created (0 when it says no time)."""
    return cache.seconds_between(job["metadata"].get("creationTimestamp") or now, now)


def _state(job: Json) -> Child:
    return lifecycle.from_volcano(((job.get("status") or {}).get("state") or {}).get("phase"))
