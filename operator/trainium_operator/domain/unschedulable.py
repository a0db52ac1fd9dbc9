"""Pure: why a gang cannot be placed, in the scheduler's words and in a few of ours.

kube-scheduler and Volcano say it in one sentence per pod (PodScheduled=False/Unschedulable);
this reads which resource is short, so a blocker can name it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trainium_operator.domain import failures

Json = dict[str, Any]


def unschedulable(pods: Sequence[Json]) -> failures.Failure | None:
    """A gang pod the scheduler cannot place, and which resource is short (None: all placed)."""
    stuck = [(pod, msg) for pod in pods if (msg := _unschedulable_message(pod)) is not None]
    if not stuck:
        return None
    # Volcano marks the gang's other pods with a gang summary; a pod with a node reason says more.
    pod, msg = next(((p, m) for p, m in stuck if short_resource(m)), stuck[0])
    text, short = msg or "no message from the scheduler", short_resource(msg)
    said = f", short of {short}" if short else ""
    return failures.make_failure(
        "Unschedulable",
        f"pod {failures.pod_name(pod)} cannot be scheduled{said}: {text}",
        (),
        short,
    )


def short_resource(message: str) -> str | None:
    """What the scheduler's message says is short: the Insufficient resources, else the top reason.

    kube-scheduler: "0/3 nodes are available: 1 node(s) had untolerated taint {k: v}, 2
    Insufficient aws.amazon.com/neuron. preemption: ..."; Volcano (pkg/scheduler/api/
    unschedule_info.go): "0/4 nodes are unavailable: 4 Insufficient aws.amazon.com/neuron."
    """
    head = message.split(". preemption:")[0].strip().rstrip(".")
    nodes = _NODES.match(head)
    items = [(int(n), t.strip()) for n, t in _ITEM.findall(nodes.group("items") if nodes else "")]
    if not items:
        if gang := _GANG.search(head):
            return (
                f"free nodes for the whole gang ({gang['stuck']} of {gang['size']} pods fit none)"
            )
        return _whole(head)
    short = [
        m.group(1) for _, t in sorted(items, key=lambda i: -i[0]) if (m := _INSUFFICIENT.match(t))
    ]
    if short:
        return ", ".join(dict.fromkeys(short))
    return _label(max(items, key=lambda i: i[0])[1])


_NODES = re.compile(
    r"^(?:\d+/\d+ nodes are (?:un)?available|all nodes are unavailable)\s*:\s*(?P<items>.*)$"
)
#: "2 Insufficient cpu", "1 node(s) had untolerated taint {aws.amazon.com/neuron: true}".
_ITEM = re.compile(r"(\d+)\s+((?:[^,{]|\{[^}]*\})+)")
_INSUFFICIENT = re.compile(r"^Insufficient (\S+)")
_LABELS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"taint (\{[^}]*\})"), r"toleration for taint \1"),
    (
        re.compile(r"didn't match (?:Pod's )?node (?:affinity|selector)"),
        "node matching the pod's node affinity/selector",
    ),
    (re.compile(r"resource fit failed"), "node resources (Volcano: resource fit failed)"),
    (re.compile(r"volume node affinity conflict"), "node in the volume's zone"),
    (re.compile(r"Too many pods|pod number exceeded"), "pods"),
    (re.compile(r"were unschedulable"), "schedulable (uncordoned) nodes"),
    (re.compile(r"cannot allocate all claims"), "devices for the pod's ResourceClaim (DRA)"),
)
#: Volcano's gang summary (every pod of a gang that does not fit at once carries it):
#: "pod group is not ready, 5 Pending, 5 minAvailable; Pending: 1 Unschedulable, 4 Schedulable".
_GANG = re.compile(r"(?P<size>\d+) minAvailable; Pending: (?P<stuck>\d+) Unschedulable")
_WHOLE: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"unbound immediate PersistentVolumeClaims"), "bound PersistentVolumeClaim"),
    (re.compile(r"device class (\S+?) does not exist"), r"DeviceClass \1 (a DRA driver)"),
    (re.compile(r"no nodes available"), "nodes"),
)


def _whole(head: str) -> str | None:
    """A short name for a reason about the whole cluster, not per node (None: none known)."""
    return next((m.expand(label) for rx, label in _WHOLE if (m := rx.search(head))), None)


def _label(text: str) -> str:
    """A short name for one scheduler reason; the reason itself when none is known."""
    for rx, label in _LABELS:
        m = rx.search(text)
        if m:
            return m.expand(label)
    return _whole(text) or text


_STUCK = ("PodScheduled", "False", "Unschedulable")


def _unschedulable_message(pod: Json) -> str | None:
    """The PodScheduled=False/Unschedulable message of a Pending pod; None if it is not stuck."""
    status = pod.get("status") or {}
    if status.get("phase", "Pending") != "Pending":
        return None
    for cond in status.get("conditions") or ():
        if (cond.get("type"), cond.get("status"), cond.get("reason")) == _STUCK:
            return str(cond.get("message") or "")
    return None


# ---- DRA: a pod's ResourceClaim that nothing allocates ------------------------------------------

#: kube-scheduler's DynamicResources plugin, which Volcano's predicates plugin runs when its
#: predicate.DynamicResourceAllocationEnable argument is on (pkg/scheduler/framework/plugins/
#: dynamicresources): what it says of a claim it cannot allocate, in a PodScheduled message.
NO_CLASS = re.compile(r"device class (?P<cls>\S+?) does not exist")
CANNOT_ALLOCATE = "cannot allocate all claims"
_CLAIM_SAID = (
    NO_CLASS,
    re.compile(CANNOT_ALLOCATE),
    re.compile(r"resourceclaim not available on the node"),
    re.compile(r"resourceclaim in use"),
    re.compile(r"ResourceClaim not created yet"),  # resourceclaim.Name: nothing made it yet
    re.compile(r"resourceclaim \S+ is being deleted"),
)
#: Where Volcano's DRA switch is (its scheduler conf): off by default, and then it binds a pod
#: without allocating its claim, which the kubelet then refuses to prepare.
VOLCANO_DRA = (
    "Volcano's scheduler allocates claims only with DRA on: set predicate."
    "DynamicResourceAllocationEnable: true on the predicates plugin in volcano-scheduler.conf"
)


@dataclass(frozen=True)
class ClaimStuck:
    """A gang pod whose ResourceClaim is not allocated, and who says so in what words."""

    pod: str
    #: The pod's ResourceClaim ("" before the claim controller made one from the template).
    claim: str
    said: str
    #: The node Volcano bound the pod to anyway (its DRA off: the kubelet's words), else "".
    node: str = ""


def unallocated_claim(pods: Sequence[Json]) -> ClaimStuck | None:
    """The first Pending pod the scheduler cannot place because of its ResourceClaim."""
    for pod in pods:
        msg = _unschedulable_message(pod)
        if msg and any(rx.search(msg) for rx in _CLAIM_SAID):
            return ClaimStuck(failures.pod_name(pod), pod_claim(pod), " ".join(msg.split()))
    return None


def pod_claim(pod: Json) -> str:
    """The name of the ResourceClaim generated for the pod ("" while there is none)."""
    for status in (pod.get("status") or {}).get("resourceClaimStatuses") or ():
        if status.get("resourceClaimName"):
            return str(status["resourceClaimName"])
    return ""


def claim_message(stuck: ClaimStuck, device_class: str, template: str) -> str:
    """What a person reads on the job: which claim, why, and what to check."""
    claim = f"ResourceClaim {stuck.claim}" if stuck.claim else f"the ResourceClaim from {template}"
    head = f"{claim} of pod {stuck.pod} cannot be allocated"
    if stuck.node:
        return f"{head}: Volcano bound it to {stuck.node} unallocated (kubelet: {stuck.said}); " + (
            VOLCANO_DRA
        )
    said = f"(scheduler: {stuck.said})"
    if m := NO_CLASS.search(stuck.said):
        return (
            f"{head}: DeviceClass {m['cls']} does not exist {said}; install the Neuron DRA driver, "
            "which creates it and publishes each node's Neuron devices as ResourceSlices"
        )
    if "not created yet" in stuck.said:
        return (
            f"{head}: no ResourceClaim was made from ResourceClaimTemplate {template} {said}; "
            "is kube-controller-manager's resource-claim controller running (resource.k8s.io/v1)?"
        )
    return (
        f"{head} on any node {said}; check that the Neuron DRA driver runs on the nodes and "
        f"publishes their devices for DeviceClass {device_class} (kubectl get resourceslices), "
        "and that no other claim holds them"
    )


#: Volcano's enqueue refusing a PodGroup (an Event on it, reason Unschedulable; overcommit
#: plugin): "resource in cluster is overused: overused aws.amazon.com/neuron, overused ...".
_OVERUSED = re.compile(r"overused (?P<name>[\w./-]+)")


def not_enqueued(stage: str, messages: Sequence[str]) -> failures.Failure | None:
    """A gang Volcano never enqueued (no pods made: its PodGroup's minResources, the gang's
    devices, do not fit the cluster or its queue), from its PodGroup's Events (None: none)."""
    said = [m for m in messages if "overused" in m or "queue resource quota insufficient" in m]
    if not said:
        return None
    text = said[-1]
    names = list(dict.fromkeys(m["name"] for m in _OVERUSED.finditer(text)))
    short = ", ".join(names) or None
    return failures.make_failure(
        "Unschedulable",
        f"the {stage} gang was never admitted by Volcano (none of its pods made): the cluster "
        f"or its queue cannot hold the whole gang ({text})",
        (),
        short,
    )
