"""A gang's pods: listed by our labels, narrowed to one Volcano job instance, and why they failed.

Reads only (pods by label selector; a failed container's log tail when the watch did not keep it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from trainium_operator.cluster import k8s
from trainium_operator.domain import failures
from trainium_operator.manifests import ownership
from trainium_operator.manifests.ownership import Owner

Json = dict[str, Any]


#: Pods whose logs a pass reads at most (the first to fail tells; the rest say "peer gone").
MAX_LOGS = 4


def gang_pods(owner: Owner, stage: str) -> list[Json]:
    """The pods of one stage's gang, by our labels (Volcano copies them from the template)."""
    mine = ownership.labels(owner, stage)
    selector = ",".join(f"{k}={mine[k]}" for k in (ownership.LABEL_JOB, ownership.LABEL_STAGE))
    return k8s.list_pods(owner.namespace, selector)


def of_instance(pods: list[Json], job: Json | None) -> list[Json]:
    """The pods of this Volcano job instance (a replaced gang's ended pods are not its failures).

    A gang the operator replaces (a hang, a bad node) ends its pods with exit 137 under the
    names the next instance's pods take; the pod watch still shows them.
    """
    meta = (job or {}).get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return []  # being replaced: its pods end because the operator ends them
    uid = meta.get("uid")
    if not uid:
        return pods
    return [p for p in pods if _owned_by(p, str(uid))]


def _owned_by(pod: Json, uid: str) -> bool:
    """Whether the pod belongs to the job instance uid (a pod that names no owner is kept)."""
    owners = (pod.get("metadata") or {}).get("ownerReferences") or []
    return not owners or any(o.get("uid") == uid for o in owners)


def gang_failure(
    owner: Owner, pods: list[Json], known: Mapping[str, Sequence[str]] | None = None
) -> failures.Failure | None:
    """Why the gang failed, from its pods and their log tails, if it did.

    `known`: tails read when the pod watch showed the failure (pod uid -> lines; none: its log
    is gone); only the others are read now (Volcano deletes a failed pod, and its log, within
    ~60 ms).
    """
    logs: dict[str, Sequence[str]] = {}
    known = known or {}
    for pod in pods:
        container = failures.failed_container(pod)
        name, uid = pod["metadata"]["name"], pod["metadata"].get("uid") or ""
        if container and len(logs) < MAX_LOGS and name not in logs:
            read = known.get(uid)
            if read is None and failures.stopped_peer(pod):
                read = ()  # killed with its gang: the pod watch read the few that tell (PEER_LOGS)
            logs[name] = read if read is not None else _read(owner, name, container)
    return failures.classify_gang(pods, logs)


def _read(owner: Owner, name: str, container: str) -> list[str]:
    """A failed container's log tail, read now (the pod watch neither read it nor saw it go)."""
    return k8s.pod_log_tail(owner.namespace, name, container, failures.LOG_TAIL_LINES)
