"""Pure: the core/v1 Events the operator posts about a TrainiumJob.

kopf's `kopf.event` sets every Event's `action` to the placeholder "Action?"; ours says what the
operator did (one word), as `kubectl get events -o wide` and events.k8s.io consumers show it.
"""

from __future__ import annotations

import datetime
import os
import socket
import time
from typing import Any

from trainium_operator.domain.model import Phase
from trainium_operator.domain.status import clip

Json = dict[str, Any]
COMPONENT = "trainium-operator"
#: The API server refuses a core/v1 Event with an eventTime whose message is longer (its "note").
MAX_NOTE = 1024
#: A prerequisite is missing or refused: the job waits for it.
WAIT = "Wait"
#: The gang failed or was disrupted and is restarted (or about to be).
RESTART = "Restart"
#: A node of the gang was flagged (a straggler): it may be replaced later.
FLAG = "Flag"
#: The action of an Event announcing a phase transition, by the new phase.
PHASE_ACTIONS = {
    Phase.PENDING.value: WAIT,
    Phase.WAITING_FOR_CACHE.value: WAIT,
    Phase.PRECOMPILING.value: "Precompile",
    Phase.TRAINING.value: "Train",
    Phase.SUSPENDED.value: "Suspend",
    Phase.SUCCEEDED.value: "Complete",
    Phase.FAILED.value: "Fail",
}


def now_micro() -> str:
    """MicroTime, as eventTime wants it."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def instance() -> str:
    """This operator process (reportingInstance): the pod's hostname, else host and pid."""
    return os.environ.get("HOSTNAME") or f"{socket.gethostname()}-{os.getpid()}"


def build(
    body: Json, type_: str, reason: str, message: str, action: str, *, now_micro: str
) -> Json:
    """A core/v1 Event about a TrainiumJob; its name is client-go's `<object>.<unix nanos hex>`."""
    md = body["metadata"]
    ref = {
        "apiVersion": body.get("apiVersion", ""),
        "kind": body.get("kind", ""),
        "name": md["name"],
        "namespace": md["namespace"],
        "uid": md.get("uid", ""),
        "resourceVersion": md.get("resourceVersion", ""),
    }
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{md['name'][:236]}.{time.time_ns():x}",
            "namespace": md["namespace"],
        },
        "involvedObject": {k: v for k, v in ref.items() if v},
        "type": type_,
        "reason": reason,
        "message": clip(message, MAX_NOTE),
        "action": action,
        "reportingComponent": COMPONENT,
        "reportingInstance": instance(),
        "source": {"component": COMPONENT},  # `kubectl describe`'s From column
        "firstTimestamp": now_micro[:19] + "Z",
        "lastTimestamp": now_micro[:19] + "Z",
        "eventTime": now_micro,
    }
