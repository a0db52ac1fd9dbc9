"""Pure: which gang node holds a DRA device that is tainted NoSchedule/NoExecute (health.tainted).

A pod's claim (generated from the job's ResourceClaimTemplate, controlled by the pod) names the
devices it was allocated; a ResourceSlice names each device's taints. A gang pod whose claim
holds a tainted device is on an unhealthy node, as with a NeuronHealth error. The watches keep
only what is read here (slim_claim, slim_slice).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from trainium_operator.domain import health

Json = Mapping[str, Any]


def claim_pod(claim: Json) -> str | None:
    """The name of the pod a claim was generated for (its controller ownerReference)."""
    for ref in (claim.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("kind") == "Pod" and ref.get("controller") and ref.get("name"):
            return str(ref["name"])
    return None


def slim_claim(claim: Json) -> dict[str, Any]:
    """What verdicts() reads of a claim: its namespace, name, pod and allocated devices."""
    meta = claim.get("metadata") or {}
    results = [
        {"driver": d.driver, "pool": d.pool, "device": d.device} for d in health.allocated(claim)
    ]
    pod = claim_pod(claim)
    refs = [{"kind": "Pod", "controller": True, "name": pod}] if pod else []
    kept = {k: meta.get(k) for k in ("namespace", "name", "resourceVersion", "annotations")}
    return {
        "metadata": {**kept, "ownerReferences": refs},
        "status": {"allocation": {"devices": {"results": results}}},
    }


def slim_slice(piece: Json) -> dict[str, Any]:
    """What tainted() reads of a ResourceSlice: driver, pool, node and each device's taints."""
    spec, meta = piece.get("spec") or {}, piece.get("metadata") or {}
    devices = [
        {"name": d.get("name"), "taints": list(d.get("taints") or ())}
        for d in spec.get("devices") or ()
        if isinstance(d, Mapping)
    ]
    kept = {k: spec.get(k) for k in ("driver", "pool", "nodeName")}
    return {
        "metadata": {k: meta.get(k) for k in ("name", "resourceVersion")},
        "spec": {**kept, "devices": devices},
    }


def hard(piece: Json) -> bool:
    """Whether any device of the slice carries a NoSchedule/NoExecute taint."""
    for dev in (piece.get("spec") or {}).get("devices") or ():
        if any(t.get("effect") in health.HARD_EFFECTS for t in dev.get("taints") or ()):
            return True
    return False


def verdicts(
    pods: Sequence[health.GangPod], claims: Iterable[Json], slices: Iterable[Json]
) -> dict[str, str]:
    """node -> why, for each gang pod whose claim holds a tainted device (pods of one namespace,
    claims of that namespace)."""
    tainted_slices = [s for s in slices if hard(s)]
    if not tainted_slices or not pods:
        return {}
    by_pod: dict[str, list[health.Device]] = {}
    for claim in claims:
        holder = claim_pod(claim)
        if holder is not None:
            by_pod.setdefault(holder, []).extend(health.allocated(claim))
    out: dict[str, str] = {}
    for pod in pods:
        said = health.tainted(by_pod.get(pod.name, ()), tainted_slices)
        if said is not None and pod.node not in out:
            out[pod.node] = f"{said} (held by pod {pod.name}'s claim)"
    return out
