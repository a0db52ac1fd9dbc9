"""Pure Kueue manifests: a stage's Workload, and what its admission adds to the gang's pods.

A TrainiumJob opts in the Kueue way, with the `kueue.x-k8s.io/queue-name` label; its Volcano
jobs cannot be put under Kueue (Volcano has no `suspend`), so the operator owns one Workload per
stage (precompile, train) and creates the stage's gang only once Kueue admitted it. The pod set
is read from the built Volcano job, so the quota asked is what the gang's pods request: a
`devices: dra` gang's pods claim their Neuron devices from a ResourceClaimTemplate, and the pod
set carries those claims, which Kueue's DRA integration counts as the resource its
`resources.deviceClassMappings` maps the device class to (README: aws.amazon.com/neuron).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainium_operator.api import naming
from trainium_operator.api.instances import EFA_RESOURCE
from trainium_operator.api.spec import TrainiumJobSpec
from trainium_operator.manifests.ownership import Owner, labels, owner_annotations

Json = dict[str, Any]

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
API_VERSION = f"{GROUP}/{VERSION}"
#: The TrainiumJob's opt-in labels (Kueue's own names); never copied to our pods, or Kueue's
#: pod integration would make Workloads of its own.
LABEL_QUEUE = "kueue.x-k8s.io/queue-name"
LABEL_PRIORITY = "kueue.x-k8s.io/priority-class"
#: Kueue's finalizer on a job's Workload: its quota stays counted until the job's pods are gone.
RESOURCE_IN_USE = "kueue.x-k8s.io/resource-in-use"
#: Pod-template fields a Workload keeps: what Kueue reads to fit, count and place the pods
#: (resourceClaims: a DRA job's Neuron devices, counted through their ResourceClaimTemplate).
_POD_FIELDS = (
    "nodeSelector", "tolerations", "affinity", "priorityClassName", "runtimeClassName",
    "resourceClaims",
)  # fmt: skip
_CONTAINER_FIELDS = ("name", "image", "resources")
#: Kueue's admission gate (KEP-6915, beta and on since v0.19): a comma list of `domain/name`;
#: while it is on a Workload Kueue never admits it (QuotaReserved=False, AdmissionGated). It
#: may be set only at creation, and later only removed or shrunk.
GATE_ANNOTATION = "kueue.x-k8s.io/admission-gated-by"
#: Our gate: the job's graphs are being compiled by another job (its training waits for them).
COMPILE_GATE = "trainium.dev/compile-cache"


@dataclass(frozen=True)
class Kueue:
    """A job's opt-in: its LocalQueue and WorkloadPriorityClass ("": none)."""

    queue: str
    priority_class: str = ""
    #: spec.elastic: every size the gang may run at (each has its own training Workload).
    sizes: tuple[int, ...] = ()
    #: The queue-name label was removed once the job had a Workload: it stays in `queue`.
    kept: bool = False


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
    return name_for(owner, suffix)


#: Hex digits of the owner's uid in a Workload's name (Kueue's own names carry 5).
UID_DIGITS = 5


def name_for(owner: Owner, suffix: str) -> str:
    """`trainiumjob-<job>-<uid hash>-<suffix>`: the owner's uid in the name, as Kueue's job
    framework names Workloads, so a job re-created under the same name never meets its
    predecessor's Workload (orphaned, or not yet collected) by name."""
    tag = naming.short_hash(owner.uid, UID_DIGITS)
    return naming.fit(f"trainiumjob-{owner.name}", f"{tag}-{suffix}", naming.DNS_LABEL_MAX)


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
    claims = res.get("claims")
    res.clear()
    if requests:
        res["requests"] = requests
    if limits:
        res["limits"] = dict(limits)
    if claims:  # which of the pod's claims the container uses (validated against the pod's)
        res["claims"] = claims
    return out


def build_workload(
    spec: TrainiumJobSpec,
    owner: Owner,
    stage: str,
    kueue: Kueue,
    vcjob: Mapping[str, Any],
    priority: int | None = None,
    gated: bool = False,
) -> Json:
    """The stage's Workload, controlled by the TrainiumJob; `priority`: the named
    WorkloadPriorityClass's value (Kueue's schema wants both or neither); `gated`: queued
    behind our compile gate (another job compiles its graphs: it holds nothing meanwhile)."""
    body: Json = {
        "apiVersion": API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": workload_name(owner, spec, stage),
            "namespace": owner.namespace,
            "labels": labels(owner, stage),
            "annotations": owner_annotations(owner),
            "ownerReferences": [owner.reference()],
            "finalizers": [RESOURCE_IN_USE],
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
    if gated:
        body["metadata"]["annotations"][GATE_ANNOTATION] = COMPILE_GATE
    return body


def gated(workload: Mapping[str, Any] | None) -> bool:
    """Whether our compile gate is on the Workload (Kueue does not admit it while it is)."""
    gates = ((workload or {}).get("metadata") or {}).get("annotations") or {}
    return COMPILE_GATE in str(gates.get(GATE_ANNOTATION) or "").split(",")


def ungated(workload: Mapping[str, Any]) -> Json:
    """The merge patch that lifts our gate (other gates kept), guarded by the version read."""
    md = workload["metadata"]
    gates = str((md.get("annotations") or {}).get(GATE_ANNOTATION) or "").split(",")
    left = ",".join(g for g in gates if g and g != COMPILE_GATE) or None
    return {"metadata": {"resourceVersion": md["resourceVersion"],
                         "annotations": {GATE_ANNOTATION: left}}}  # fmt: skip


#: What a `devices: dra` gang's pods request besides their claims: anything else in an
#: admission's usage is the device class's mapped resource (Kueue's deviceClassMappings).
_NOT_DEVICES = frozenset({"cpu", "memory", "pods", "ephemeral-storage", EFA_RESOURCE})


def counts_devices(workload: Mapping[str, Any] | None) -> bool:
    """Whether Kueue's admission of a DRA gang's Workload counted its claimed devices: without
    a deviceClassMappings entry for neuron.aws.com Kueue admits it on EFA, cpu and memory."""
    admission = ((workload or {}).get("status") or {}).get("admission") or {}
    assignments = admission.get("podSetAssignments") or ()
    return bool(assignments) and all(
        set(a.get("resourceUsage") or {}) - _NOT_DEVICES for a in assignments
    )


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


def pod_set_updates(workload: Mapping[str, Any] | None, pod_set_name: str) -> tuple[Json, ...]:
    """The podSetUpdates the Workload's admission checks give its pod set (a ProvisioningRequest
    check delivers its capacity's node selector and labels this way)."""
    checks = ((workload or {}).get("status") or {}).get("admissionChecks") or ()
    return tuple(
        dict(update)
        for check in checks
        for update in check.get("podSetUpdates") or ()
        if update.get("name") == pod_set_name
    )


def with_updates(vcjob: Json, updates: Sequence[Mapping[str, Any]]) -> Json:
    """The Volcano job with the admission checks' podSetUpdates on every pod (labels,
    annotations, nodeSelector, tolerations), as Kueue's job framework applies them on start."""
    if not updates:
        return vcjob
    out = copy.deepcopy(vcjob)
    for task in out["spec"]["tasks"]:
        template = task["template"]
        meta, pod = template.setdefault("metadata", {}), template["spec"]
        for update in updates:
            for key, part in (("labels", meta), ("annotations", meta), ("nodeSelector", pod)):
                if update.get(key):
                    part[key] = {**(part.get(key) or {}), **update[key]}
            have = pod.get("tolerations") or []
            more = [t for t in update.get("tolerations") or () if t not in have]
            if more:
                pod["tolerations"] = have + more
    return out


# ---- Status writes as Kueue's job framework makes them (server-side apply) --------------------

#: Field managers of Kueue's own writes (pkg/constants): the admission fields (admission,
#: QuotaReserved, Admitted, Evicted, Requeued, ...) are applied by "kueue-admission"; PodsReady
#: by the job reconciler as "<kueue-job-controller>-PodsReady" (workload.SetConditionAndUpdate).
#: Server-side apply removes a field only for the manager that applied it: the requeue must be
#: applied as "kueue-admission" to clear the admission Kueue applied.
ADMISSION_MANAGER = "kueue-admission"
PODS_READY_MANAGER = "kueue-job-controller-PodsReady"
#: admissionManagedConditions (pkg/workload/patching): the conditions the admission apply owns.
ADMISSION_CONDITIONS = (
    "QuotaReserved", "BlockedOnPreemptionGates", "Evicted", "Admitted", "Preempted", "Requeued",
    "DeactivationTarget", "Finished", "PodsReady",
)  # fmt: skip
#: Eviction reasons after which the framework sets Requeued=True (Kueue queues the Workload at
#: once); after any other (PodsReadyTimeout, Deactivated...) Requeued=False: Kueue's backoff or
#: reactivation sets it True later.
REQUEUED_AT_ONCE = ("Preempted", "NodeFailures")
#: Status fields prepareWorkloadPatch carries besides the admission and the conditions (each
#: omitted one would be removed: the apply owns them).
_CARRIED = (
    "resourceRequests", "accumulatedPastExecutionTimeSeconds", "clusterName",
    "nominatedClusterNames", "unhealthyNodes", "preemptionGates", "admissionChecks",
)  # fmt: skip


def set_condition(conds: list[Json], new: Json, now: str) -> bool:
    """apimeta.SetStatusCondition: lastTransitionTime moves only when the status changes."""
    old = next((c for c in conds if c.get("type") == new["type"]), None)
    if old is None:
        conds.append({**new, "lastTransitionTime": new.get("lastTransitionTime") or now})
        return True
    changed = False
    if old.get("status") != new["status"]:
        old.update(status=new["status"], lastTransitionTime=new.get("lastTransitionTime") or now)
        changed = True
    for key in ("reason", "message", "observedGeneration"):
        if key in new and old.get(key) != new[key]:
            old[key] = new[key]
            changed = True
    return changed


def _true(conds: Sequence[Mapping[str, Any]], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in conds)


def requeued(wl: Mapping[str, Any], now: str) -> Json | None:
    """The apply that requeues an evicted Workload, as the framework does once its job stopped
    (SetRequeuedCondition, UnsetQuotaReservationWithCondition, SyncAdmittedCondition, then
    prepareWorkloadPatch); None: not evicted, or already without a reservation."""
    status = wl.get("status") or {}
    conds: list[Json] = copy.deepcopy(list(status.get("conditions") or ()))
    evicted = next((c for c in conds if c.get("type") == "Evicted"), None)
    reserved = _true(conds, "QuotaReserved") or bool(status.get("admission"))
    if evicted is None or evicted.get("status") != "True" or not reserved:
        return None
    md = wl["metadata"]
    gen = {"observedGeneration": md["generation"]} if "generation" in md else {}
    reason, message = str(evicted.get("reason") or ""), str(evicted.get("message") or "")
    again = "True" if reason in REQUEUED_AT_ONCE else "False"
    set_condition(conds, {"type": "Requeued", "status": again, "reason": reason,
                          "message": message, **gen}, now)  # fmt: skip
    # UnadmittedWorkloadsObservability is off by default in v0.19: the reason is "Pending".
    set_condition(conds, {"type": "QuotaReserved", "status": "False", "reason": "Pending",
                          "message": message, "lastTransitionTime": now, **gen}, now)  # fmt: skip
    if _true(conds, "Admitted"):  # SyncAdmittedCondition: no reservation now
        checks = status.get("admissionChecks") or ()
        ready = all(c.get("state") == "Ready" for c in checks)
        why = "NoReservation" if ready else "NoReservationUnsatisfiedChecks"
        said = "The workload has no reservation" + ("" if ready else " and not all checks ready")
        set_condition(conds, {"type": "Admitted", "status": "False", "reason": why,
                              "message": said, "lastTransitionTime": now, **gen}, now)  # fmt: skip
    out: Json = {"conditions": [c for c in conds if c.get("type") in ADMISSION_CONDITIONS]}
    state = status.get("requeueState") or {}
    if state.get("count") is not None or state.get("requeueAt") is not None:
        out["requeueState"] = copy.deepcopy(state)
    for key in _CARRIED:
        if status.get(key) is not None:
            out[key] = copy.deepcopy(status[key])
    evictions = (status.get("schedulingStats") or {}).get("evictions")
    if "schedulingStats" in status:
        out["schedulingStats"] = {"evictions": copy.deepcopy(evictions)} if evictions else {}
    return _apply_body(md, out)


def pods_ready(wl: Mapping[str, Any], state: tuple[str, str], message: str, now: str) -> Json:
    """The apply that sets the Workload's PodsReady condition (and nothing else)."""
    status, reason = state
    cond = {"type": "PodsReady", "status": status, "reason": reason, "message": message,
            "lastTransitionTime": now}  # fmt: skip
    if "generation" in wl["metadata"]:
        cond["observedGeneration"] = wl["metadata"]["generation"]
    return _apply_body(wl["metadata"], {"conditions": [cond]})


def _apply_body(md: Mapping[str, Any], status: Json) -> Json:
    """An apply of status fields guarded by the version read (baseSSAWorkload, strict)."""
    meta = {k: md[k] for k in ("name", "namespace", "uid", "resourceVersion") if md.get(k)}
    return {"apiVersion": API_VERSION, "kind": "Workload", "metadata": meta, "status": status}
