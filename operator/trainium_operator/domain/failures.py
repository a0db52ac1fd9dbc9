"""Why a gang's pod failed, from its API status and the tail of its log: pure, no I/O.

The operator reads pods (plain dicts as the API returns them) and the failing container's log
before Volcano deletes them; this module turns that into one condition reason, a retry decision
and one human line. Evidence is weighed in a fixed order: a disruption (eviction, preemption)
explains everything after it; a waiting error (bad image) needs no log; the kubelet's OOMKilled
beats any log text; then the log table below, most specific first, so an EFA line beats the
generic Python traceback that follows it.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from trainium_operator.domain import checkpoints, logrules
from trainium_trainer import contract

Json = Mapping[str, Any]

#: How many log lines go into the Event and the condition message.
LOG_TAIL_LINES = 50
#: A matched log line is cut to this length in the one-line message.
_EVIDENCE_CHARS = 300


@dataclass(frozen=True)
class Policy:
    """What a failure class means for the gang: restart or not, and whether it costs a retry."""

    retry: bool
    counts_against_budget: bool
    why: str


#: The one table of failure classes (condition reasons). Evictions and preemptions do not
#: consume runPolicy.maxRetries; anything that would fail the same way again does not restart.
POLICIES: Mapping[str, Policy] = {
    "Evicted": Policy(True, False, "the node took the pod away; the work itself was fine"),
    "Preempted": Policy(True, False, "a higher-priority workload took the nodes"),
    "Interrupted": Policy(
        True, False, "SIGTERM (drain, spot reclaim): it checkpointed and stopped"
    ),
    "ImagePullFailed": Policy(False, True, "a bad image name or missing pull secret stays bad"),
    "ContainerConfigError": Policy(False, True, "a missing Secret/ConfigMap or device needs a fix"),
    "AdmissionRejected": Policy(True, True, "the kubelet refused the pod (device plugin state)"),
    "OOMKilled": Policy(False, True, "the same batch on the same instance will OOM again"),
    "LossDiverged": Policy(False, True, "resuming replays the same steps into the same NaN"),
    "NeuronCompilerError": Policy(False, True, "neuronx-cc fails the same graph the same way"),
    "DeviceOutOfMemory": Policy(False, True, "the model does not fit the Neuron device memory"),
    "EfaInitFailed": Policy(True, True, "EFA/libfabric set-up is per node; retry may land well"),
    "NeuronRuntimeError": Policy(True, True, "runtime, driver and CCOM faults are often transient"),
    "RendezvousTimeout": Policy(True, True, "a peer was late or gone; the next gang may meet"),
    "UserCodeError": Policy(False, True, "an exception in the training code repeats on restart"),
    "Unschedulable": Policy(False, False, "nothing ran; more of the short resource is needed"),
    "Unknown": Policy(True, True, "no evidence either way: restart within the budget"),
    "PreflightFailed": Policy(True, False, "the node failed its checks; the next gang avoids it"),
    "Hung": Policy(True, True, "the step stood still past runPolicy.progressDeadlineSeconds"),
    "NodeUnhealthy": Policy(
        True, False, "the node said it is failing (health.py); the gang left it before a crash"
    ),
    "Straggler": Policy(True, False, "one node's steps were slow; the gang left it"),
}

#: Reasons that say little on their own, or that a pod also shows when a peer died first (its
#: rendezvous or gloo link breaks): any other cause in the gang is more telling.
SECONDARY = frozenset({"UserCodeError", "Unknown", "RendezvousTimeout"})
#: Disruptions that explain the failures of every other pod in the gang. A SIGTERM stop does
#: not: Volcano also SIGTERMs the peers of a pod that failed, so it explains only itself.
GANG_DISRUPTIONS = frozenset({"Evicted", "Preempted"})
#: Restarts that spend no runPolicy.maxRetries (status.disruptions counts them instead).
NOT_CHARGED = frozenset(r for r, p in POLICIES.items() if p.retry and not p.counts_against_budget)
#: Classes that point at the node the pod ran on: the job's next gangs keep out of it.
NODE_FAULTS = frozenset(
    {"NeuronRuntimeError", "EfaInitFailed", "PreflightFailed", "NodeUnhealthy", "Straggler"}
)
#: 128 + SIGTERM: the trainer (and its torchrun wrapper) exits with it when told to stop.
EXIT_SIGTERM = 143


@dataclass(frozen=True)
class Failure:
    """One classified failure: the condition reason, what to do, and the evidence."""

    reason: str
    retry: bool
    counts_against_budget: bool
    message: str
    log_tail: tuple[str, ...] = ()
    #: For Unschedulable: what is short ("aws.amazon.com/neuron", "memory", a taint...).
    short: str | None = None
    #: The node the failed pod ran on (spec.nodeName), when known.
    node: str | None = None

    @property
    def node_fault(self) -> bool:
        """The class points at the node, and the node is known: keep it out of the next gang."""
        return self.reason in NODE_FAULTS and bool(self.node)


# Kubernetes core/v1 DisruptionTarget reasons (k8s.io/api/core/v1/types.go, Kubernetes >= 1.26;
# 1.25's alpha name was PreemptionByKubeScheduler). Volcano's evictor instead sets Ready=False
# with reason "Evict" and "Pod is evicted, because of preempt|reclaim" (pkg/scheduler/cache).
_DISRUPTION_REASONS: Mapping[str, str] = {
    **dict.fromkeys(("PreemptionByScheduler", "PreemptionByKubeScheduler"), "Preempted"),
    **dict.fromkeys(("EvictionByEvictionAPI", "DeletionByTaintManager"), "Evicted"),
    **dict.fromkeys(("DeletionByPodGC", "TerminationByKubelet"), "Evicted"),
}
# status.reason set by the kubelet: node-pressure eviction, critical-pod preemption, graceful
# node shutdown, and admission refusals (device plugin out of devices: "OutOf<resource>").
_STATUS_REASONS: Mapping[str, str] = {
    **dict.fromkeys(("Evicted", "Shutdown", "Terminated", "NodeLost"), "Evicted"),
    "Preempting": "Preempted",
    **dict.fromkeys(("UnexpectedAdmissionError", "NodeAffinity"), "AdmissionRejected"),
}
_WAITING_REASONS: Mapping[str, str] = {
    **dict.fromkeys(
        ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"),
        "ImagePullFailed",
    ),
    **dict.fromkeys(("CreateContainerConfigError", "CreateContainerError"), "ContainerConfigError"),
}


@dataclass(frozen=True)
class _Found:
    """A pod's failure with when it happened, so a gang can tell the first from the rest."""

    failure: Failure
    at: datetime.datetime | None


def make_failure(
    reason: str, message: str, log_tail: Sequence[str] = (), short: str | None = None
) -> Failure:
    """A Failure whose retry and budget come from the one policy table."""
    policy = POLICIES[reason]
    tail = tuple(line.rstrip("\r\n") for line in log_tail)[-LOG_TAIL_LINES:]
    return Failure(reason, policy.retry, policy.counts_against_budget, message, tail, short)


def classify_pod(pod: Json, log_tail: Sequence[str] = ()) -> Failure | None:
    """Why this pod failed, or None if it has not (running, succeeded, starting, unscheduled)."""
    found = _classify(pod, log_tail)
    return found.failure if found else None


def classify_gang(pods: Sequence[Json], logs: Mapping[str, Sequence[str]]) -> Failure | None:
    """The most telling failure of a gang: a disruption, else the first specific cause to fail.

    A peer that lost its partner fails later with a rendezvous error or a bare traceback, so
    let any primary cause beat the SECONDARY ones, and within a tier the first by finishedAt.
    """
    found = [
        (i, f) for i, pod in enumerate(pods) if (f := _classify(pod, logs.get(pod_name(pod), ())))
    ]
    if not found:
        return None
    far = datetime.datetime.max.replace(tzinfo=datetime.timezone.utc)

    def rank(item: tuple[int, _Found]) -> tuple[int, datetime.datetime, int]:
        index, f = item
        reason = f.failure.reason
        tier = 0 if reason in GANG_DISRUPTIONS else 2 if reason in SECONDARY else 1
        tier = 3 if reason == "Interrupted" else tier
        return tier, f.at or far, index

    return min(found, key=rank)[1].failure


def _classify(pod: Json, log_tail: Sequence[str]) -> _Found | None:
    """The pod's failure, naming the node it ran on."""
    found = _weigh(pod, log_tail)
    node = (pod.get("spec") or {}).get("nodeName")
    if found is None or not node:
        return found
    return _Found(replace(found.failure, node=str(node)), found.at)


def _weigh(pod: Json, log_tail: Sequence[str]) -> _Found | None:
    """Weigh the evidence in order: disruption, waiting error, terminated container, phase."""
    name, status = pod_name(pod), pod.get("status") or {}
    disrupted = _disruption(name, status, log_tail)
    if disrupted:
        return disrupted
    waiting = _waiting(name, status)
    if waiting:
        return _Found(waiting, None)
    term = _failed_container(status)
    if term is not None:
        container, state = term
        failure = _from_container(name, container, state, log_tail)
        if failure.reason in _NOT_A_CAUSE and _killed_by_deletion(pod, state):
            return None  # a peer stopped because the gang is being stopped, not a cause
        return _Found(failure, _time(state.get("finishedAt")))
    if status.get("phase") == "Failed":
        detail = status.get("message") or status.get("reason") or "phase Failed"
        return _Found(_from_log(f"pod {name}", log_tail, f"failed: {detail}"), None)
    return None


#: Exit codes of a container killed by a signal: 128 + SIGKILL, 128 + SIGTERM.
_KILLED = frozenset({137, EXIT_SIGTERM})
#: What a container killed by its pod's deletion shows when nothing more telling was logged.
_NOT_A_CAUSE = SECONDARY | {"Interrupted"}


def stopped_peer(pod: Json) -> bool:
    """Whether the pod's failed container was killed by a signal (not OOM) and its pod is being
    deleted: most likely a peer its gang's stop killed. Looser than _killed_by_deletion: the
    kubelet's last delete (grace 0) moves deletionTimestamp past the kill."""
    term = _failed_container(pod.get("status") or {})
    if term is None or not (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    state = term[1]
    return state.get("exitCode") in _KILLED and state.get("reason") != "OOMKilled"


def _killed_by_deletion(pod: Json, term: Json) -> bool:
    """Killed by a signal once its pod was being deleted, not on its own.

    Volcano deletes every pod of a gang whose pod failed or was evicted, and the kubelet then
    kills the peers (exit 137/143): such a peer says nothing of why the gang stopped, and seen
    after Volcano's restart it would look like a new failure of the restarted gang.
    """
    meta = pod.get("metadata") or {}
    deleted = _time(meta.get("deletionTimestamp"))
    if deleted is None or term.get("exitCode") not in _KILLED or term.get("reason") == "OOMKilled":
        return False
    grace = meta.get("deletionGracePeriodSeconds")
    since = deleted - datetime.timedelta(seconds=grace if isinstance(grace, int) else 0)
    finished = _time(term.get("finishedAt"))
    return finished is None or finished >= since - datetime.timedelta(seconds=1)


def _disruption(name: str, status: Json, log_tail: Sequence[str]) -> _Found | None:
    """Evicted or preempted (or refused by the kubelet): the pod's own work was not at fault."""
    for cond in status.get("conditions") or ():
        kind, why, msg = cond.get("type"), cond.get("reason", ""), cond.get("message") or ""
        reason = None
        if kind == "DisruptionTarget" and cond.get("status") == "True":
            reason = _DISRUPTION_REASONS.get(why)
        elif kind == "Ready" and cond.get("status") == "False" and why == "Evict":
            reason = "Preempted" if re.search(r"preempt|reclaim", msg) else "Evicted"
        if reason:
            text = f"pod {name}: {reason} ({why}): {msg}".rstrip(": ")
            return _Found(
                make_failure(reason, text, log_tail), _time(cond.get("lastTransitionTime"))
            )
    why = status.get("reason") or ""
    reason = _STATUS_REASONS.get(why) or ("AdmissionRejected" if why.startswith("OutOf") else None)
    if reason is None:
        return None
    text = f"pod {name}: {reason} ({why}): {status.get('message') or ''}".rstrip(": ")
    return _Found(make_failure(reason, text, log_tail), None)


def _waiting(name: str, status: Json) -> Failure | None:
    """A container that cannot start (bad image, missing Secret): no log, the state says it."""
    for cs in _statuses(status):
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = _WAITING_REASONS.get(waiting.get("reason", ""))
        if reason:
            detail = f"{waiting['reason']}: {waiting.get('message') or ''}".rstrip(": ")
            return make_failure(reason, f"pod {name} container {cs.get('name')}: {detail}")
    return None


def failed_container(pod: Json) -> str | None:
    """The container whose log tells why the pod failed (None: none failed)."""
    term = _failed_container(pod.get("status") or {})
    return term[0] if term else None


def _failed_container(status: Json) -> tuple[str, Json] | None:
    """The container that failed first: terminated non-zero (or OOMKilled), now or last time."""
    found: list[tuple[datetime.datetime, int, str, Json]] = []
    far = datetime.datetime.max.replace(tzinfo=datetime.timezone.utc)
    for i, cs in enumerate(_statuses(status)):
        for key in ("state", "lastState"):
            term = (cs.get(key) or {}).get("terminated")
            if term and (term.get("exitCode") != 0 or term.get("reason") == "OOMKilled"):
                found.append((_time(term.get("finishedAt")) or far, i, str(cs.get("name")), term))
                break
    if not found:
        return None
    _, _, container, term = min(found, key=lambda f: (f[0], f[1]))
    return container, term


def _from_container(pod: str, container: str, term: Json, log_tail: Sequence[str]) -> Failure:
    """A terminated container: the kubelet's OOMKilled first, then its log and message."""
    where = f"pod {pod} container {container}"
    code, why = term.get("exitCode"), term.get("reason") or "Error"
    # The trainer's checkpoint report shares the message: evidence of progress, not of failure.
    said = tuple(
        ln for ln in str(term.get("message") or "").splitlines() if not checkpoints.is_report(ln)
    )
    tail = tuple(log_tail) or said
    if why == "OOMKilled":
        return make_failure("OOMKilled", f"{where}: OOMKilled (exit {code})", tail)
    if container == contract.PREFLIGHT_CONTAINER and code == contract.EXIT_PREFLIGHT:
        line = next((ln for ln in (*said, *log_tail) if contract.PREFLIGHT_FAILED in ln), "")
        return make_failure("PreflightFailed", f"{where} (exit {code}): {_cut(line.strip())}", tail)
    found = _from_log(where, (*log_tail, *said), f"{why}, exit {code}", tail)
    if code == EXIT_SIGTERM and found.reason in SECONDARY:
        # Told to stop (a generic traceback may follow the signal): the work was not at fault.
        return make_failure(
            "Interrupted", f"{where} ({why}, exit {code}): stopped by SIGTERM", tail
        )
    return found


def _from_log(
    where: str, lines: Sequence[str], how: str, tail: Sequence[str] | None = None
) -> Failure:
    """The first rule (most specific first) with a matching line; Unknown when none matches."""
    tail = lines if tail is None else tail
    for rule in logrules.LOG_RULES:
        line = next((ln for ln in lines if any(p.search(ln) for p in rule.patterns)), None)
        if line is not None:
            return make_failure(rule.reason, f"{where} ({how}): {_cut(line.strip())}", tail)
    return make_failure(
        "Unknown", f"{where} ({how}): no known error in {len(lines)} log lines", tail
    )


def _statuses(status: Json) -> list[Json]:
    """Init containers first: one that fails stops the pod before the main container runs."""
    return [*(status.get("initContainerStatuses") or ()), *(status.get("containerStatuses") or ())]


def _cut(line: str) -> str:
    """One evidence line, short enough for a condition message."""
    return line if len(line) <= _EVIDENCE_CHARS else line[: _EVIDENCE_CHARS - 3] + "..."


def pod_name(pod: Json) -> str:
    """The pod's name as the API has it."""
    return str((pod.get("metadata") or {}).get("name", "?"))


def _time(value: Any) -> datetime.datetime | None:
    """An RFC 3339 API timestamp ("2026-11-22T06:30:59Z"); None when absent or malformed."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
