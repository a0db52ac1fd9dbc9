"""Kueue (issue 33, first slice): the Workload a stage asks quota with, and the lifecycle's gate."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from support import job

from trainium_operator.api import naming
from trainium_operator.api.spec import parse
from trainium_operator.domain import lifecycle
from trainium_operator.domain.kueuestate import Admission, Quota, Workload, workload_state
from trainium_operator.domain.lifecycle import Action, Child, Observed, Phase, Rejection
from trainium_operator.manifests import builders, dra, workload
from trainium_operator.manifests.ownership import Owner

Json = dict[str, Any]
OWNER = Owner("bert", "team-a", "0c4a1f0e-1111-2222-3333-444455556666")
KUEUE = workload.Kueue("team-a-queue", "prod")


def built(stage: str = "train", nodes: int = 2, **extra: Any) -> tuple[Json, Json]:
    spec = parse(job(nodes=nodes, **extra))
    vcjob = builders.build_vcjob(spec, OWNER, stage)
    return vcjob, workload.build_workload(spec, OWNER, stage, KUEUE, vcjob, priority=1000)


def test_opt_in_only_with_the_queue_label() -> None:
    assert workload.opt_in(None) is None
    assert workload.opt_in({"app": "x", workload.LABEL_PRIORITY: "prod"}) is None
    assert workload.opt_in({workload.LABEL_QUEUE: "q"}) == workload.Kueue("q", "")
    both = {workload.LABEL_QUEUE: "q", workload.LABEL_PRIORITY: "prod"}
    assert workload.opt_in(both) == workload.Kueue("q", "prod")


@pytest.mark.parametrize("stage", ["precompile", "train"])
def test_workload_is_controlled_by_the_job_one_pod_set_per_gang(stage: str) -> None:
    vcjob, wl = built(stage, nodes=4)
    assert wl["apiVersion"] == "kueue.x-k8s.io/v1beta2" and wl["kind"] == "Workload"
    (ref,) = wl["metadata"]["ownerReferences"]
    assert ref["uid"] == OWNER.uid and ref["controller"] is True
    assert wl["spec"]["queueName"] == "team-a-queue"
    (pod_set,) = wl["spec"]["podSets"]
    assert pod_set["count"] == 4 == vcjob["spec"]["minAvailable"]
    assert pod_set["name"] == {"precompile": "compile", "train": "train"}[stage]
    (container,) = pod_set["template"]["spec"]["containers"]
    gang = vcjob["spec"]["tasks"][0]["template"]["spec"]
    assert container["resources"]["requests"] == {
        "aws.amazon.com/neuron": "16",
        "vpc.amazonaws.com/efa": "8",
    }  # the gang's limits, as requests: what Kueue counts against the quota
    assert pod_set["template"]["spec"]["nodeSelector"] == gang["nodeSelector"]
    assert wl["spec"]["priorityClassRef"] == {
        "group": "kueue.x-k8s.io",
        "kind": "WorkloadPriorityClass",
        "name": "prod",
    }
    assert wl["spec"]["priority"] == 1000


def test_user_requests_reach_the_pod_set() -> None:
    _, wl = built(resources={"requests": {"cpu": "100", "memory": "400Gi"}})
    requests = wl["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]
    assert requests["requests"]["cpu"] == "100" and requests["requests"]["memory"] == "400Gi"


def test_a_dra_pod_set_carries_the_device_claims_kueue_counts() -> None:
    """Issue 41: the pod set copied requests and limits, not the pods' resource claims, so
    Kueue admitted a `devices: dra` gang on EFA alone and never counted its Neuron devices
    (fails on main: no resourceClaims in the pod set)."""
    vcjob, wl = built(devices="dra", instanceType="trn2.48xlarge")
    gang = vcjob["spec"]["tasks"][0]["template"]["spec"]
    template = wl["spec"]["podSets"][0]["template"]["spec"]
    assert template["resourceClaims"] == gang["resourceClaims"] == dra.pod_claims(OWNER.name)
    (container,) = template["containers"]
    assert container["resources"]["claims"] == dra.container_claims()
    assert "aws.amazon.com/neuron" not in container["resources"].get("requests", {})


def test_no_priority_without_the_label() -> None:
    spec = parse(job())
    vcjob = builders.build_vcjob(spec, OWNER, "train")
    wl = workload.build_workload(spec, OWNER, "train", workload.Kueue("q"), vcjob, None)
    assert "priorityClassRef" not in wl["spec"] and "priority" not in wl["spec"]


def test_our_objects_never_carry_the_queue_label() -> None:
    """Kueue's pod integration would make Workloads of its own for such pods."""
    vcjob, wl = built()
    for task in vcjob["spec"]["tasks"]:
        assert workload.LABEL_QUEUE not in task["template"]["metadata"]["labels"]
    assert workload.LABEL_QUEUE not in wl["metadata"]["labels"]


def test_names_are_per_stage_and_per_elastic_size() -> None:
    spec = parse(job(nodes=4))
    names = {workload.workload_name(OWNER, spec, s) for s in ("precompile", "train")}
    tag = naming.short_hash(OWNER.uid, 5)
    assert names == {f"trainiumjob-bert-{tag}-compile", f"trainiumjob-bert-{tag}-train"}
    long = Owner("x" * 63, "ns", "u")
    assert len(workload.workload_name(long, spec, "train")) <= 63
    assert workload.workload_name(long, spec, "train").endswith("-train")


def test_names_carry_the_owners_uid() -> None:
    """Issue 41 (9): a job re-created under the same name never meets its predecessor's
    Workload (orphaned, or not yet collected) by name."""
    spec = parse(job(nodes=4))
    again = Owner(OWNER.name, OWNER.namespace, "ffffffff-1111-2222-3333-444455556666")
    for stage in ("precompile", "train"):
        assert workload.workload_name(OWNER, spec, stage) != workload.workload_name(
            again, spec, stage
        )


def test_admitted_flavor_reaches_every_pod() -> None:
    vcjob, _ = built()
    toleration = {"key": "trn", "operator": "Exists", "effect": "NoSchedule"}
    flavor = {"spec": {"nodeLabels": {"pool": "trn1-a"}, "tolerations": [toleration]}}
    out = workload.with_flavors(vcjob, [flavor])
    for task in out["spec"]["tasks"]:
        pod = task["template"]["spec"]
        assert pod["nodeSelector"]["pool"] == "trn1-a"
        assert pod["nodeSelector"]["node.kubernetes.io/instance-type"] == "trn1.32xlarge"
        assert pod["tolerations"] == [toleration]
    assert "pool" not in vcjob["spec"]["tasks"][0]["template"]["spec"]["nodeSelector"]
    admitted = {"status": {"admission": {"podSetAssignments": [
        {"name": "train", "flavors": {"aws.amazon.com/neuron": "trn1", "cpu": "trn1"}},
    ]}}}  # fmt: skip
    assert workload.admitted_flavors(admitted) == ("trn1",)
    assert workload.admitted_flavors(None) == ()


def cond(kind: str, status: str, reason: str = "R", message: str = "") -> Json:
    return {"type": kind, "status": status, "reason": reason, "message": message}


@pytest.mark.parametrize(
    ("conditions", "state", "reason"),
    [
        (None, Admission.ABSENT, ""),
        ([], Admission.PENDING, "Pending"),
        ([cond("QuotaReserved", "False", "Pending", "insufficient quota")], Admission.PENDING,
         "Pending"),
        ([cond("QuotaReserved", "True")], Admission.PENDING, "QuotaReserved"),
        ([cond("QuotaReserved", "True"), cond("Admitted", "True")], Admission.ADMITTED, ""),
        ([cond("Admitted", "True"), cond("Finished", "True")], Admission.FINISHED, ""),
    ],
)  # fmt: skip
def test_workload_state_reads_kueues_conditions(
    conditions: list[Json] | None, state: Admission, reason: str
) -> None:
    body = None if conditions is None else {"status": {"conditions": conditions}}
    got = workload_state("w", body)
    assert (got.state, got.reason) == (state, reason)


def quota(
    pre: Admission = Admission.ABSENT, train: Admission = Admission.ABSENT, **kw: Any
) -> Quota:
    return Quota(
        "q",
        Workload("wl-compile", pre),
        Workload("wl-train", train, kw.pop("reason", ""), kw.pop("message", "")),
        **kw,
    )


READY = Observed(storage_ready=True, policy="Never")
COMPILE = Observed(storage_ready=True, policy="Always")


@pytest.mark.parametrize(
    ("obs", "actions", "reason"),
    [
        # a cache hit (or no precompile): only the training Workload, then the gang
        (READY, (Action.CREATE_TRAINING_WORKLOAD,), "WaitingForQuota"),
        (replace(READY, quota=quota(train=Admission.PENDING, reason="Pending",
                                    message="insufficient unused quota")), (), "WaitingForQuota"),
        (replace(READY, quota=quota(train=Admission.ADMITTED)), (Action.CREATE_TRAINING,), None),
        # a miss: the precompile's Workload first (the cache lease is taken meanwhile)
        (COMPILE, (Action.ACQUIRE_CACHE, Action.CREATE_PRECOMPILE_WORKLOAD), "WaitingForQuota"),
        (replace(COMPILE, quota=quota(pre=Admission.ADMITTED)),
         (Action.ACQUIRE_CACHE, Action.CREATE_PRECOMPILE), None),
        # the compile done: its Workload finishes (quota back), the training one is created
        (replace(COMPILE, precompile=Child.SUCCEEDED, cache_recorded=True, cache_holder="self",
                 quota=quota(pre=Admission.ADMITTED), previous_phase="Precompiling"),
         (Action.FINISH_PRECOMPILE_WORKLOAD, Action.RECORD_CACHE, Action.CREATE_TRAINING_WORKLOAD),
         "WaitingForQuota"),
        # the job ends: every live Workload finishes
        (replace(READY, training=Child.SUCCEEDED, quota=quota(train=Admission.ADMITTED)),
         (Action.FINISH_TRAINING_WORKLOAD,), None),
        (replace(READY, training=Child.SUCCEEDED, quota=quota(train=Admission.FINISHED)), (), None),
        # a job waiting on another's compile queues its training Workload gated (issue 41)
        (replace(COMPILE, cache_holder="other", cache_holder_job="ns/other"),
         (Action.CREATE_TRAINING_WORKLOAD,), None),
        # LocalQueue missing: said, nothing started outside the quota
        (replace(READY, quota=quota(train=Admission.PENDING, blocker=lifecycle.Blocker(
            "LocalQueueNotFound", "LocalQueue 'q' does not exist"))), (), "LocalQueueNotFound"),
    ],
)  # fmt: skip
def test_gate(obs: Observed, actions: tuple[Action, ...], reason: str | None) -> None:
    if obs.quota is None:
        obs = replace(obs, quota=quota())
    decision = lifecycle.decide(obs)
    assert decision.actions == actions
    assert (decision.blocker.reason if decision.blocker else None) == reason
    if reason == "WaitingForQuota":
        assert decision.phase is Phase.PENDING
    if reason == "WaitingForQuota" and obs.quota and obs.quota.train.message:
        assert "insufficient unused quota" in decision.message  # Kueue's own words


def test_waiting_for_cache_is_a_phase_of_its_own_with_a_gated_workload() -> None:
    obs = replace(COMPILE, cache_holder="other", cache_holder_job="ns/other", quota=quota())
    decision = lifecycle.decide(obs)
    assert decision.phase is Phase.WAITING_FOR_CACHE
    assert decision.actions == (Action.CREATE_TRAINING_WORKLOAD,)  # behind the gate


def test_kueue_not_installed_is_said_never_a_start_outside_quota() -> None:
    refused = Rejection(Action.CREATE_TRAINING_WORKLOAD, 404, "the server could not find it")
    decision = lifecycle.decide(replace(READY, quota=quota(), rejections=(refused,)))
    assert decision.actions == ()
    assert decision.blocker is not None and decision.blocker.reason == "KueueNotInstalled"
    running = next(c for c in decision.conditions if c.type == "Running")
    assert running.reason == "KueueNotInstalled" and "not installed" in running.message


def test_an_invalid_workload_fails_the_job_naming_it() -> None:
    refused = Rejection(Action.CREATE_TRAINING_WORKLOAD, 422, 'spec.queueName: Invalid value: "Q"')
    decision = lifecycle.decide(replace(READY, quota=quota(), rejections=(refused,)))
    assert decision.phase is Phase.FAILED
    assert "spec.queueName" in decision.message


def test_without_kueue_nothing_changes() -> None:
    assert lifecycle.decide(READY).actions == (Action.CREATE_TRAINING,)


class _Reader:
    """Workloads by name (ours: controlled by OWNER), nothing else."""

    def __init__(self, **found: Json) -> None:
        self.found = found

    def get(self, kind: Any, namespace: str, name: str) -> Json | None:
        return self.found.get(name)

    def wrote(self, *_: Any) -> None: ...

    def deleted(self, *_: Any) -> None: ...

    def watched(self, kind: Any) -> bool:
        return True


def _admitted(spec: Any, usage: Json) -> Json:
    name = workload.workload_name(OWNER, spec, "train")
    return {
        "metadata": {"name": name, "namespace": OWNER.namespace, "uid": "w1",
                     "resourceVersion": "3", "ownerReferences": [OWNER.reference()]},
        "status": {
            "conditions": [{"type": "QuotaReserved", "status": "True"},
                           {"type": "Admitted", "status": "True"}],
            "admission": {"clusterQueue": "cq", "podSetAssignments": [
                {"name": "train", "flavors": {}, "resourceUsage": usage, "count": 1}]},
        },
    }  # fmt: skip


@pytest.mark.parametrize(
    ("devices", "usage", "admitted"),
    [
        ("dra", {"vpc.amazonaws.com/efa": "16"}, False),  # Kueue without deviceClassMappings
        ("dra", {"vpc.amazonaws.com/efa": "16", "aws.amazon.com/neuron": "16"}, True),
        ("plugin", {"vpc.amazonaws.com/efa": "16", "aws.amazon.com/neuron": "16"}, True),
    ],
)
def test_a_dra_gang_admitted_on_efa_alone_is_not_started(
    devices: str, usage: Json, admitted: bool
) -> None:
    """Issue 41: never admitted on EFA alone (fails on main: the gang was created)."""
    from trainium_operator.cluster import workloads

    spec = parse(job(devices=devices, instanceType="trn2.48xlarge", precompile={"policy": "Never"}))
    wl = _admitted(spec, usage)
    reader = _Reader(**{wl["metadata"]["name"]: wl})
    plain = workload.Kueue("team-a-queue")
    quota, _held = workloads.observe(spec, OWNER, plain, reader, starting=True)  # type: ignore[arg-type]
    assert (quota.train.state is Admission.ADMITTED) is admitted
    if not admitted:
        assert quota.blocker is not None and quota.blocker.reason == "NeuronDevicesNotCounted"
        assert "deviceClassMappings" in quota.blocker.message


def _waiting(spec: Any, queue: str, reserved: bool = False) -> Json:
    wl = _admitted(spec, {})
    wl["spec"] = {"queueName": queue}
    conds = [{"type": "QuotaReserved", "status": "True" if reserved else "False"}]
    wl["status"] = {"conditions": conds}
    return wl


@pytest.mark.parametrize(("queue", "reserved", "moved"), [
    ("old-queue", False, True),  # the label changed while it waited: made again in the new one
    ("team-a-queue", False, False),
    ("old-queue", True, False),  # quota reserved: it stays (the chart's policy refuses this)
])  # fmt: skip
def test_a_waiting_workload_of_another_queue_is_replaced(
    queue: str, reserved: bool, moved: bool
) -> None:
    """Issue 41: a queue-name label changed while the job waited left its Workload in the old
    LocalQueue (fails on main: nothing stale). Deleted, it is made again in the new queue."""
    from trainium_operator.cluster import workloads

    spec = parse(job(precompile={"policy": "Never"}))
    wl = _waiting(spec, queue, reserved)
    reader = _Reader(**{wl["metadata"]["name"]: wl})
    plain = workload.Kueue("team-a-queue")
    quota, held = workloads.observe(spec, OWNER, plain, reader, starting=False)  # type: ignore[arg-type]
    assert (held.stale == (wl,)) is moved
    assert (quota.stale == (wl["metadata"]["name"],)) is moved


def test_admission_checks_pod_set_updates_reach_every_pod() -> None:
    """Issue 41 (7): an admission check's podSetUpdates (how a ProvisioningRequest check
    delivers its capacity) are on the gang's pods, as Kueue's job framework applies them."""
    vcjob, _ = built()
    toleration = {"key": "provisioned", "operator": "Exists", "effect": "NoSchedule"}
    update = {"name": "train", "labels": {"capacity": "pr-1"}, "annotations": {"a": "b"},
              "nodeSelector": {"pool": "provisioned"}, "tolerations": [toleration]}  # fmt: skip
    other = {"name": "compile", "labels": {"wrong": "set"}}
    wl = {"status": {"admissionChecks": [
        {"name": "check", "state": "Ready", "podSetUpdates": [update, other]},
        {"name": "plain", "state": "Ready"},
    ]}}  # fmt: skip
    updates = workload.pod_set_updates(wl, "train")
    assert updates == (update,)
    out = workload.with_updates(vcjob, updates)
    for task in out["spec"]["tasks"]:
        meta, pod = task["template"]["metadata"], task["template"]["spec"]
        assert meta["labels"]["capacity"] == "pr-1" and "wrong" not in meta["labels"]
        assert meta["annotations"]["a"] == "b"
        assert pod["nodeSelector"]["pool"] == "provisioned"
        assert pod["nodeSelector"]["node.kubernetes.io/instance-type"] == "trn1.32xlarge"
        assert toleration in pod["tolerations"]
    assert workload.with_updates(vcjob, ()) is vcjob
    assert workload.pod_set_updates(None, "train") == ()
