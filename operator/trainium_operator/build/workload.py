"""Pure Kueue manifests: a stage's Workload, and what its admission adds to the gang's pods.

A TrainiumJob opts in the Kueue way, with the `kueue.x-k8s.io/queue-name` label; its Volcano
jobs cannot be put under Kueue (Volcano has no `suspend`), so the operator owns one Workload per
stage (precompile, train) and creates the stage's gang only once Kueue admitted it. The pod set
is read from the built Volcano job, so the quota asked is what the gang's pods request.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainium_operator.api import naming
from trainium_operator.api.spec import TrainiumJobSpec
from trainium_operator.build.builders import Owner, labels, owner_annotations

Json = dict[str, Any]

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
API_VERSION = f"{GROUP}/{VERSION}"
#: The TrainiumJob's opt-in labels (Kueue's own names); never copied to our pods, or Kueue's
#: pod integration would make Workloads of its own.
LABEL_QUEUE = "kueue.x-k8s.io/queue-name"
LABEL_PRIORITY = "kueue.x-k8s.io/priority-class"
#: Pod-template fields a Workload keeps: what Kueue reads to fit and place the pods.
_POD_FIELDS = ("nodeSelector", "tolerations", "affinity", "priorityClassName", "runtimeClassName")
_CONTAINER_FIELDS = ("name", "image", "resources")


@dataclass(frozen=True)
class Kueue:
    """A job's opt-in: its LocalQueue and WorkloadPriorityClass ("": none)."""

    queue: str
    priority_class: str = ""


def opt_in(job_labels: Mapping[str, Any] | None) -> Kueue | None:
    """The job's Kueue opt-in from its labels; None: not a Kueue workload (nothing changes)."""
    queue = str((job_labels or {}).get(LABEL_QUEUE) or "")
    if not queue:
        return None
    return Kueue(queue, str((job_labels or {}).get(LABEL_PRIORITY) or ""))


def workload_name(owner: Owner, spec: TrainiumJobSpec, stage: str) -> str:
    """One Workload per stage (and per size of an elastic job); deterministic, never reused
    across stages."""
    suffix = naming.STAGE_SUFFIX[stage]
    if spec.precompile_size is not None:
        suffix = f"{suffix}-n{spec.precompile_size}"
    return naming.fit(f"trainiumjob-{owner.name}", suffix, naming.DNS_LABEL_MAX)


def pod_set(vcjob: Mapping[str, Any], name: str) -> Json:
    """The gang as one pod set: count = its pods, the template its pods share (requests filled
    from limits where only limits are given, as the API server defaults them)."""
    tasks = vcjob["spec"]["tasks"]
    count = sum(int(t.get("replicas") or 1) for t in tasks)
    return {"name": name, "count": count, "template": _template(tasks[0]["template"])}


def _template(pod: Mapping[str, Any]) -> Json:
    spec = pod.get("spec") or {}
    out: Json = {k: copy.deepcopy(spec[k]) for k in _POD_FIELDS if spec.get(k)}
    out["containers"] = [_container(c) for c in spec.get("containers") or ()]
    if spec.get("initContainers"):
        out["initContainers"] = [_container(c) for c in spec["initContainers"]]
    return {"spec": out}


def _container(container: Mapping[str, Any]) -> Json:
    out: Json = {k: copy.deepcopy(container[k]) for k in _CONTAINER_FIELDS if k in container}
    res = out.setdefault("resources", {})
    limits = res.get("limits") or {}
    requests = {**limits, **(res.get("requests") or {})}
    res.clear()
    if requests:
        res["requests"] = requests
    if limits:
        res["limits"] = dict(limits)
    return out


def build_workload(
    spec: TrainiumJobSpec,
    owner: Owner,
    stage: str,
    kueue: Kueue,
    vcjob: Mapping[str, Any],
    priority: int | None = None,
) -> Json:
    """The stage's Workload, controlled by the TrainiumJob; `priority`: the named
    WorkloadPriorityClass's value (Kueue's schema wants both or neither)."""
    body: Json = {
        "apiVersion": API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": workload_name(owner, spec, stage),
            "namespace": owner.namespace,
            "labels": labels(owner, stage),
            "annotations": owner_annotations(owner),
            "ownerReferences": [owner.reference()],
        },
        "spec": {
            "queueName": kueue.queue,
            "podSets": [pod_set(vcjob, naming.STAGE_SUFFIX[stage])],
        },
    }
    if kueue.priority_class and priority is not None:
        body["spec"]["priorityClassRef"] = {
            "group": GROUP,
            "kind": "WorkloadPriorityClass",
            "name": kueue.priority_class,
        }
        body["spec"]["priority"] = priority
    return body


def admitted_flavors(workload: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The ResourceFlavors the Workload's admission assigned (sorted, each once)."""
    admission = ((workload or {}).get("status") or {}).get("admission") or {}
    names: set[str] = set()
    for assignment in admission.get("podSetAssignments") or ():
        names.update(str(f) for f in (assignment.get("flavors") or {}).values())
    return tuple(sorted(names))


def with_flavors(vcjob: Json, flavors: Sequence[Mapping[str, Any]]) -> Json:
    """The Volcano job with the admitted flavors' nodeLabels and tolerations on every pod, as
    Kueue does to the jobs it admits (its labels win over the job's own nodeSelector)."""
    out = copy.deepcopy(vcjob)
    node_labels: Json = {}
    tolerations: list[Json] = []
    for flavor in flavors:
        fspec = flavor.get("spec") or {}
        node_labels.update(fspec.get("nodeLabels") or {})
        tolerations.extend(t for t in fspec.get("tolerations") or () if t not in tolerations)
    for task in out["spec"]["tasks"]:
        pod = task["template"]["spec"]
        if node_labels:
            pod["nodeSelector"] = {**(pod.get("nodeSelector") or {}), **node_labels}
        if tolerations:
            have = pod.get("tolerations") or []
            pod["tolerations"] = have + [t for t in tolerations if t not in have]
    return out
