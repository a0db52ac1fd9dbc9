"""Issue 41 on the real tier (real Kueue v0.19.2, real Volcano): quota is released exactly when a
job stops needing it, on the less common paths too.

- a gang create the API server refuses for good after admission fails the job, and its
  Workload is Finished (not left admitted for ever);
- a compile Workload whose compile is no longer needed (another job filled the entry while
  this one was suspended) is released, so the job's training Workload can be admitted;
- runPolicy.activeDeadlineSeconds counts from the job's admission, not from its queueing;
- a job's spares are in its Workload's count (issue 42): Kueue admits nodes + spares nodes'
  worth of devices, or nothing.

Each ends with the ClusterQueue holding nothing; conftest's `_no_quota_held_by_finished_jobs`
also checks every Kueue test's namespace for Workloads of finished jobs still holding quota.
"""

from __future__ import annotations

import datetime
import json
import time
from typing import Any

import pytest

import procs
from cluster import Cluster, wait_until
from jobs import TJ, VCJOB, children, condition, get, wait_condition
from kubelet import TRN1_32XLARGE
from kueue import API
from kueuesetup import FLAVOR_LABELS, NEURON, PRECOMPILE, RUNNING, Queued, set_neuron_quota
from trainium_operator.manifests.workload import RESOURCE_IN_USE

Obj = dict[str, Any]
CACHED: Obj = {"precompile": {"policy": "IfNotCached"}, "cache": {"name": "shared"}}
#: Each test starts and ends with Kueue's manager running (kueuesetup.kueue_alive).
pytestmark = pytest.mark.usefixtures("kueue_alive")


def refuse_gangs(cluster: Cluster, namespace: str) -> str:
    """An admission policy refusing every Volcano job create in namespace with 422 Invalid, as
    a webhook refusing the gang for good would; its name (deleted by the caller)."""
    name = f"no-gangs-{namespace}"[:63]
    rules = [{"apiGroups": ["batch.volcano.sh"], "apiVersions": ["*"], "resources": ["jobs"],
              "operations": ["CREATE"]}]  # fmt: skip
    docs = [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
         "metadata": {"name": name},
         "spec": {"failurePolicy": "Fail", "matchConstraints": {"resourceRules": rules},
                  "validations": [{"expression": "false", "reason": "Invalid",
                                   "message": "the test refuses every gang"}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1",
         "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
         "spec": {"policyName": name, "validationActions": ["Deny"],
                  "matchResources": {"namespaceSelector": {"matchLabels": {
                      "kubernetes.io/metadata.name": namespace}}}}},
    ]  # fmt: skip
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                          "items": docs}))  # fmt: skip
    probe = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
             "metadata": {"name": "probe", "namespace": namespace},
             "spec": {"tasks": [{"name": "t", "replicas": 1, "template": {"spec": {
                 "containers": [{"name": "c", "image": "x"}]}}}]}}  # fmt: skip

    def refusing() -> bool:  # a new policy takes a moment to reach the admission chain
        proc = cluster.kubectl("create", "--dry-run=server", "-f", "-",
                               stdin=json.dumps(probe), check=False)  # fmt: skip
        return proc.returncode != 0 and "refuses every gang" in proc.stderr

    wait_until(refusing, procs.scaled(30), "the policy refusing Volcano jobs", every=0.5)
    return name


def suspend(cluster: Cluster, name: str, namespace: str, on: bool) -> None:
    patch = json.dumps({"spec": {"runPolicy": {"suspend": on}}})
    cluster.kubectl("patch", TJ, name, "-n", namespace, "--type=merge", "-p", patch)


def test_a_gang_refused_for_good_after_admission_fails_the_job_and_finishes_its_workload(
    queued: Queued,
) -> None:
    """Issue 41 (1): Kueue admits, the API server refuses the gang (422): the job is Failed
    naming the refusal, and its Workload is Finished: the ClusterQueue holds nothing."""
    cluster, ns = queued.cluster, queued.ns
    cq = queued.queues(neuron=16)
    policy = refuse_gangs(cluster, ns)
    try:
        queued.create("refused")
        job = wait_condition(cluster, "refused", ns, "Failed", timeout=int(procs.scaled(90)))
        assert "refuses every gang" in job["status"]["message"], job["status"]
        assert children(cluster, VCJOB, ns, "refused") == []
        (wl,) = queued.workloads("refused")
        assert condition(wl, "Admitted").get("status") == "True", wl.get("status")

        def finished() -> Obj | None:
            (now,) = queued.workloads("refused")
            return now if condition(now, "Finished").get("status") == "True" else None

        done = wait_until(finished, procs.scaled(30), "the refused job's Workload Finished")
        assert condition(done, "Finished")["reason"] == "Failed", done["status"]
        queued.wait_released(cq)
    finally:
        cluster.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy",
                        policy, "--ignore-not-found", check=False)  # fmt: skip


def test_a_compile_no_longer_needed_releases_its_workload(queued: Queued) -> None:
    """Issue 41 (2), a queue that fits one gang: `first` compiles and is suspended (its compile
    stopped); `second`, same graphs, compiles them and trains, holding the quota; `first`,
    resumed, is a cache hit: its compile Workload is released at once, so when `second` ends
    Kueue admits first's training (not the older compile Workload) and `first` succeeds."""
    cluster, kubelet, ns = queued.cluster, queued.kubelet, queued.ns
    cq = queued.queues(neuron=16)
    kubelet.plan(PRECOMPILE, RUNNING, namespace=ns)  # compiles run until finished
    kubelet.plan({"trainium.dev/job-name": "second", "trainium.dev/stage": "train"}, RUNNING,
                 namespace=ns)  # fmt: skip
    queued.create("first", **CACHED)
    queued.running(1, "first")
    suspend(cluster, "first", ns, True)
    wait_until(lambda: queued.status("first").get("phase") == "Suspended",
               procs.scaled(60), "first Suspended")  # fmt: skip
    wait_until(lambda: not kubelet.running(ns), procs.scaled(60), "first's compile gone")
    queued.create("second", **CACHED)
    queued.running(1, "second")  # its compile, admitted in the quota first left
    kubelet.finish(ns)  # the compile ends; its training runs until finished, holding the quota
    wait_until(lambda: queued.status("second").get("phase") == "Training",
               procs.scaled(120), "second Training")  # fmt: skip
    queued.running(1, "second")
    suspend(cluster, "first", ns, False)  # a cache hit now: its training Workload queues

    def train_queued() -> bool:
        names = [w["metadata"]["name"] for w in queued.workloads("first")]
        return any(n.endswith("-train") for n in names)

    wait_until(train_queued, procs.scaled(60), "first's training Workload")
    kubelet.finish(ns)  # second ends: the quota goes to first's training
    wait_condition(cluster, "second", ns, "Succeeded", timeout=int(procs.scaled(60)))
    first = wait_condition(cluster, "first", ns, "Succeeded", timeout=int(procs.scaled(120)))
    assert first["status"]["cache"]["outcome"] == "hit", first["status"]
    assert [w["metadata"]["name"][-6:] for w in queued.workloads("first")] == ["-train"]
    queued.wait_released(cq)


def test_the_active_deadline_counts_from_admission(queued: Queued) -> None:
    """Issue 41 (8): a job that waits for quota longer than its activeDeadlineSeconds is not
    failed for it: it runs once admitted; status.startTime is its admission."""
    cluster, kubelet, ns = queued.cluster, queued.kubelet, queued.ns
    deadline = int(procs.scaled(10))
    cq = queued.queues(neuron=16)
    kubelet.plan({"trainium.dev/job-name": "first"}, RUNNING, namespace=ns)
    queued.create("first")
    queued.running(1, "first")
    queued.create("late", runPolicy={"activeDeadlineSeconds": deadline})
    wait_until(lambda: condition(get(cluster, TJ, "late", ns), "Running").get("reason")
               == "WaitingForQuota", procs.scaled(60), "late waiting for quota")  # fmt: skip
    assert "startTime" not in queued.status("late")
    waiting = time.monotonic()
    while time.monotonic() - waiting < 2 * deadline:  # twice its deadline in the queue
        assert queued.status("late").get("phase") == "Pending"
        time.sleep(1)
    kubelet.finish(ns)  # first ends: late is admitted, runs 1 s and exits 0
    late = wait_condition(cluster, "late", ns, "Succeeded", timeout=int(procs.scaled(120)))
    assert late["status"].get("startTime"), late["status"]
    queued.wait_released(cq)


def test_admission_checks_pod_set_updates_reach_the_gang_pods(queued: Queued) -> None:
    """Issue 41 (7): a ClusterQueue with an admission check (this test plays its controller,
    as a ProvisioningRequest check would): Kueue admits once the check is Ready, and the
    check's podSetUpdates (labels, annotations, nodeSelector, tolerations) are on every pod."""
    cluster, kubelet, ns = queued.cluster, queued.kubelet, queued.ns
    check = f"check-{ns}"[:63]
    cluster.apply({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck",
                   "metadata": {"name": check},
                   "spec": {"controllerName": "tier.trainium.dev/check"}})  # fmt: skip
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    active = {"type": "Active", "status": "True", "reason": "Active", "message": "tier",
              "lastTransitionTime": now}  # fmt: skip
    cluster.api.merge_patch(f"{API}/admissionchecks/{check}/status",
                            {"status": {"conditions": [active]}})  # fmt: skip
    cq = queued.queues(neuron=16, checks=[check])
    kubelet.plan({}, RUNNING, namespace=ns)
    queued.create("checked")

    def reserved() -> Obj | None:
        wls = queued.workloads("checked")
        ok = wls and condition(wls[0], "QuotaReserved").get("status") == "True"
        return wls[0] if ok and wls[0]["status"].get("admissionChecks") else None

    wl = wait_until(reserved, procs.scaled(60), "quota reserved, the check pending")
    assert condition(wl, "Admitted").get("status") != "True"
    assert children(cluster, VCJOB, ns, "checked") == []  # nothing before the check is Ready
    toleration = {"key": "tier.trainium.dev/provisioned", "operator": "Exists",
                  "effect": "NoSchedule"}  # fmt: skip
    update = {"name": "train", "labels": {"tier.trainium.dev/capacity": "pr-1"},
              "annotations": {"tier.trainium.dev/request": "pr-1"},
              "nodeSelector": FLAVOR_LABELS, "tolerations": [toleration]}  # fmt: skip
    ready = {"name": check, "state": "Ready", "message": "capacity provisioned",
             "lastTransitionTime": now, "podSetUpdates": [update]}  # fmt: skip
    name = wl["metadata"]["name"]
    cluster.api.merge_patch(f"{API}/namespaces/{ns}/workloads/{name}/status",
                            {"status": {"admissionChecks": [ready]}})  # fmt: skip
    queued.running(1, "checked")
    pods = cluster.api.get(f"/api/v1/namespaces/{ns}/pods") or {}
    assert len(pods["items"]) == 1
    for pod in pods["items"]:
        assert pod["metadata"]["labels"]["tier.trainium.dev/capacity"] == "pr-1"
        assert pod["metadata"]["annotations"]["tier.trainium.dev/request"] == "pr-1"
        assert FLAVOR_LABELS.items() <= pod["spec"]["nodeSelector"].items()
        assert toleration in pod["spec"]["tolerations"]
    kubelet.finish(ns)
    wait_condition(cluster, "checked", ns, "Succeeded", timeout=int(procs.scaled(60)))
    queued.wait_released(cq)


def pods_of(cluster: Cluster, namespace: str, job: str) -> dict[str, str]:
    """The job's gang pods the API server still has (terminating ones too): uid -> name."""
    found = cluster.api.get(f"/api/v1/namespaces/{namespace}/pods") or {}
    return {
        p["metadata"]["uid"]: p["metadata"]["name"]
        for p in found.get("items") or []
        if (p["metadata"].get("labels") or {}).get("trainium.dev/job-name") == job
    }


def workload_body(cluster: Cluster, namespace: str, name: str) -> Obj | None:
    return cluster.api.get(f"{API}/namespaces/{namespace}/workloads/{name}")


def kept_until_pods_gone(
    cluster: Cluster, namespace: str, job: str, workload: Obj, pods: dict[str, str]
) -> None:
    """Poll until the Workload (that uid) is gone; it must outlive every pod in `pods` (its
    finalizer holds its quota while they run). AssertionError otherwise."""
    name, uid = workload["metadata"]["name"], workload["metadata"]["uid"]

    def gone() -> bool:
        now = workload_body(cluster, namespace, name)  # first: pods never come back
        left = set(pods) & set(pods_of(cluster, namespace, job))
        if now is not None and now["metadata"]["uid"] == uid:
            return False
        assert not left, f"Workload {name} went while pods {sorted(left)} still ran"
        return True

    wait_until(gone, procs.scaled(120), f"Workload {name} gone once its pods are", every=0.2)


def test_a_deleted_workload_keeps_its_quota_until_its_gang_is_gone(queued: Queued) -> None:
    """Issue 41 (7): our Workloads carry Kueue's resource-in-use finalizer, as its job
    framework's do: a Workload deleted while its gang runs stays (deletionTimestamp set, its
    quota still counted) until the operator has stopped the gang and its pods are gone (on
    main it went at once, its quota free while the pods ran); then a new Workload is queued,
    admitted, and the job runs to its end; the Finished Workload carries no finalizer."""
    cluster, kubelet, ns = queued.cluster, queued.kubelet, queued.ns
    cq = queued.queues(neuron=16)
    kubelet.plan({}, RUNNING, namespace=ns)
    queued.create("inuse")
    queued.running(1, "inuse")
    (wl,) = queued.workloads("inuse")
    assert RESOURCE_IN_USE in wl["metadata"].get("finalizers", []), wl["metadata"]
    pods = pods_of(cluster, ns, "inuse")
    assert pods
    name = wl["metadata"]["name"]
    cluster.kubectl("delete", "workload", name, "-n", ns, "--wait=false")
    now = workload_body(cluster, ns, name)
    assert now is not None and now["metadata"].get("deletionTimestamp"), now
    kept_until_pods_gone(cluster, ns, "inuse", wl, pods)
    said = cluster.kubectl("get", "events", "-n", ns, "-o", "json").stdout
    assert "NoMatchingWorkload" in said  # the gang was stopped for it, as Kueue's reconciler does

    def again() -> list[str]:
        found = [p for p in kubelet.running(ns) if p.startswith("inuse-")]
        new = set(pods_of(cluster, ns, "inuse")) - set(pods)
        return found if new and found else []

    wait_until(again, procs.scaled(120), "the gang again, on a new Workload")
    kubelet.finish(ns)
    wait_condition(cluster, "inuse", ns, "Succeeded", timeout=int(procs.scaled(90)))

    def unheld() -> Obj | None:
        (done,) = queued.workloads("inuse")
        fin = condition(done, "Finished").get("status") == "True"
        return done if fin and not done["metadata"].get("finalizers") else None

    wait_until(unheld, procs.scaled(60), "the Finished Workload without its finalizer")
    queued.wait_released(cq)


def test_a_deleted_jobs_workload_goes_once_its_pods_do_even_if_the_operator_was_down(
    queued: Queued,
) -> None:
    """Issue 41 (7): a job deleted while its gang runs: the garbage collector deletes its
    Workload, which keeps its quota until the gang's pods are gone, and then goes (no Workload
    stays stuck with our finalizer); with the operator down meanwhile, it goes once the
    operator is back (its Workload watch lists it)."""
    cluster, kubelet, ns = queued.cluster, queued.kubelet, queued.ns
    running_operator = queued.operator
    cq = queued.queues(neuron=32)  # both jobs' gangs at once
    kubelet.plan({}, RUNNING, namespace=ns)
    for job in ("gone", "late"):
        queued.create(job)
        queued.running(1, job)
    (first,) = queued.workloads("gone")
    pods = pods_of(cluster, ns, "gone")
    cluster.kubectl("delete", TJ, "gone", "-n", ns, "--wait=false")
    kept_until_pods_gone(cluster, ns, "gone", first, pods)
    (second,) = queued.workloads("late")
    late_pods = pods_of(cluster, ns, "late")
    running_operator.stop()
    try:
        cluster.kubectl("delete", TJ, "late", "-n", ns, "--wait=false")
        wait_until(lambda: not set(late_pods) & set(pods_of(cluster, ns, "late")),
                   procs.scaled(120), "the deleted job's pods gone")  # fmt: skip
        name = second["metadata"]["name"]
        stuck = workload_body(cluster, ns, name)
        assert stuck is not None and stuck["metadata"].get("deletionTimestamp"), stuck
        assert RESOURCE_IN_USE in stuck["metadata"]["finalizers"], stuck["metadata"]
    finally:
        running_operator.start(timeout=60)
    wait_until(lambda: workload_body(cluster, ns, name) is None, procs.scaled(60),
               "the stuck Workload gone once the operator is back")  # fmt: skip
    queued.wait_released(cq)


def test_a_jobs_workload_counts_its_spares(queued: Queued) -> None:
    """Issue 42: 2 nodes + 1 spare ask Kueue for 3 pods (its pod set counts the spare), so a
    quota of 2 nodes' devices leaves the job pending with Kueue's own words and nothing created
    outside the quota; with 3 nodes' devices Kueue admits it and its gang of 3 pods runs."""
    cluster, kubelet, ns = queued.cluster, queued.kubelet, queued.ns
    per_node = TRN1_32XLARGE.neuron_devices
    cq = queued.queues(neuron=2 * per_node)
    kubelet.plan({}, RUNNING, namespace=ns)
    queued.create("spared", nodes=2, spares=1)
    wl = wait_until(lambda: queued.refused("spared"), procs.scaled(60), "Kueue's refusal")
    assert sum(p["count"] for p in wl["spec"]["podSets"]) == 3, wl["spec"]["podSets"]
    said = condition(wl, "QuotaReserved")["message"]
    assert f"insufficient quota for {NEURON} in flavor {queued.flavor}" in said, said
    print(f"\nnodes 2 + spares 1, quota for 2 nodes: Kueue says {said!r}")

    def quoted() -> Obj | None:
        cond = condition(get(cluster, TJ, "spared", ns), "Running")
        return cond if said in cond.get("message", "") else None

    cond = wait_until(quoted, procs.scaled(60), "the job quoting Kueue's refusal", every=0.5)
    assert cond["reason"] == "WaitingForQuota" and queued.status("spared")["phase"] == "Pending"
    assert children(cluster, VCJOB, ns, "spared") == []
    set_neuron_quota(cluster, cq, 3 * per_node)
    queued.running(3, "spared")
    (wl,) = queued.workloads("spared")
    assert condition(wl, "Admitted").get("status") == "True", wl.get("status")
    usage = sum(int(a["resourceUsage"][NEURON]) for a in wl["status"]["admission"][
        "podSetAssignments"])  # fmt: skip
    assert usage == 3 * per_node, wl["status"]["admission"]
    assert (get(cluster, VCJOB, "spared-train", ns) or {})["spec"]["minAvailable"] == 3
    kubelet.finish(ns)
    wait_condition(cluster, "spared", ns, "Succeeded", timeout=int(procs.scaled(90)))
    queued.wait_released(cq)
