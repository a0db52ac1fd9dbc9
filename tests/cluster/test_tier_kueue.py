"""Issue 33 on a real cluster: real Kueue (v0.19.2) admits TrainiumJobs, real Volcano runs them.

The operator runs under the chart's RBAC (the session's `operator`), Kueue's controller manager
under its own (the module's `kueue` fixture, tests/cluster/kueue.py). A job opts in with the
`kueue.x-k8s.io/queue-name` label; each test has a ClusterQueue of its own that admits only its
namespace, and a LocalQueue `team-a` there. Durations between the steps of an admission are read
from the audit log (each request's own timestamps, microseconds): the operator's share apart
from Kueue's.

Preemption (Kueue evicting an admitted Workload) is not covered here.
"""

from __future__ import annotations

import datetime
import json
import re
import statistics
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

import procs
from cluster import Cluster, wait_until
from conftest import uninstall_kueue
from harness import OperatorProcess
from jobs import (
    REPO,
    TJ,
    VCJOB,
    children,
    condition,
    create,
    fsx_claim,
    get,
    small_job,
    wait_condition,
)
from kubelet import FakeKubelet
from kueue import API, Kueue
from kueue import NAMESPACE as KUEUE_NAMESPACE
from kueuesetup import (
    FLAVOR,
    FLAVOR_LABELS,
    FLAVOR_TOLERATION,
    LOCAL_QUEUE,
    NEURON,
    PRECOMPILE,
    QUEUE_LABEL,
    RUNNING,
    Queued,
    in_queue,
    kueue_job,
    local_queue,
    priority_class,
    queues,
    resource_flavor,
    second_queue,
    set_neuron_quota,
    wait_active,
    workload_of,
    workloads_of,
)
from test_zz_audit import OPERATOR_USER, terminating
from trainium_operator.manifests import dra

Obj = dict[str, Any]
GATED_BY = "kueue.x-k8s.io/admission-gated-by"
KUEUE_USER = "system:serviceaccount:kueue-system:kueue-controller-manager"
#: Jobs timed one after another for BENCHMARKS.md (with the label, and as many without).
BENCH_JOBS = 5
#: Each test starts and ends with Kueue's manager running (kueuesetup.kueue_alive).
pytestmark = pytest.mark.usefixtures("kueue_alive")


@pytest.fixture(scope="module")
def since() -> float:
    """When this module began (epoch seconds), for its own 403 check."""
    return time.time()


# The audit log: when each step of an admission happened, by whom.


def _at(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def audited(cluster: Cluster, namespace: str) -> list[Obj]:
    """The audit log's successful writes in namespace, in the order they were received."""
    out = [
        e
        for e in cluster.audit()
        if (e.get("objectRef") or {}).get("namespace") == namespace
        and e["verb"] in ("create", "patch", "update")
        and (e.get("responseStatus") or {}).get("code", 0) < 300
    ]
    return sorted(out, key=lambda e: e["requestReceivedTimestamp"])


def _write(
    events: list[Obj], user: str, verb: str | None, resource: str, name: str, sub: str = ""
) -> list[Obj]:
    return [
        e
        for e in events
        if e["user"]["username"] == user
        and (verb is None or e["verb"] == verb)
        and e["objectRef"].get("resource") == resource
        and e["objectRef"].get("name") == name
        and e["objectRef"].get("subresource", "") == sub
    ]


def admission_steps(cluster: Cluster, namespace: str, job: str) -> dict[str, float]:
    """Seconds from the job's create to its Workload's create (the operator), from there to
    Kueue's last status write before the gang (Kueue), and from that to the gang's create (the
    operator): each from when one request completed to when the next was received."""
    events = audited(cluster, namespace)
    workload = workload_of(cluster, namespace, job)
    [made] = [e for e in events if e["verb"] == "create"
              and e["objectRef"].get("resource") == "trainiumjobs"
              and e["objectRef"].get("name") == job]  # fmt: skip
    asked = _write(events, OPERATOR_USER, "create", "workloads", workload)[0]
    gang = _write(events, OPERATOR_USER, "create", "jobs", f"{job}-train")[0]
    kueue = [
        e
        for e in _write(events, KUEUE_USER, None, "workloads", workload, "status")
        if e["stageTimestamp"] <= gang["requestReceivedTimestamp"]
    ][-1]
    return {
        "operator_before": _at(asked["requestReceivedTimestamp"]) - _at(made["stageTimestamp"]),
        "kueue": _at(kueue["stageTimestamp"]) - _at(asked["stageTimestamp"]),
        "operator_after": _at(gang["requestReceivedTimestamp"]) - _at(kueue["stageTimestamp"]),
        "total": _at(gang["requestReceivedTimestamp"]) - _at(made["stageTimestamp"]),
    }


def plain_steps(cluster: Cluster, namespace: str, job: str) -> float:
    """Seconds from a job's create to its gang's create (no Kueue)."""
    events = audited(cluster, namespace)
    [made] = [e for e in events if e["verb"] == "create"
              and e["objectRef"].get("resource") == "trainiumjobs"
              and e["objectRef"].get("name") == job]  # fmt: skip
    gang = _write(events, OPERATOR_USER, "create", "jobs", f"{job}-train")[0]
    return _at(gang["requestReceivedTimestamp"]) - _at(made["stageTimestamp"])


# ---------------------------------------------------------------------------------------------


def operator_watches(cluster: Cluster, resource: str, since: float) -> bool:
    """Whether the operator opened a watch of the Kueue resource after `since` (the audit log)."""
    return any(
        e.get("user", {}).get("username") == OPERATOR_USER
        and e["verb"] == "watch"
        and (e.get("objectRef") or {}).get("apiGroup") == "kueue.x-k8s.io"
        and (e.get("objectRef") or {}).get("resource") == resource
        and _at(e["requestReceivedTimestamp"]) >= since
        for e in cluster.audit()
    )


# First in the module: these install Kueue themselves, before the module's `kueue` fixture does
# (and remove it again, CRDs included, as the fixture does at the module's end).
# Strict since issue 41: Kueue's kinds are watched by the operator's own threads, not kopf, so
# a late CRD holds no event of any kind (before, in 1 run of 4 kopf handled no event at all for
# minutes: it holds every event until each indexed kind is listed), and uninstalling Kueue
# stops nothing (kopf exited on the 404 of its watch re-opened on the deleted CRD).
def test_kueue_installed_while_the_operator_runs(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    """Issues 33 and 41 without the tier's workaround: Kueue's CRDs applied while the operator
    runs, no extra CRD event after discovery lists them. The operator watches Workloads (no
    restart), and a Kueue job is admitted and trains."""
    since = time.time()
    process = running_operator.process
    late = Kueue(cluster, settle_discovery=False)
    late.start()
    try:
        cluster.apply(resource_flavor())
        fsx_claim(cluster, ns)
        queues(cluster, ns, FLAVOR, neuron=16)
        create(cluster, kueue_job("late", ns))
        job = wait_condition(cluster, "late", ns, "Succeeded", timeout=int(procs.scaled(120)))
        (wl,) = workloads_of(late, ns, "late")
        assert condition(wl, "Admitted").get("status") == "True", wl.get("status")
        assert condition(wl, "Finished").get("status") == "True", wl.get("status")
        assert job["status"]["phase"] == "Succeeded"
        wait_until(lambda: operator_watches(cluster, "workloads", since), procs.scaled(60),
                   "the operator's watch of Workloads")  # fmt: skip
        assert "not watched" not in running_operator.log()
        assert running_operator.process is process, "the operator was restarted"
    finally:
        uninstall_kueue(late, running_operator)
        gone = f"/api/v1/namespaces/{KUEUE_NAMESPACE}"  # the module's Kueue makes it again
        wait_until(lambda: cluster.api.get(gone) is None, procs.scaled(120), f"{gone} gone")


def test_kueue_uninstalled_while_the_operator_runs(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    """Issue 41: Kueue's CRDs deleted while the operator watches Workloads. The same process
    runs on (before, kopf exited on the 404 of the watch it re-opened), says Kueue's kinds are
    gone, and handles the next job at once."""
    offset = len(running_operator.log())
    late = Kueue(cluster, settle_discovery=False)
    late.start()

    def said(text: str) -> bool:
        return text in running_operator.log()[offset:]

    process = running_operator.process
    try:
        wait_until(lambda: said("workloads.kueue.x-k8s.io are listed and watched now"),
                   procs.scaled(60), "the operator's watch of Workloads")  # fmt: skip
    finally:
        uninstall_kueue(late, running_operator)
        gone = f"/api/v1/namespaces/{KUEUE_NAMESPACE}"
        wait_until(lambda: cluster.api.get(gone) is None, procs.scaled(120), f"{gone} gone")
    wait_until(lambda: said("workloads.kueue.x-k8s.io are not served any more"),
               procs.scaled(60), "the operator seeing Kueue gone")  # fmt: skip
    fsx_claim(cluster, ns)
    create(cluster, small_job("after", ns))
    job = wait_condition(cluster, "after", ns, "Succeeded", timeout=int(procs.scaled(120)))
    assert job["status"]["phase"] == "Succeeded"
    assert running_operator.running and running_operator.process is process, "it restarted"


def test_second_job_waits_for_quota_and_starts_when_the_first_ends(
    queued: Queued, since: float
) -> None:
    """Quota for one gang, two jobs: the second waits with Kueue's words and starts within
    seconds of the first's end; the ClusterQueue holds nothing after both."""
    cluster, kubelet, flavor, ns = queued.cluster, queued.kubelet, queued.flavor, queued.ns
    cq = queued.queues(neuron=16)
    kubelet.plan({}, RUNNING, namespace=ns)
    queued.create("first")
    queued.running(1, "first")
    queued.create("second")

    def waiting() -> Obj | None:
        cond = condition(get(cluster, TJ, "second", ns), "Running")
        said = f"insufficient unused quota for {NEURON} in flavor {flavor}"
        return cond if said in cond.get("message", "") else None

    cond = wait_until(waiting, 60, "Kueue's reason on the second job", every=0.5)
    assert cond["status"] == "False" and cond["reason"] == "WaitingForQuota", cond
    assert (get(cluster, TJ, "second", ns) or {})["status"]["phase"] == "Pending"
    assert children(cluster, VCJOB, ns, "second") == []  # nothing outside the quota
    assert kubelet.finish(ns) == 1  # the first's pod ends
    ended = time.monotonic()
    queued.running(1, "second")
    started = time.monotonic() - ended
    wait_condition(cluster, "first", ns, "Succeeded", timeout=60)
    # Kueue admitted the second once the operator marked the first's Workload Finished.
    events = audited(cluster, ns)
    first_wl, second_wl = (workload_of(cluster, ns, j) for j in ("first", "second"))
    finish = _write(events, OPERATOR_USER, "patch", "workloads", first_wl, "status")[0]
    gang = _write(events, OPERATOR_USER, "create", "jobs", "second-train")[0]
    admitted = [
        e
        for e in _write(events, KUEUE_USER, None, "workloads", second_wl, "status")
        if e["stageTimestamp"] <= gang["requestReceivedTimestamp"]
    ][-1]
    kueue_s = _at(admitted["stageTimestamp"]) - _at(finish["stageTimestamp"])
    operator_s = _at(gang["requestReceivedTimestamp"]) - _at(admitted["stageTimestamp"])
    print(
        f"\nsecond job: its pod ran {started:.2f} s after the first's pod ended; the first's "
        f"Workload Finished -> the second's admitted {kueue_s:.3f} s (Kueue) -> its gang "
        f"created {operator_s:.3f} s (the operator)"
    )
    assert started < procs.scaled(15), started
    kubelet.finish(ns)
    wait_condition(cluster, "second", ns, "Succeeded", timeout=60)
    for job in ("first", "second"):
        (wl,) = queued.workloads(job)
        assert condition(wl, "Finished").get("status") == "True", wl.get("status")
    queued.wait_released(cq, 60)


def test_compile_aware_admission(queued: Queued) -> None:
    """A cache miss: its precompile Workload, Finished before its training Workload is made;
    a job waiting on that compile queues its training Workload behind Kueue's admission gate
    (kueue.x-k8s.io/admission-gated-by: holding nothing, issue 41); once the entry is Ready the
    gate is lifted and it (a hit) trains under that Workload."""
    cluster, kubelet, ns = queued.cluster, queued.kubelet, queued.ns
    queued.queues(neuron=64)
    kubelet.plan(PRECOMPILE, RUNNING, namespace=ns)
    spec: Obj = {"precompile": {"policy": "IfNotCached"}, "cache": {"name": "shared"}}
    queued.create("miss", **spec)
    queued.running(1, "miss")  # its compile gang, admitted
    [compile_wl] = queued.workloads("miss")
    compile_name = workload_of(cluster, ns, "miss", "precompile")
    assert compile_wl["metadata"]["name"] == compile_name and compile_name.endswith("-compile")
    assert condition(compile_wl, "Admitted").get("status") == "True"
    assert compile_wl["spec"]["podSets"][0]["name"] == "compile"

    queued.create("waiter", **spec)
    wait_until(
        lambda: (
            (get(cluster, TJ, "waiter", ns) or {}).get("status", {}).get("phase")
            == "WaitingForCache"
        ),
        60,
        "the second job to wait for the first's compile",
    )
    for poke in range(3):  # a few more passes of the waiter (nothing else wakes it now)
        passes = queued.operator.passes()
        cluster.kubectl("annotate", TJ, "waiter", "-n", ns, "--overwrite",
                        f"tier.trainium.dev/poke={poke}")  # fmt: skip
        wait_until(lambda n=passes: queued.operator.passes() > n, procs.scaled(30), "a pass")

    def gated() -> Obj | None:  # in the queue, gated, holding nothing
        found = queued.workloads("waiter")
        reserved = condition(found[0] if found else None, "QuotaReserved")
        return found[0] if len(found) == 1 and reserved.get("reason") == "AdmissionGated" else None

    waiting = wait_until(gated, procs.scaled(30), "the waiter's Workload gated by Kueue")
    assert waiting["metadata"]["name"] == workload_of(cluster, ns, "waiter")
    assert waiting["metadata"]["annotations"][GATED_BY] == "trainium.dev/compile-cache"
    assert not (waiting.get("status") or {}).get("admission"), waiting["status"]
    assert (get(cluster, TJ, "waiter", ns) or {})["status"]["phase"] == "WaitingForCache"

    kubelet.finish(ns)  # the compile ends; training runs 1 s and exits 0
    miss = wait_condition(cluster, "miss", ns, "Succeeded", timeout=120)
    waiter = wait_condition(cluster, "waiter", ns, "Succeeded", timeout=120)
    assert miss["status"]["cache"]["outcome"] == "miss"
    assert waiter["status"]["cache"]["outcome"] == "hit"
    names = [w["metadata"]["name"] for w in queued.workloads("miss")]
    train_name = workload_of(cluster, ns, "miss")
    assert names == [compile_name, train_name]
    assert [w["metadata"]["name"] for w in queued.workloads("waiter")] == [
        workload_of(cluster, ns, "waiter")
    ]
    # One after the other: the compile's Workload was Finished before the training one was made.
    events = audited(cluster, ns)
    finished = _write(events, OPERATOR_USER, "patch", "workloads", compile_name, "status")
    made = _write(events, OPERATOR_USER, "create", "workloads", train_name)
    assert finished and made
    assert finished[0]["stageTimestamp"] <= made[0]["requestReceivedTimestamp"]
    for wl in queued.kueue.workloads(ns):
        assert condition(wl, "Finished").get("status") == "True", wl["metadata"]["name"]


def test_the_flavor_reaches_the_gang_pods(queued: Queued) -> None:
    """The admitted ResourceFlavor's nodeLabels and toleration are on every pod of the gang,
    and the pods carry no queue-name label (Kueue's pod integration leaves them alone)."""
    cluster, kubelet, flavor, ns = queued.cluster, queued.kubelet, queued.flavor, queued.ns
    queued.queues(neuron=32)
    kubelet.plan({}, RUNNING, namespace=ns)
    queued.create("placed", nodes=2)
    queued.running(2, "placed")
    (wl,) = queued.workloads("placed")
    (assignment,) = wl["status"]["admission"]["podSetAssignments"]
    assert assignment["flavors"][NEURON] == flavor and assignment["count"] == 2
    pods = cluster.api.get(f"/api/v1/namespaces/{ns}/pods") or {}
    assert len(pods["items"]) == 2
    for pod in pods["items"]:
        selector = pod["spec"].get("nodeSelector") or {}
        assert FLAVOR_LABELS.items() <= selector.items(), selector
        assert FLAVOR_TOLERATION in pod["spec"].get("tolerations", []), pod["spec"]
        assert pod["spec"].get("nodeName"), "bound by Volcano"
        assert QUEUE_LABEL not in (pod["metadata"].get("labels") or {})
    kubelet.finish(ns)
    wait_condition(cluster, "placed", ns, "Succeeded", timeout=60)


def test_the_priority_class_label_sets_the_workload_priority(queued: Queued) -> None:
    """kueue.x-k8s.io/priority-class: the WorkloadPriorityClass's value on the Workload, as
    Kueue's own webhooks and schema accept it; admitted and run."""
    cluster, ns = queued.cluster, queued.ns
    queued.queues(neuron=16)
    wpc = f"high-{ns}"[:63]
    cluster.apply(priority_class(wpc, 1000))
    create(cluster, in_queue(small_job("urgent", ns), wpc))
    wait_condition(cluster, "urgent", ns, "Succeeded", timeout=120)
    (wl,) = queued.workloads("urgent")
    assert wl["spec"]["priority"] == 1000, wl["spec"]
    assert wl["spec"]["priorityClassRef"]["name"] == wpc
    assert condition(wl, "Admitted").get("status") == "True"


def test_a_dra_jobs_workload_counts_its_neuron_devices(queued: Queued) -> None:
    """Issue 41: a `devices: dra` gang's pods claim their Neuron devices, they request none, so
    Kueue admitted it on EFA alone. Its pod set carries the claims now, and Kueue's DRA
    integration (the tier maps DeviceClass neuron.aws.com to aws.amazon.com/neuron, as README
    says) counts them: 8 devices of quota hold back a trn2.48xlarge node's 16, 16 admit it.
    (On main the Workload was admitted at once, its usage without aws.amazon.com/neuron.)"""
    cluster, ns = queued.cluster, queued.ns
    # What the Neuron DRA driver publishes (the tier has no driver): its DeviceClass and one
    # trn2.48xlarge node's 16 devices. Kueue reads both to count a claim with selectors.
    selector = {"cel": {"expression": f"device.driver == '{dra.DRIVER}'"}}
    devices = [{"name": f"neuron-{i}", "attributes": {"instanceType": {"string": "trn2.48xlarge"}}}
               for i in range(16)]  # fmt: skip
    cluster.apply(
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
         "metadata": {"name": dra.DEVICE_CLASS}, "spec": {"selectors": [selector]}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
         "metadata": {"name": f"neuron-{ns}"[:63]},
         "spec": {"driver": dra.DRIVER, "allNodes": True, "devices": devices,
                  "pool": {"name": ns, "generation": 1, "resourceSliceCount": 1}}},
    )  # fmt: skip
    try:
        _dra_job_counted(queued)
    finally:
        cluster.kubectl("delete", "deviceclass", dra.DEVICE_CLASS, "--ignore-not-found",
                        check=False)  # fmt: skip
        cluster.kubectl("delete", "resourceslice", f"neuron-{ns}"[:63], "--ignore-not-found",
                        check=False)  # fmt: skip


def _dra_job_counted(queued: Queued) -> None:
    cq = queued.queues(neuron=8, efa=16)
    queued.create("dra", devices="dra", instanceType="trn2.48xlarge")

    def held() -> Obj | None:
        found = queued.workloads("dra")
        return found[0] if found and condition(found[0], "QuotaReserved") else None

    wl = wait_until(held, procs.scaled(60), "Kueue's verdict on the DRA Workload")
    refusal = condition(wl, "QuotaReserved")
    assert refusal.get("status") == "False" and NEURON in refusal.get("message", ""), refusal
    assert condition(wl, "Admitted").get("status") != "True"
    set_neuron_quota(queued.cluster, cq, 16)  # and EFA 16, as it was

    def admitted() -> Obj | None:
        found = queued.workloads("dra")
        return found[0] if found and condition(found[0], "Admitted").get("status") == "True" \
            else None  # fmt: skip

    wl = wait_until(admitted, procs.scaled(60), "the DRA Workload admitted")
    (assignment,) = wl["status"]["admission"]["podSetAssignments"]
    assert str(assignment["resourceUsage"][NEURON]) == "16", assignment
    queued.cluster.kubectl("delete", "trainiumjob", "dra", "-n", queued.ns, "--wait=false")


def relabel(cluster: Cluster, ns: str, job: str, value: str) -> subprocess.CompletedProcess[str]:
    """Set the job's queue-name label to `value` ("": remove it); the kubectl run."""
    change = f"{QUEUE_LABEL}-" if value == "" else f"{QUEUE_LABEL}={value}"
    return cluster.kubectl("label", "--overwrite", f"{TJ}/{job}", "-n", ns, change, check=False)


def test_the_queue_label_moves_a_waiting_job_and_is_kept_while_it_runs(queued: Queued) -> None:
    """Issue 41, item 4: the label changed while the job waits moves its Workload to the new
    LocalQueue (on main it stayed in the old one), and the job then quotes the new
    ClusterQueue's refusal (it quoted the old one's); the chart's admission policy refuses
    removing it from a waiting job (on main its gang started at once outside the quota) and
    changing or removing it once the gang runs, as Kueue's webhook does for its own jobs."""
    cluster, kubelet, ns = queued.cluster, queued.kubelet, queued.ns
    queued.queues(neuron=0)  # team-a: no Neuron quota, the job waits there
    other = second_queue(cluster, ns, queued.flavor, neuron=8)  # team-b: too little at first
    kubelet.plan({}, RUNNING, namespace=ns)
    queued.create("mover")
    first = wait_until(lambda: queued.refused("mover"), procs.scaled(60),
                       "Kueue's refusal in LocalQueue team-a")  # fmt: skip
    out = relabel(cluster, ns, "mover", "")
    assert out.returncode != 0 and "cannot be removed while the job is waiting" in out.stderr, out
    assert relabel(cluster, ns, "mover", "team-b").returncode == 0

    def quoted() -> str | None:
        found = queued.refused("mover")
        if found is None or found["spec"]["queueName"] != "team-b":
            return None
        said = condition(found, "QuotaReserved")["message"]
        cond = condition(get(cluster, TJ, "mover", ns), "Running")
        return cond["message"] if said in cond.get("message", "") else None

    message = wait_until(quoted, procs.scaled(60), "the job quoting team-b's ClusterQueue")
    assert "LocalQueue 'team-b'" in message, message
    assert condition(first, "QuotaReserved")["message"] not in message, (first, message)
    assert children(cluster, VCJOB, ns, "mover") == []
    set_neuron_quota(cluster, other, 16)
    queued.running(1, "mover")
    (wl,) = queued.workloads("mover")
    assert wl["spec"]["queueName"] == "team-b", wl["spec"]
    assert condition(wl, "Admitted").get("status") == "True", wl.get("status")
    wait_until(lambda: (get(cluster, TJ, "mover", ns) or {}).get("status", {}).get("phase")
               == "Training", procs.scaled(60), "the job Training")  # fmt: skip
    for value, said in (("team-a", "cannot be changed"), ("", "cannot be removed")):
        out = relabel(cluster, ns, "mover", value)
        assert out.returncode != 0 and said in out.stderr and "Training" in out.stderr, out
    kubelet.finish(ns)
    wait_condition(cluster, "mover", ns, "Succeeded", timeout=int(procs.scaled(60)))


#: The chart's ValidatingAdmissionPolicyBinding of the queue-name label (kueue.guardQueueLabel).
LABEL_POLICY = "validatingadmissionpolicybinding/trainiumjobs.trainium.dev-queue-name"


@pytest.fixture
def without_label_policy(cluster: Cluster) -> Iterator[None]:
    """The chart's queue-label policy unbound for one test (as with kueue.guardQueueLabel
    false, or Kubernetes < 1.30), bound again after it."""
    found = json.loads(cluster.kubectl("get", LABEL_POLICY, "-o", "json").stdout)
    cluster.kubectl("delete", LABEL_POLICY)
    try:
        yield
    finally:
        md = found["metadata"]
        keep = {k: md[k] for k in ("name", "labels", "annotations") if md.get(k)}
        cluster.apply({"apiVersion": found["apiVersion"], "kind": found["kind"],
                       "metadata": keep, "spec": found["spec"]})  # fmt: skip


def test_a_waiting_job_that_loses_the_label_stays_in_its_queue(
    queued: Queued, without_label_policy: None
) -> None:
    """Issue 41, item 4, without the chart's policy: a job that waited for quota and then
    lost its queue-name label starts no gang outside the quota (on main its gang started at
    once, its Workload left behind): it stays in the LocalQueue its Workload names, says so
    (QueueNameRemoved, a Warning), and starts once Kueue admits that Workload."""
    cluster, kubelet, ns = queued.cluster, queued.kubelet, queued.ns
    cq = queued.queues(neuron=0)  # no Neuron quota: the job waits
    kubelet.plan({}, RUNNING, namespace=ns)
    queued.create("keeper")
    wait_until(lambda: queued.refused("keeper"), procs.scaled(60), "Kueue's refusal")
    wait_until(lambda: relabel(cluster, ns, "keeper", "").returncode == 0, procs.scaled(30),
               "the label removed (the unbound policy refusing no more)")  # fmt: skip

    def kept() -> Obj | None:
        cond = condition(get(cluster, TJ, "keeper", ns), "Running")
        return cond if cond.get("reason") == "QueueNameRemoved" else None

    cond = wait_until(kept, procs.scaled(60), "QueueNameRemoved on the job", every=0.5)
    assert f"LocalQueue '{LOCAL_QUEUE}'" in cond["message"], cond
    job = get(cluster, TJ, "keeper", ns) or {}
    assert QUEUE_LABEL not in (job["metadata"].get("labels") or {}), job["metadata"]
    assert job["status"]["phase"] == "Pending", job["status"]
    assert children(cluster, VCJOB, ns, "keeper") == []
    assert [w["spec"]["queueName"] for w in queued.workloads("keeper")] == [LOCAL_QUEUE]
    warned = cluster.kubectl("get", "events", "-n", ns, "-o", "json").stdout
    assert "QueueNameRemoved" in warned
    set_neuron_quota(cluster, cq, 16)  # Kueue admits it: the gang starts inside the quota
    queued.running(1, "keeper")
    (wl,) = queued.workloads("keeper")
    assert condition(wl, "Admitted").get("status") == "True", wl.get("status")
    kubelet.finish(ns)
    wait_condition(cluster, "keeper", ns, "Succeeded", timeout=int(procs.scaled(60)))
    queued.wait_released(cq)


def test_a_job_without_the_label_is_left_alone(queued: Queued) -> None:
    """Kueue running, a LocalQueue in the namespace, no label: no Workload, it runs as today."""
    cluster, kueue, ns = queued.cluster, queued.kueue, queued.ns
    queued.queues(neuron=16)
    create(cluster, small_job("plain", ns))
    job = wait_condition(cluster, "plain", ns, "Succeeded", timeout=120)
    assert kueue.workloads(ns) == []
    assert condition(job, "Running").get("reason") != "WaitingForQuota"


def test_a_missing_local_queue_is_named_and_the_job_starts_once_it_exists(queued: Queued) -> None:
    """The label names a LocalQueue not (yet) in the namespace: the job says so and waits;
    created, Kueue admits the Workload and the gang starts."""
    cluster, ns = queued.cluster, queued.ns
    cq = queued.queues(neuron=16)
    body = kueue_job("early", ns)
    body["metadata"]["labels"][QUEUE_LABEL] = "team-b"
    create(cluster, body)

    def named() -> Obj | None:
        cond = condition(get(cluster, TJ, "early", ns), "Running")
        return cond if cond.get("reason") == "LocalQueueNotFound" else None

    cond = wait_until(named, 60, "LocalQueueNotFound on the job", every=0.5)
    assert "LocalQueue 'team-b'" in cond["message"], cond
    assert children(cluster, VCJOB, ns, "early") == []
    cluster.apply(local_queue("team-b", ns, cq))
    wait_condition(cluster, "early", ns, "Succeeded", timeout=120)


def test_admission_time_between_create_and_gang(queued: Queued) -> None:
    """BENCHMARKS.md: jobs one at a time, with the label and without; the operator's share of
    create -> gang with Kueue (its two steps) against Kueue's own decision."""
    cluster, ns = queued.cluster, queued.ns
    queued.queues(neuron=16)
    with_kueue: list[dict[str, float]] = []
    without: list[float] = []
    for i in range(BENCH_JOBS):
        for name, body in ((f"q{i}", kueue_job(f"q{i}", ns)), (f"p{i}", small_job(f"p{i}", ns))):
            create(cluster, body)
            wait_condition(cluster, name, ns, "Succeeded", timeout=120)
        with_kueue.append(admission_steps(cluster, ns, f"q{i}"))
        without.append(plain_steps(cluster, ns, f"p{i}"))

    def med(key: str) -> float:
        return statistics.median(s[key] for s in with_kueue)

    operator = [s["operator_before"] + s["operator_after"] for s in with_kueue]
    print(
        f"\nKueue admission, {BENCH_JOBS} jobs one at a time (median s): create->gang "
        f"{med('total'):.3f} with the label, {statistics.median(without):.3f} without; "
        f"operator {med('operator_before'):.3f} (create->Workload) + "
        f"{med('operator_after'):.3f} (admitted->gang) = {statistics.median(operator):.3f}, "
        f"Kueue {med('kueue'):.3f} (Workload->admitted); max operator {max(operator):.3f}"
    )
    for i, s in enumerate(with_kueue):
        print(f"  q{i}: " + ", ".join(f"{k} {v:.3f}" for k, v in s.items())
              + f"; p{i}: total {without[i]:.3f}")  # fmt: skip
    assert statistics.median(operator) <= procs.scaled(1.0), with_kueue


def test_readme_kueue_objects_pass_kueue_validation(cluster: Cluster, kueue: Kueue) -> None:
    """README's "Quota with Kueue" YAML, as a user applies it: Kueue's schema and webhooks
    accept every object (server-side dry run)."""
    text = (REPO / "README.md").read_text()
    section = text.split("## Quota with Kueue", 1)[1].split("\n## ", 1)[0]
    docs = [
        d
        for block in re.findall(r"```yaml\n(.*?)```", section, flags=re.S)
        for d in yaml.safe_load_all(block)
        if d
    ]
    assert docs, "README's Quota with Kueue section has no YAML"
    for doc in docs:
        if doc["kind"] == "Namespace":  # a dry run creates none: its objects go to default
            continue
        if "namespace" in doc["metadata"]:
            doc["metadata"]["namespace"] = "default"
        proc = cluster.kubectl("create", "--dry-run=server", "-f", "-", stdin=json.dumps(doc),
                               check=False)  # fmt: skip
        assert proc.returncode == 0, f"{doc['kind']} {doc['metadata']['name']}: {proc.stderr}"


def test_no_request_was_refused_with_kueue(
    cluster: Cluster, kueue: Kueue, operator: OperatorProcess, since: float
) -> None:
    """0 x 403 for the operator's token (the chart's RBAC) and for Kueue's (its own) over this
    module."""
    refused: dict[str, set[str]] = {OPERATOR_USER: set(), KUEUE_USER: set()}
    for e in cluster.audit():
        user = e.get("user", {}).get("username")
        if user not in refused or _at(e["requestReceivedTimestamp"]) < since:
            continue
        forbid = e.get("annotations", {}).get("authorization.k8s.io/decision") == "forbid"
        if forbid or ((e.get("responseStatus") or {}).get("code") == 403 and not terminating(e)):
            refused[user].add(f"{e['verb']} {e['requestURI']}")
    assert refused == {OPERATOR_USER: set(), KUEUE_USER: set()}


def test_readme_kueue_setup_runs_the_kueue_example_to_succeeded(
    cluster: Cluster,
    kubelet: FakeKubelet,
    kueue: Kueue,
    flavor: str,
    running_operator: OperatorProcess,
) -> None:
    """README's set-up as a user applies it (`kubectl apply -f examples/kueue-setup.yaml`:
    namespace, ResourceFlavor, ClusterQueue, LocalQueue, WorkloadPriorityClass), then
    examples/kueue-bert.yaml as written (its claim made first): compiled and trained under the
    quota to Succeeded (issue 43, item 4: it waited on WorkloadPriorityClassNotFound)."""
    setup = REPO / "examples" / "kueue-setup.yaml"
    job = yaml.safe_load((REPO / "examples" / "kueue-bert.yaml").read_text())
    name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
    cluster.kubectl("apply", "-f", str(setup))
    try:
        wait_active(cluster, f"{API}/clusterqueues/team-a",
                    f"{API}/namespaces/{ns}/localqueues/team-a")  # fmt: skip
        fsx_claim(cluster, ns)
        create(cluster, job)
        done = wait_condition(cluster, name, ns, "Succeeded", timeout=int(procs.scaled(180)))
        assert done["status"]["cache"]["outcome"] == "miss"
        wls = workloads_of(kueue, ns, name)  # named with the job's uid (issue 41): by stage
        stages = sorted(w["metadata"]["labels"]["trainium.dev/stage"] for w in wls)
        assert stages == ["precompile", "train"], [w["metadata"]["name"] for w in wls]
        for wl in wls:
            assert wl["spec"]["priority"] == 1000 and condition(wl, "Admitted")["status"] == "True"
        # README's `kubectl get tj` samples: a job that is not elastic leaves SIZE blank.
        header, row = cluster.kubectl("get", TJ, name, "-n", ns).stdout.splitlines()
        at = header.index("SIZE")
        assert row[at : at + 4].strip() == "", (header, row)
    finally:
        cluster.kubectl("delete", TJ, name, "-n", ns, "--ignore-not-found", check=False)
        cluster.kubectl("delete", "-f", str(setup), "--wait=false", "--ignore-not-found",
                        check=False)  # fmt: skip
        kubelet.forget(ns)
