"""Pure: a node the training gang runs on that says it is failing, before the job crashes on it.

Three outside signals are read, each by the name its owner gives it:

- Neuron's node problem detector (aws-neuron/neuron-helm-charts, its kernel-monitor rules) keeps
  the node condition `NeuronHealth`: False with reason `NeuronHasNoError` while the devices are
  fine; a permanent rule turns it True with a `NeuronHasError_<ERROR>` reason
  (`SRAM_UNCORRECTABLE_ERROR`, `NC_UNCORRECTABLE_ERROR`, `HBM_UNCORRECTABLE_ERROR`,
  `DMA_ERROR`, `HANG_ON_COLLECTIVES`).
- SageMaker HyperPod's health agent labels nodes `sagemaker.amazonaws.com/node-health-status`:
  `Schedulable`, or `Unschedulable`, `UnschedulablePendingReplacement`,
  `UnschedulablePendingReboot`.
- On DRA nodes, a `NoSchedule`/`NoExecute` taint on a device the gang's claims were allocated
  (ResourceSlice devices' `taints`, as Neuron's "isolate faulty devices" guide sets them).

The operator's own verdict (a node-fault failure, nodes.py) is the fourth. A node found here is
handled like that verdict: the gang is stopped (the trainer checkpoints on the SIGTERM), the
node is kept out of the next gangs, and the restart spends no runPolicy.maxRetries.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from trainium_operator.domain.failures import Failure, make_failure

Json = Mapping[str, Any]
#: Neuron node problem detector's node condition, and its reason while nothing is wrong.
NEURON_CONDITION = "NeuronHealth"
NEURON_OK_REASON = "NeuronHasNoError"
#: SageMaker HyperPod's node label; every value that starts with UNSCHEDULABLE means out.
HYPERPOD_LABEL = "sagemaker.amazonaws.com/node-health-status"
UNSCHEDULABLE = "Unschedulable"
#: Device taint effects that mean "do not use this device" (the node taints' names).
HARD_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
#: The failure class (failures.POLICIES) of a gang stopped for a node's health.
REASON = "NodeUnhealthy"


@dataclass(frozen=True)
class Device:
    """One device a claim was allocated, as status.allocation.devices.results names it."""

    driver: str
    pool: str
    device: str


def node_verdict(node: Json) -> str | None:
    """Why the node is unhealthy, in one line (None: no signal says so)."""
    meta, status = node.get("metadata") or {}, node.get("status") or {}
    for cond in status.get("conditions") or ():
        if cond.get("type") == NEURON_CONDITION and cond.get("status") == "True":
            reason = cond.get("reason") or "NeuronHasError"
            said = f": {cond['message']}" if cond.get("message") else ""
            return f"node condition {NEURON_CONDITION} is True ({reason}){said}"
    value = (meta.get("labels") or {}).get(HYPERPOD_LABEL)
    if isinstance(value, str) and value.startswith(UNSCHEDULABLE):
        return f"node label {HYPERPOD_LABEL}={value}"
    return None


def allocated(claim: Json) -> tuple[Device, ...]:
    """The devices a ResourceClaim was allocated (none while it is not allocated)."""
    devices = ((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}
    out = []
    for result in devices.get("results") or ():
        parts = [result.get(k) for k in ("driver", "pool", "device")]
        if all(isinstance(p, str) and p for p in parts):
            out.append(Device(*parts))
    return tuple(out)


def tainted(devices: Iterable[Device], slices: Iterable[Json]) -> str | None:
    """The first allocated device a ResourceSlice taints NoSchedule/NoExecute, in one line."""
    wanted = set(devices)
    for piece in slices:
        spec = piece.get("spec") or {}
        driver, pool = spec.get("driver"), (spec.get("pool") or {}).get("name")
        for dev in spec.get("devices") or ():
            if Device(str(driver), str(pool), str(dev.get("name"))) not in wanted:
                continue
            hard = [t for t in dev.get("taints") or () if t.get("effect") in HARD_EFFECTS]
            if hard:
                t = hard[0]
                what = f"{t.get('key')}={t.get('value') or ''}:{t.get('effect')}"
                return f"device {driver}/{pool}/{dev.get('name')} is tainted {what}"
    return None


@dataclass(frozen=True)
class GangPod:
    """A running pod of the live training gang and the node it is bound to."""

    name: str
    node: str


def unhealthy(
    pods: Sequence[GangPod], verdicts: Mapping[str, str], excluded: Sequence[str]
) -> Failure | None:
    """The first gang node with a verdict that is not kept out yet, as a node-fault failure."""
    for pod in sorted(pods, key=lambda p: p.name):
        said = verdicts.get(pod.node)
        if said is None or pod.node in excluded:
            continue
        message = (
            f"pod {pod.name} runs on node {pod.node}, which is unhealthy: {said}; the gang "
            "checkpoints on SIGTERM and is recreated without the node"
        )
        return replace(make_failure(REASON, message), node=pod.node)
    return None
