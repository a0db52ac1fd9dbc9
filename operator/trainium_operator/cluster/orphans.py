"""In the job's pass: remove our gang pods whose Node was deleted, as PodGC would 40 s later.

The pod index (watches.gang_pods) says which of the job's pods are bound where; the node index
(watches.node_names) which nodes exist. A node missing from the index is confirmed with a GET
first, as PodGC does (checkIfNodeExists): a brand-new node's watch event may lag a pod bound to
it. A pod is removed only when its gang still runs or stops (domain/orphans.py: fate). Writes go
through k8s.request, so a replica outside its leadership term writes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from trainium_operator.cluster import k8s, reads
from trainium_operator.cluster.reads import Kind, Reader
from trainium_operator.domain import events, orphans
from trainium_operator.domain.orphans import Orphan
from trainium_operator.domain.status import now_iso
from trainium_operator.manifests.ownership import Owner

Json = dict[str, Any]
Emit = Callable[[Json, str, str, str, str], None]
#: A key -> its values (a kopf index: the values of one key are a Store).
Index = Mapping[Any, Iterable[Any]]
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
log = logging.getLogger(__name__)


def reap(
    body: Json, indices: tuple[Index, Index] | None, emit: Emit, read: Reader,
    gone: list[Orphan] | None = None,
) -> int:  # fmt: skip
    """Remove the job's pods bound to a deleted Node whose gang still runs or stops; how many
    went (0 outside the operator).

    `indices`: (node names, our bound pods), kopf's indices (watches.py); None: no watches.
    `gone`: the removed pods are appended there.
    """
    if indices is None:
        return 0
    nodes, pods = indices
    meta = body["metadata"]
    owner = Owner(meta["name"], meta["namespace"], str(meta.get("uid") or ""))
    # One lookup per pod, and an Orphan only for a pod whose node the index lacks: a pass of a
    # 1,024-pod gang parsed every entry (80% of its CPU, bench/fleet_scale.py), now almost none.
    absent = [
        e for e in reads.lookup(pods, ("job", owner.uid)) if not _exists(nodes, e.get("node"))
    ]
    bound = [o for e in absent if (o := orphans.from_index(e))]
    removed = 0
    for pod in orphans.orphaned(bound, lambda node: _exists(nodes, node)):
        outcome = orphans.fate(pod, _gang(pod, owner, read))
        if outcome is None or _node_exists(pod.node) or not _remove(pod):
            continue
        log.info("node %s is gone: pod %s/%s removed", pod.node, pod.namespace, pod.name)
        action = events.RESTART if outcome == orphans.RESTARTS else "Stop"
        emit(body, "Warning", orphans.EVENT_REASON, orphans.event_message(pod, outcome), action)
        removed += 1
        if gone is not None:  # the pods removed (a spare swap names the node: spares.py)
            gone.append(pod)
    return removed


def _gang(pod: Orphan, owner: Owner, read: Reader) -> Json | None:
    """The pod's Volcano job, if this job controls it (None: gone, or not this job's)."""
    name = orphans.gang_of(pod)
    return reads.ours(read.get(Kind.VCJOB, pod.namespace, name), owner)[0] if name else None


def _exists(nodes: Index, node: Any) -> bool:
    """Whether the node index has `node` (kopf drops a key with its last object): no copy."""
    return isinstance(node, str) and bool(nodes.get(node))


def _node_exists(name: str) -> bool:
    """Whether the API server has the Node (the index may lag a node just added)."""
    return k8s.missing_is_none(k8s.core().read_node, name) is not None


def _remove(pod: Orphan) -> bool:
    """Mark the pod Failed with PodGC's condition, then force-delete it; False: not ours now.

    Once our patch failed it, the pod is removed by us even if the delete then finds it gone or
    its name taken: Volcano's restart of the gang deletes its pods within milliseconds of one
    failing (RestartJob), often before our delete (seen on the tier)."""
    api, patch = k8s.core(), orphans.status_patch(pod, now_iso())
    failed = False
    try:
        if patch is not None:
            k8s.request(
                api.patch_namespaced_pod_status, pod.name, pod.namespace, patch,
                _content_type=STRATEGIC_MERGE, guarded=True,
            )  # fmt: skip
            failed = True
        k8s.request(api.delete_namespaced_pod, pod.name, pod.namespace, body=_options(pod),
                    guarded=True)  # fmt: skip
    except ApiException as exc:
        if exc.status in (404, 409, 422):  # gone already, or another pod holds the name now
            return failed
        raise
    return True


def _options(pod: Orphan) -> client.V1DeleteOptions:
    """A force-delete of this pod only (its uid): never a pod that took its name since."""
    return client.V1DeleteOptions(
        grace_period_seconds=0, preconditions=client.V1Preconditions(uid=pod.uid)
    )
