"""What a real cluster does besides serving the API: storage binding and admission refusals.

kmock has no controllers and no admission chain, so every bug that hid behind "the claim exists"
or "the create succeeded" stayed hidden. These run inside the emulator (under its lock, after
each change), with Kubernetes' own semantics:

- StorageObjectInUseProtection admission puts `kubernetes.io/pv-protection` and
  `kubernetes.io/pvc-protection` finalizers on new PVs and claims;
- the PV controller binds a claim to the PV it names (claimRef without uid, or its own uid), or
  provisions one for a StorageClass that exists; a PV whose bound claim is gone is `Released`
  and keeps the stale claimRef uid (with `Retain` nothing else happens: the new claim of the same
  name stays Pending, "volume already bound to a different claim");
- the protection controllers drop those finalizers once nothing uses the object (no pods here;
  a PV is in use while Bound);
- `Refusal`s stand in for validating webhooks (Volcano's), quota and pod validation.
"""

from __future__ import annotations

import copy
import fnmatch
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import kmock

if TYPE_CHECKING:
    from emulator import K8sEmulator

Obj = dict[str, Any]
PV, PVC = kmock.resource("v1/persistentvolumes"), kmock.resource("v1/persistentvolumeclaims")
STORAGE_CLASSES = kmock.resource("storage.k8s.io/v1/storageclasses")
PV_PROTECTION, PVC_PROTECTION = "kubernetes.io/pv-protection", "kubernetes.io/pvc-protection"


@dataclass
class Refusal:
    """Refuse creates of one resource, as a webhook or quota would: a code and the message."""

    resource: str
    code: int
    message: str
    reason: str = "BadRequest"
    name: str = "*"
    when: Callable[[Obj], bool] = field(default=lambda obj: True)
    #: How many creates it refused (tests assert that the operator stopped retrying).
    count: int = 0

    def check(self, resource: kmock.resource, obj: Obj) -> None:
        if resource != kmock.resource(self.resource):
            return
        if fnmatch.fnmatch(obj.get("metadata", {}).get("name", ""), self.name) and self.when(obj):
            self.count += 1
            raise kmock.KubernetesError(
                status=self.code, reason=self.reason, message=self.message, details={}
            )


def admit(resource: kmock.resource, obj: Obj, refusals: list[Refusal]) -> None:
    """The admission chain of a create: refusals first, then the protection finalizers."""
    for refusal in list(refusals):
        refusal.check(resource, obj)
    finalizer = {PV: PV_PROTECTION, PVC: PVC_PROTECTION}.get(resource)
    if finalizer:
        md = obj.setdefault("metadata", {})
        md["finalizers"] = [*md.get("finalizers", []), finalizer]


async def sync_storage(k8s: K8sEmulator) -> bool:
    """One round of the PV/PVC controllers; True when it changed something."""
    pvs, claims = _live(k8s, PV), _live(k8s, PVC)
    for key, claim in claims.items():
        if await _sync_claim(k8s, key, claim, pvs):
            return True
    for key, pv in pvs.items():
        if await _sync_volume(k8s, key, pv, claims):
            return True
    return False


def _live(k8s: K8sEmulator, res: kmock.resource) -> dict[Any, Obj]:
    return {
        key: copy.deepcopy(o.raw)
        for key, o in k8s.objects.items()
        if key[0] == res and not o.deleted
    }


async def _sync_claim(k8s: K8sEmulator, key: Any, claim: Obj, pvs: dict[Any, Obj]) -> bool:
    md, spec = claim["metadata"], claim.get("spec") or {}
    if md.get("deletionTimestamp"):
        return await _unprotect(k8s, key, claim, PVC_PROTECTION)
    if (claim.get("status") or {}).get("phase") == "Bound":
        return False
    volume = spec.get("volumeName")
    if not volume and spec.get("storageClassName") and _class_exists(k8s, spec["storageClassName"]):
        volume = f"pvc-{md['uid']}"
        await k8s.store_new(PV, None, _provisioned(claim, volume))
        claim["spec"]["volumeName"] = volume  # the provisioner pre-binds; the binder follows
        return await _put(k8s, key, claim)
    pv = pvs.get((PV, None, volume)) if volume else None
    if pv is None or pv["metadata"].get("deletionTimestamp"):
        return _pending(claim) and await _put(k8s, key, claim)
    ref = pv["spec"].get("claimRef") or {}
    mine = ref.get("namespace") == md["namespace"] and ref.get("name") == md["name"]
    if ref and not (mine and ref.get("uid") in (None, md["uid"])):
        return _pending(claim) and await _put(k8s, key, claim)  # bound to a different claim
    pv["spec"]["claimRef"] = {
        "kind": "PersistentVolumeClaim", "namespace": md["namespace"], "name": md["name"],
        "uid": md["uid"],
    }  # fmt: skip
    pv["status"] = {"phase": "Bound"}
    claim["spec"]["volumeName"] = volume
    claim["status"] = {
        "phase": "Bound",
        "accessModes": spec.get("accessModes", []),
        "capacity": pv["spec"].get("capacity", {}),
    }
    await _put(k8s, (PV, None, volume), pv)
    return await _put(k8s, key, claim)


def _pending(claim: Obj) -> bool:
    """Mark a claim Pending; True when that is a change."""
    if (claim.get("status") or {}).get("phase") == "Pending":
        return False
    claim["status"] = {"phase": "Pending"}
    return True


async def _sync_volume(k8s: K8sEmulator, key: Any, pv: Obj, claims: dict[Any, Obj]) -> bool:
    ref = pv["spec"].get("claimRef") or {}
    phase = (pv.get("status") or {}).get("phase")
    if ref.get("uid"):
        claim = claims.get((PVC, ref.get("namespace"), ref.get("name")))
        gone = claim is None or claim["metadata"]["uid"] != ref["uid"]
        if gone and phase != "Released":
            pv["status"] = {"phase": "Released"}
            return await _put(k8s, key, pv)
    elif phase != "Available" and not pv["metadata"].get("deletionTimestamp"):
        pv["status"] = {"phase": "Available"}
        return await _put(k8s, key, pv)
    if pv["metadata"].get("deletionTimestamp") and phase != "Bound":
        return await _unprotect(k8s, key, pv, PV_PROTECTION)
    return False


async def _unprotect(k8s: K8sEmulator, key: Any, obj: Obj, finalizer: str) -> bool:
    finalizers = obj["metadata"].get("finalizers") or []
    if finalizer not in finalizers:
        return False
    new = copy.deepcopy(obj)
    new["metadata"]["finalizers"] = [f for f in finalizers if f != finalizer]
    await k8s.update_object(key, obj, new)
    return True


async def _put(k8s: K8sEmulator, key: Any, obj: Obj) -> bool:
    await k8s.store_changed(key, obj)
    return True


def _class_exists(k8s: K8sEmulator, name: str) -> bool:
    key = (STORAGE_CLASSES, None, name)
    return key in k8s.objects and not k8s.objects[key].deleted


def _provisioned(claim: Obj, name: str) -> Obj:
    """The PV a dynamic provisioner creates for a claim (pre-bound to it)."""
    md, spec = claim["metadata"], claim.get("spec") or {}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": (spec.get("resources") or {}).get("requests", {}),
            "accessModes": spec.get("accessModes", []),
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": spec.get("storageClassName"),
            "claimRef": {"namespace": md["namespace"], "name": md["name"], "uid": md["uid"]},
        },
    }
