"""Who owns a child: the labels, annotations and controller reference every child carries.

A name finds a child; these prove whose it is (a job is its uid), on every kind the operator
creates and on the pods Volcano creates for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainium_operator.api import naming
from trainium_operator.api.crd import GROUP, KIND, VERSION

Json = dict[str, Any]

MANAGED_BY = "trainium-operator"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_JOB = f"{GROUP}/job-name"
LABEL_STAGE = f"{GROUP}/stage"
LABEL_CACHE_KEY = f"{GROUP}/cache-key"
LABEL_CACHE_NAME = f"{GROUP}/cache-name"
#: "namespace/name" of the owning TrainiumJob, on children that watches map back to their job
#: (LABEL_JOB holds a hash of the name when it is longer than a label value).
ANNOTATION_OWNER = f"{GROUP}/owner"
#: The owning TrainiumJob's uid, on children whose ownerReferences do not name it (pods, PVs):
#: the operator's key for a job (a new object under an old name is another job).
ANNOTATION_OWNER_UID = f"{GROUP}/owner-uid"


@dataclass(frozen=True)
class Owner:
    """The TrainiumJob that owns the children: its name, namespace and uid."""

    name: str
    namespace: str
    uid: str
    #: The training gang's name and the replaced one's (cluster/gangs.py; "": the first, none).
    train_gang: str = ""
    replaced_gang: str = ""
    #: Its creationTimestamp ("": unknown): how long it has waited for a name to be freed.
    created: str = ""

    def reference(self) -> Json:
        """ownerReference so children go away with the job (and kopf/kubectl see the link)."""
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


def labels(owner: Owner, stage: str | None = None) -> dict[str, str]:
    """Labels every child carries, so children are found by selector, never by guessing."""
    job = naming.label_value(owner.name)
    out = {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_JOB: job,
        "app.kubernetes.io/name": "trainiumjob",
        "app.kubernetes.io/instance": job,
    }
    if stage:
        out[LABEL_STAGE] = stage
    return out


def owner_annotations(owner: Owner) -> dict[str, str]:
    """Annotations of children: the owner's namespace/name (a label cannot always hold it) and
    its uid (which object of that name)."""
    out = {ANNOTATION_OWNER: f"{owner.namespace}/{owner.name}"}
    if owner.uid:
        out[ANNOTATION_OWNER_UID] = owner.uid
    return out


def owner_uid(metadata: Mapping[str, Any]) -> str | None:
    """The uid of the TrainiumJob a child belongs to: its annotation, else its controller."""
    uid = (metadata.get("annotations") or {}).get(ANNOTATION_OWNER_UID)
    if uid:
        return str(uid)
    for ref in metadata.get("ownerReferences") or []:
        group = str(ref.get("apiVersion", "")).split("/")[0]
        if ref.get("controller") and ref.get("kind") == KIND and group == GROUP and ref.get("uid"):
            return str(ref["uid"])
    return None


def controller_uid(metadata: Mapping[str, Any]) -> str:
    """The uid of an object's controller ownerReference, of any kind ("": none).

    client-go's `metav1.GetControllerOf`: the one reference with controller true.
    """
    for ref in metadata.get("ownerReferences") or []:
        if ref.get("controller") and ref.get("uid"):
            return str(ref["uid"])
    return ""


def controlled_by(metadata: Mapping[str, Any], uid: str) -> bool:
    """Whether uid controls the object (client-go's `metav1.IsControlledBy`).

    A name finds a child; only this proves it is ours: an old job's child under the same name
    (the garbage collector lagging, or `--cascade=orphan`) is never read, adopted or deleted.
    """
    return bool(uid) and controller_uid(metadata) == uid


def owner_name(metadata: Mapping[str, Any]) -> str:
    """The name of the TrainiumJob a child belongs to, for handlers that see only the child.

    The annotation first, then the controller ownerReference, then the label (children made
    before the annotation existed, whose labels held whole names: longer ones were refused).
    """
    owner = (metadata.get("annotations") or {}).get(ANNOTATION_OWNER)
    if owner:
        return str(owner).partition("/")[2]
    for ref in metadata.get("ownerReferences") or []:
        group = str(ref.get("apiVersion", "")).split("/")[0]
        if ref.get("controller") and ref.get("kind") == KIND and group == GROUP and ref.get("name"):
            return str(ref["name"])
    label = (metadata.get("labels") or {}).get(LABEL_JOB)
    if label:
        return str(label)
    raise ValueError(f"no {ANNOTATION_OWNER} annotation, {KIND} owner or {LABEL_JOB} label")
