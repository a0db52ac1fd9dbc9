"""The job's storage as the cluster shows it: the user's claim, or our static FSx PV and claim.

Reads (through the pass's Reader; FSx names looked up with boto3 when the spec lacks them), and
one write: the leader's sweep deletes our cluster-scoped PV once the job that made it is gone
(no ownerReference can do it: a cluster-scoped object cannot be owned by a namespaced one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainium_operator.api import naming
from trainium_operator.api.spec import TrainiumJobSpec
from trainium_operator.cluster import fsx, k8s, volumes
from trainium_operator.cluster.reads import Kind, Reader, ours
from trainium_operator.domain.lifecycle import Blocker
from trainium_operator.manifests.ownership import ANNOTATION_OWNER, Owner, controller_uid, owner_uid

Json = dict[str, Any]


@dataclass(frozen=True)
class Storage:
    """What the job's volume says: ready, or why not (and our PV, to repair or bind)."""

    ready: bool = False
    blocker: Blocker | None = None
    released: bool = False
    names: fsx.FsxNames | None = None
    volume: Json | None = None


def storage_of(spec: TrainiumJobSpec, owner: Owner, lookup: fsx.FsxLookup, read: Reader) -> Storage:
    """Ready means the claim is Bound; a Pending claim, a terminating or stale PV wait."""
    if spec.storage.claimName:
        return _user_claim(spec.storage.claimName, owner.namespace, read)
    claim, held = ours(read.get(Kind.CLAIM, owner.namespace, naming.claim_name(owner.name)), owner)
    if held is not None:
        return Storage(blocker=_claim_taken(held))
    volume = read.get(Kind.VOLUME, "", naming.volume_name(owner.namespace, owner.name))
    if volume is not None:
        return static_volume(volume, claim)
    return Storage(**_fsx_names(spec, lookup))


def _claim_taken(claim: Json) -> Blocker:
    """Our claim's name is held by a claim this job does not control (an earlier job's)."""
    meta = claim["metadata"]
    boss = controller_uid(meta)
    held = f"controlled by uid {boss}" if boss else "controlled by nothing: delete it"
    msg = (
        f"PersistentVolumeClaim {meta.get('name')!r} exists but is not this job's ({held}; "
        "left by an earlier job of this name); waiting for it to be deleted"
    )
    return Blocker("NameTaken", msg)


def _user_claim(name: str, namespace: str, read: Reader) -> Storage:
    claim = read.get(Kind.CLAIM, namespace, name)
    what = f"PersistentVolumeClaim {name!r} (spec.storage.claimName)"
    if claim is None:
        msg = f"{what} not found in namespace {namespace!r}; waiting for it to be created"
        return Storage(blocker=Blocker("ClaimNotFound", msg))
    phase = (claim.get("status") or {}).get("phase") or "Pending"
    if phase == "Bound":
        return Storage(ready=True)
    if phase == "Lost":
        msg = f"{what} is Lost: its PersistentVolume is gone; recreate the claim"
        return Storage(blocker=Blocker("ClaimLost", msg))
    msg = f"{what} is {phase}, not yet bound to a volume; waiting for it to bind"
    return Storage(blocker=Blocker("ClaimPending", msg))


def static_volume(volume: Json, claim: Json | None) -> Storage:
    """Our FSx PV exists: wait while it terminates, repair it when Released, else bind."""
    name = volume["metadata"]["name"]
    if volume["metadata"].get("deletionTimestamp"):
        msg = f"PersistentVolume {name!r} of an earlier job is being deleted; waiting to recreate"
        return Storage(blocker=Blocker("VolumeTerminating", msg, warn=False), volume=volume)
    ref_uid = ((volume.get("spec") or {}).get("claimRef") or {}).get("uid")
    claim_uid = ((claim or {}).get("metadata") or {}).get("uid")
    if ref_uid and ref_uid != claim_uid:  # bound to a claim that is gone, or another claim
        return Storage(released=True, volume=volume)
    if claim is None:
        return Storage(volume=volume)  # CREATE_STORAGE: the PV exists (409), the claim follows
    phase = (claim.get("status") or {}).get("phase") or "Pending"
    if phase == "Bound":
        return Storage(ready=True, volume=volume)
    msg = f"claim {claim['metadata']['name']!r} is {phase}; waiting for it to bind to {name!r}"
    return Storage(blocker=Blocker("ClaimPending", msg, warn=False), volume=volume)


def _fsx_names(spec: TrainiumJobSpec, lookup: fsx.FsxLookup) -> dict[str, Any]:
    """DNS and mount names for a new static PV: given in the spec, or looked up with boto3."""
    fs = spec.storage.fsx
    assert fs is not None
    if fs.dnsName and fs.mountName:
        return {"names": fsx.FsxNames(fs.dnsName, fs.mountName)}
    try:
        found = lookup(fs.fileSystemId)
    except fsx.FsxLookupError as exc:
        return {"blocker": Blocker(exc.reason, str(exc))}
    return {"names": fsx.FsxNames(fs.dnsName or found.dns_name, fs.mountName or found.mount_name)}


def orphaned(volume: Json, job: Json | None) -> bool:
    """Whether our PV outlived its job: the job is gone, being deleted, or another object now.

    A PV from before the owner-uid annotation is judged by its job's name alone.
    """
    meta = volume["metadata"]
    if meta.get("deletionTimestamp"):
        return False  # already going (held by pv-protection until its claim is gone)
    if job is None:
        return True
    job_meta, uid = job.get("metadata") or {}, owner_uid(meta)
    if job_meta.get("deletionTimestamp"):
        return True
    return uid is not None and job_meta.get("uid") != uid


def sweep_volume(name: str) -> bool:
    """Delete our FSx PV `name` if its job is gone; whether it was deleted.

    Both reads are GETs (a watch may lag a re-created job), and the delete carries the PV's
    uid: a PV a new job of the name made meanwhile is not touched. Writes go through the fence.
    """
    volume = volumes.get_volume(name)
    if volume is None:
        return False
    meta = volume["metadata"]
    owner = (meta.get("annotations") or {}).get(ANNOTATION_OWNER) or ""
    namespace, _sep, job_name = owner.partition("/")
    if not namespace or not job_name:
        return False  # not a job's PV: never ours to delete
    if not orphaned(volume, k8s.get_trainiumjob(namespace, job_name)):
        return False
    volumes.delete_volume(name, uid=meta.get("uid"))
    return True
