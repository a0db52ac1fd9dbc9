"""The chart's RBAC is exact, checked both ways against the operator's recorded requests: every
request the operator made in this e2e session is allowed, and every verb the chart grants the
operator was used by some request (or is in ALLOWED_UNUSED, with the reason).

Named test_zz_ so it runs after the other e2e tests and sees their requests too. It also drives
jobs of its own through every path that needs a granted verb (precompile, cache record, static
FSx PV and claim, training, a FailedCreate look, a deleted Node's pod, a renamed gang, TTL
deletion, the FSx PV's sweep), so it can never pass vacuously and works when run alone.

When the operator starts a new kind of request, add the rule to
charts/trainium-operator/templates/_rbac_rules.tpl; when it stops, remove the verb there (or, if
real clusters still need it, list it in ALLOWED_UNUSED and say why).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_kueue_e2e as kueue
from test_admission_e2e import failed_create, reason_is
from test_elastic_e2e import node
from test_gang_failures import gang_pod, terminated
from test_node_gone_e2e import running_pod
from test_operator_e2e import claim
from test_run_policy import set_suspend

from harness import (
    OPERATOR_COMMAND,
    EmulatorServer,
    OperatorProcess,
    apply,
    get,
    kubectl,
    simulate_vcjob_phase,
    train_gang,
    wait_for,
)
from helmchart import helm_bin, render  # noqa: F401  (helm_bin is a fixture)
from k8s_semantics import ApiRequest
from rbac import Subject, allows, denied, grants, rule_allows
from trainium_operator.api import naming
from trainium_operator.manifests.ownership import LABEL_MANAGED_BY, MANAGED_BY

NS = "rbac-coverage"
TJ = "trainiumjobs.v1alpha1.trainium.dev"
VCJOBS = "batch.volcano.sh/v1alpha1/jobs"
CLAIM_TEMPLATES = "resource.k8s.io/v1/resourceclaimtemplates"
# Requests from the operator process: kopf's own client and the operator's kubernetes client,
# which sends its own User-Agent (kubectl and in-process test clients are someone else).
OPERATOR_CLIENTS = {"kopf", "trainium-operator"}
CLUSTER_SCOPED = {"persistentvolumes", "queues", "customresourcedefinitions", "namespaces",
                  "nodes"}  # fmt: skip
#: The user agent our own watches' client sends (cluster/k8s.side_client("watch")).
OWN_WATCH = "(watch)"
SUBJECT = Subject("t-trainium-operator", "ops")  # what render() names the ServiceAccount
Obj = dict[str, Any]
#: Granted to the operator but used by no request of this session: (verb, group, resource) and
#: why the grant stays. Keep it short; every entry is a verb a test cannot show is needed.
ALLOWED_UNUSED: dict[tuple[str, str, str], str] = {
    ("patch", "batch.volcano.sh", "jobs"): (
        "a spare swap (spec.spares) lowers a restarting gang's minAvailable: it needs Volcano's "
        "job controller and a lost Node, so tests/cluster/test_tier_spares.py drives it"
    ),
}


def tj(name: str, storage: Obj, **spec: Any) -> Obj:
    return {
        "apiVersion": "trainium.dev/v1alpha1",
        "kind": "TrainiumJob",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "image": "123456789012.dkr.ecr.us-west-2.amazonaws.com/trainer:1.0",
            "args": ["bert-pretrain", "--data-dir", "/data/bert"],
            "instanceType": "trn1.32xlarge",
            "nodes": 2,
            "storage": storage,
            "cache": {"name": f"{name}-cache"},
            "scheduling": {"queue": NS},
            **spec,
        },
    }


def phase(name: str) -> str | None:
    return ((get(TJ, name, NS) or {}).get("status") or {}).get("phase")


def gets(api_requests: list[ApiRequest], resource: str, since: int = 0) -> bool:
    """Whether the operator GET an object of resource (after request number `since`)."""
    return any(r.verb == "get" and r.resource == resource and r.client == "trainium-operator"
               for r in api_requests[since:])  # fmt: skip


def queue_a_job_through_kueue(k8s: EmulatorServer, api_requests: list[ApiRequest]) -> None:
    """A job with Kueue's labels: its Workload created, admitted on a flavor, evicted and
    requeued, admitted again, suspended (deactivated) and resumed, Finished (issue 33);
    backstop passes GET the Workload and the flavor while the gang runs."""
    for plural in kueue.PLURALS:
        apply(kueue.kueue_crd(plural))
        kubectl("wait", "--for=condition=Established", f"crd/{plural}.kueue.x-k8s.io")
    apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": f"{NS}-trn1"},
            "spec": {"nodeLabels": {"pool": "a"}},
        }
    )
    apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "team", "namespace": NS},
            "spec": {"clusterQueue": "cq"},
        }
    )
    apply({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
           "metadata": {"name": f"{NS}-prod"}, "value": 10})  # fmt: skip
    body = tj("queued", {"claimName": "shared"}, scheduling={"queue": NS},
              precompile={"policy": "Never"})  # fmt: skip
    body["metadata"]["labels"] = {kueue.Q_LABEL: "team", kueue.P_LABEL: f"{NS}-prod"}
    apply(body)
    name = kueue.wl_name(k8s, NS, "queued")
    wait_for(lambda: k8s.get(kueue.WORKLOADS, NS, name), timeout=20, what="its Workload")
    wait_for(lambda: gets(api_requests, "localqueues"), timeout=20, what="a GET of its LocalQueue")
    flavor = {"aws.amazon.com/neuron": f"{NS}-trn1"}
    admitted = [kueue.cond("QuotaReserved", "True", "QuotaReserved"),
                kueue.cond("Admitted", "True", "Admitted")]  # fmt: skip
    admission = {"clusterQueue": "cq", "podSetAssignments": [{"name": "train", "count": 2,
                                                              "flavors": flavor}]}  # fmt: skip
    kueue.kueue_applies(NS, name, {"conditions": admitted, "admission": admission})
    wait_for(lambda: k8s.get(VCJOBS, NS, "queued-train"), timeout=20, what="its gang, admitted")
    simulate_vcjob_phase(NS, "queued-train", "Running")
    seen = len(api_requests)
    for resource in ("workloads", "resourceflavors"):
        wait_for(lambda: gets(api_requests, resource, seen), timeout=20,  # noqa: B023
                 what=f"a backstop's GET of {resource}")  # fmt: skip
    # Kueue evicts it: the gang stops, the Workload is requeued (its status applied), and it
    # runs again once admitted again.
    evicted = [*admitted, kueue.cond("Evicted", "True", "Preempted", "to admit a higher one")]
    kueue.kueue_applies(NS, name, {"conditions": evicted, "admission": admission})
    wait_for(lambda: "admission" not in (k8s.get(kueue.WORKLOADS, NS, name) or {})["status"],
             timeout=20, what="its Workload requeued")  # fmt: skip
    again = [*admitted, kueue.cond("Evicted", "False", "QuotaReserved")]
    kueue.kueue_applies(NS, name, {"conditions": again, "admission": admission})
    wait_for(lambda: k8s.get(VCJOBS, NS, "queued-train"), timeout=20, what="its gang again")
    # Suspended, its Workload is deactivated (patch); resumed, activated: the gang comes back.
    for suspend in (True, False):
        set_suspend(NS, "queued", suspend)
        wait_for(lambda: (k8s.get(kueue.WORKLOADS, NS, name) or {}).get("spec", {}).get("active")
                 is not suspend, timeout=20, what=f"its Workload active={not suspend}")  # noqa: B023  # fmt: skip
    wait_for(lambda: k8s.get(VCJOBS, NS, "queued-train"), timeout=20, what="its gang resumed")
    simulate_vcjob_phase(NS, "queued-train", "Completed")
    wait_for(lambda: phase("queued") == "Succeeded", timeout=20, what="queued Succeeded")

    def finished() -> bool:
        conds = ((k8s.get(kueue.WORKLOADS, NS, name) or {}).get("status") or {}).get("conditions")
        return "Finished" in {c["type"] for c in conds or []}

    wait_for(finished, timeout=20, what="its Workload Finished")


def run_to_success(
    k8s: EmulatorServer, name: str, backstop: list[ApiRequest] | None = None
) -> None:
    """Play Volcano for both stages of one job and wait until the operator says Succeeded.

    `backstop`: the recorded requests; each stage runs until a backstop pass (1 s here) GETs
    what the watches show the job (its Volcano job, its cache lease or record).
    """
    looked = {"compile": ("jobs", "leases"), "train": ("jobs", "configmaps")}
    for stage in ("compile", "train"):
        vcjob = f"{name}-{stage}"
        wait_for(lambda: k8s.get(VCJOBS, NS, vcjob), timeout=20, what=f"vcjob {vcjob}")  # noqa: B023
        simulate_vcjob_phase(NS, vcjob, "Running")
        for resource in looked[stage] if backstop is not None else ():
            seen = len(backstop or [])
            wait_for(lambda: any(r.verb == "get" and r.resource == resource  # noqa: B023
                                 and r.client == "trainium-operator"
                                 for r in (backstop or [])[seen:]),  # noqa: B023
                     timeout=20, what=f"a backstop's GET of {resource} in {stage}")  # fmt: skip
        simulate_vcjob_phase(NS, vcjob, "Completed")
    wait_for(lambda: phase(name) == "Succeeded", timeout=20, what=f"{name} Succeeded")


def drive_operator(k8s: EmulatorServer, api_requests: list[ApiRequest]) -> None:
    apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    apply({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
           "metadata": {"name": NS}, "spec": {"weight": 1}})  # fmt: skip
    claim(NS, "shared")  # with its StorageClass, so it binds when this module runs alone too
    apply({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
           "metadata": {"name": f"{NS}-high"}, "value": 1000})  # fmt: skip
    hold_a_gang_without_pods(k8s)  # first: its Events' first look is 15 s after its gang
    apply(tj("claimed", {"claimName": "shared"},
             scheduling={"queue": NS, "priorityClassName": f"{NS}-high"}))  # fmt: skip
    run_to_success(k8s, "claimed", api_requests)
    # Names given, so no AWS call: the operator creates the static PV and its claim itself.
    fs_id = "fs-0123456789abcdef0"
    fsx = {"fileSystemId": fs_id, "dnsName": f"{fs_id}.fsx.us-west-2.amazonaws.com",
           "mountName": "abcdefgh"}  # fmt: skip
    leak_volume(k8s, "fsx", fs_id)  # an earlier operator's: repaired, not created
    apply(tj("fsx", {"fsx": fsx}))
    run_to_success(k8s, "fsx")
    # Jobs waiting (for a PriorityClass; for a claim to bind) are re-checked by the backstop (1 s
    # here), and those passes GET what the watches show them, to heal a ghost: every kind a pass
    # reads (never what the watches show absent: issue 26).
    later = f"{NS}-later"
    apply(tj("waiting", {"fsx": fsx}, scheduling={"queue": NS, "priorityClassName": later}))
    apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": "unbound", "namespace": NS},
           "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "none-such",
                    "resources": {"requests": {"storage": "1Gi"}}}})  # fmt: skip
    apply(tj("unbound", {"claimName": "unbound"},
             scheduling={"queue": NS, "priorityClassName": f"{NS}-high"}))  # fmt: skip
    for resource, name in (("queues", NS), ("priorityclasses", f"{NS}-high")):
        wait_for(lambda: any(r.verb == "get" and r.resource == resource and r.name == name  # noqa: B023
                             and r.client == "trainium-operator" for r in api_requests),
                 timeout=20, what=f"a backstop pass's GET of {resource}/{name}")  # fmt: skip
    kubectl("delete", TJ, "unbound", "-n", NS, "--wait=false")
    apply({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
           "metadata": {"name": later}, "value": 10})  # fmt: skip
    run_to_success(k8s, "waiting")
    kubectl("delete", TJ, "fsx", "-n", NS, "--wait=false")
    wait_for(lambda: get(TJ, "fsx", NS) is None, timeout=20, what="fsx job deleted")
    # The PV the operator made for its job is swept with it (the leaked one above is no job's).
    kubectl("delete", TJ, "waiting", "-n", NS, "--wait=false")
    volume = naming.volume_name(NS, "waiting")
    wait_for(lambda: k8s.get("v1/persistentvolumes", None, volume) is None, timeout=20,
             what="the waiting job's FSx PV swept")  # fmt: skip
    share_one_cache_entry(k8s)
    stop_an_oom_killed_gang(k8s)
    queue_a_job_through_kueue(k8s, api_requests)
    shrink_an_elastic_gang(k8s, api_requests)  # under Kueue: its Workload's CRD is there
    claim_devices_through_dra(k8s)
    reap_the_pod_of_a_deleted_node(k8s)
    rename_a_gang_whose_name_is_held(k8s)
    # runPolicy.ttlSecondsAfterFinished: the operator deletes the finished job itself.
    apply(tj("ttl", {"claimName": "shared"}, runPolicy={"ttlSecondsAfterFinished": 0}))
    for stage in ("compile", "train"):
        vcjob = f"ttl-{stage}"
        wait_for(lambda: k8s.get(VCJOBS, NS, vcjob), timeout=20, what=f"vcjob {vcjob}")  # noqa: B023
        simulate_vcjob_phase(NS, vcjob, "Completed")
    wait_for(lambda: get(TJ, "ttl", NS) is None, timeout=20, what="ttl job deleted by the operator")
    wait_for(lambda: reason_is(NS, "podless", "FailedCreate"), timeout=40,
             what="podless's FailedCreate, from the first look at its gang's Events")  # fmt: skip


def hold_a_gang_without_pods(k8s: EmulatorServer) -> None:
    """A gang Volcano cannot create pods for (its FailedCreate Event): the operator lists its
    Events at the first look, 15 s after the gang's creation (the caller waits for it last)."""
    apply(tj("podless", {"claimName": "shared"}, precompile={"policy": "Never"}))
    failed_create(wait_for(lambda: k8s.get(VCJOBS, NS, "podless-train"), timeout=20,
                           what="podless-train"))  # fmt: skip


def reap_the_pod_of_a_deleted_node(k8s: EmulatorServer) -> None:
    """A gang pod whose Node is deleted: the operator confirms the Node is gone (GET), marks the
    pod Failed (status patch) and deletes it, as PodGC would."""
    gone = f"{NS}-gone"
    apply(node(gone, NS))
    apply(tj("stranded", {"claimName": "shared"}, precompile={"policy": "Never"}))
    wait_for(lambda: k8s.get(VCJOBS, NS, "stranded-train"), timeout=20, what="stranded-train")
    simulate_vcjob_phase(NS, "stranded-train", "Running")
    pod = running_pod(k8s, NS, "stranded", 0, gone)["metadata"]["name"]
    kubectl("delete", "node", gone)
    wait_for(lambda: k8s.get("v1/pods", NS, pod) is None, timeout=20,
             what="the pod of the deleted node removed")  # fmt: skip
    kubectl("delete", TJ, "stranded", "-n", NS, "--wait=false")


def rename_a_gang_whose_name_is_held(k8s: EmulatorServer) -> None:
    """A finished job deleted with --cascade=orphan and applied again: its old gang holds the
    name, so the new job's gang gets a fresh one, kept on the job's annotation (a patch)."""
    body = tj("renamed", {"claimName": "shared"}, precompile={"policy": "Never"})
    apply(body)
    wait_for(lambda: k8s.get(VCJOBS, NS, "renamed-train"), timeout=20, what="renamed-train")
    simulate_vcjob_phase(NS, "renamed-train", "Completed")
    wait_for(lambda: phase("renamed") == "Succeeded", timeout=20, what="renamed Succeeded")
    kubectl("delete", TJ, "renamed", "-n", NS, "--cascade=orphan", "--wait=false")
    wait_for(lambda: get(TJ, "renamed", NS) is None, timeout=20, what="the old object gone")
    apply(body)
    fresh = wait_for(lambda: train_gang(k8s, NS, "renamed") != "renamed-train"
                     and train_gang(k8s, NS, "renamed"),
                     timeout=20, what="a fresh gang name")  # fmt: skip
    wait_for(lambda: k8s.get(VCJOBS, NS, fresh), timeout=20, what=f"vcjob {fresh}")
    simulate_vcjob_phase(NS, fresh, "Completed")
    wait_for(lambda: phase("renamed") == "Succeeded", timeout=20, what="renamed Succeeded again")


def leak_volume(k8s: EmulatorServer, job: str, fs_id: str) -> None:
    """The Released PV an operator without the finalizer left: the next same-name job patches it."""
    name = naming.volume_name(NS, job)
    apply({"apiVersion": "v1", "kind": "PersistentVolume",
           "metadata": {"name": name, "labels": {LABEL_MANAGED_BY: MANAGED_BY}},
           "spec": {"capacity": {"storage": "1200Gi"}, "accessModes": ["ReadWriteMany"],
                    "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                    "claimRef": {"namespace": NS, "name": naming.claim_name(job),
                                 "uid": "uid-of-a-deleted-claim"},
                    "csi": {"driver": "fsx.csi.aws.com", "volumeHandle": fs_id}}})  # fmt: skip
    wait_for(lambda: ((k8s.get("v1/persistentvolumes", None, name) or {}).get("status") or {})
             .get("phase") == "Released", timeout=20, what="the leaked PV Released")  # fmt: skip


def share_one_cache_entry(k8s: EmulatorServer) -> None:
    """A writer deleted mid-compile (its lease taken over), then a forced recompile (the record
    merged, not created)."""
    shared, entry = {"claimName": "shared"}, {"name": f"{NS}-entry"}
    apply(tj("gone", shared, cache=entry))
    wait_for(lambda: k8s.get(VCJOBS, NS, "gone-compile"), timeout=20, what="gone-compile")
    apply(tj("next", shared, cache=entry))
    wait_for(lambda: phase("next") == "WaitingForCache", timeout=20, what="next waits")
    kubectl("delete", TJ, "gone", "-n", NS, "--wait=false")
    run_to_success(k8s, "next")
    apply(tj("again", shared, cache=entry, precompile={"policy": "Always"}))
    run_to_success(k8s, "again")


def claim_devices_through_dra(k8s: EmulatorServer) -> None:
    """spec.devices dra: the job's ResourceClaimTemplate is created (and owned) before its gang."""
    apply(tj("dra", {"claimName": "shared"}, instanceType="trn2.48xlarge", devices="dra",
             precompile={"policy": "Never"}))  # fmt: skip
    wait_for(lambda: k8s.get(VCJOBS, NS, "dra-train"), timeout=20, what="dra-train")
    template = k8s.get(CLAIM_TEMPLATES, NS, naming.claim_template_name("dra"))
    assert template is not None
    assert template["metadata"]["ownerReferences"][0]["name"] == "dra"
    simulate_vcjob_phase(NS, "dra-train", "Completed")
    wait_for(lambda: phase("dra") == "Succeeded", timeout=20, what="dra Succeeded")


def shrink_an_elastic_gang(k8s: EmulatorServer, api_requests: list[ApiRequest]) -> None:
    """spec.elastic: a gang that cannot form again makes the operator count the Nodes; under
    Kueue its resize deletes the Workload of the old size."""
    elastic = {"minNodes": 1, "globalBatchSize": 64, "batchSizePerProcess": 1,
               "shrinkAfterSeconds": 10}  # fmt: skip
    body = tj("stretchy", {"claimName": "shared"}, args=["bert-pretrain"], elastic=elastic,
              precompile={"policy": "Never"})  # fmt: skip
    body["metadata"]["labels"] = {kueue.Q_LABEL: "team"}  # a resize is a new Workload
    apply(body)
    name = kueue.wl_name(k8s, NS, "stretchy", "train-n2")
    wait_for(lambda: k8s.get(kueue.WORKLOADS, NS, name), timeout=20, what="stretchy's Workload")
    admitted = [kueue.cond("QuotaReserved", "True", "QuotaReserved"),
                kueue.cond("Admitted", "True", "Admitted")]  # fmt: skip
    kueue.kueue_says(NS, name, {"conditions": admitted, "admission": {"clusterQueue": "cq"}})
    wait_for(lambda: k8s.get(VCJOBS, NS, "stretchy-train"), timeout=20, what="stretchy-train")
    simulate_vcjob_phase(NS, "stretchy-train", "Pending", retryCount=1)
    wait_for(lambda: any(r.verb == "list" and r.resource == "nodes" for r in api_requests),
             timeout=30, what="the operator's list of Nodes")  # fmt: skip
    wait_for(lambda: k8s.get(kueue.WORKLOADS, NS, name) is None, timeout=30,
             what="the Workload of the old size deleted")  # fmt: skip
    kubectl("delete", TJ, "stretchy", "-n", NS, "--wait=false")


def stop_an_oom_killed_gang(k8s: EmulatorServer) -> None:
    """A gang pod OOM-killed: its log read for the reason, the gang stopped."""
    apply(tj("hungry", {"claimName": "shared"}, precompile={"policy": "Never"}))
    wait_for(lambda: k8s.get(VCJOBS, NS, "hungry-train"), timeout=20, what="hungry-train")
    simulate_vcjob_phase(NS, "hungry-train", "Running")
    wait_for(lambda: phase("hungry") == "Training", timeout=20, what="hungry trains")
    gang_pod(k8s, NS, "hungry", 0, terminated("OOMKilled", 137), "step 1 loss 7.0\nKilled")
    wait_for(lambda: phase("hungry") == "Failed", timeout=20, what="hungry Failed")
    wait_for(lambda: k8s.get(VCJOBS, NS, "hungry-train") is None, timeout=20, what="gang stopped")


@pytest.fixture(scope="module")
def operator_requests(
    k8s: EmulatorServer, crd: Path, api_requests: list[ApiRequest], tmp_path_factory: Any
) -> Iterator[list[ApiRequest]]:
    """The operator's requests of the whole session, after this module's own job ran."""
    log = tmp_path_factory.mktemp("rbac") / "operator.log"
    proc = OperatorProcess(OPERATOR_COMMAND, log, env={"TRAINIUM_RESYNC_SECONDS": "1"})
    proc.start()
    try:
        drive_operator(k8s, api_requests)
    except Exception as exc:
        raise AssertionError(f"driving the operator failed: {exc}\n{proc.log()[-4000:]}") from exc
    finally:
        proc.stop()
    # The election's Lease is what `--leader-elect` processes ask for (test_leadership_e2e.py);
    # this process runs --standalone, so it is checked against the chart's standalone roles
    # (STANDALONE); the election's requests against the default chart, in their own test.
    yield [r for r in list(api_requests) if r.client in OPERATOR_CLIENTS and not _peering(r)]
    kubectl("delete", "namespace", NS, "--wait=false", check=False)
    kubectl("delete", "priorityclass", f"{NS}-high", "--wait=false", check=False)


#: The chart as this test's operator runs: one replica, --standalone (the default peers).
STANDALONE = ("peering.enabled=false", "replicaCount=1")


def _peering(r: ApiRequest) -> bool:
    """A renewal of an election's Lease: only `--leader-elect` processes update Leases (the cache
    takes its writer Lease over with a patch)."""
    return _lease(r) and r.verb == "update"


def _lease(r: ApiRequest) -> bool:
    return r.api_group == "coordination.k8s.io" and r.resource == "leases"


def _election(r: ApiRequest) -> bool:
    """The chart's election Lease (peering.name: trainium), read and renewed by name."""
    return _lease(r) and r.name == "trainium"


def test_the_default_chart_allows_the_elections_requests(
    helm_bin: Path,  # noqa: F811
    api_requests: list[ApiRequest],
) -> None:
    """Two replicas (the chart's default) read and renew their Lease; the chart lets them."""
    election = [r for r in list(api_requests) if r.client in OPERATOR_CLIENTS and _election(r)]
    refused = denied(render(), election, SUBJECT)
    assert not refused, "the chart's RBAC would refuse:\n" + "\n".join(refused)


def test_the_operator_made_the_requests_that_matter(operator_requests: list[ApiRequest]) -> None:
    seen = {(r.verb, r.api_group, r.resource, r.subresource) for r in operator_requests}
    must = {
        ("create", "batch.volcano.sh", "jobs", None),
        ("patch", "trainium.dev", "trainiumjobs", "status"),
        ("watch", "trainium.dev", "trainiumjobs", None),
        ("create", "", "configmaps", None),
        ("create", "", "persistentvolumes", None),
        ("create", "", "persistentvolumeclaims", None),
        ("get", "scheduling.volcano.sh", "queues", None),
    }
    assert must <= seen, f"missing: {sorted(must - seen, key=str)}"


def test_default_cluster_roles_allow_every_operator_request(
    helm_bin: Path,  # noqa: F811
    operator_requests: list[ApiRequest],
) -> None:
    refused = denied(render(*STANDALONE), operator_requests, SUBJECT)
    assert not refused, "the chart's RBAC would refuse:\n" + "\n".join(refused)


def test_namespaced_roles_allow_the_requests_in_watched_namespaces(
    helm_bin: Path,  # noqa: F811
    operator_requests: list[ApiRequest],
) -> None:
    """Rendered with watchNamespaces = every namespace the operator worked in."""
    namespaces = sorted({r.namespace for r in operator_requests if r.namespace})
    docs = render("watchNamespaces={" + ",".join(namespaces) + "}", *STANDALONE)
    # With watchNamespaces kopf lists/watches per namespace, never across all of them: only
    # requests inside the watched namespaces, on cluster-scoped resources, and our own watches'
    # (Kueue's Workloads, DRA claims: one request across every namespace in either mode) apply.
    relevant = [
        r for r in operator_requests
        if r.namespace in namespaces
        or (r.namespace is None and (r.resource in CLUSTER_SCOPED or OWN_WATCH in r.user_agent))
    ]  # fmt: skip
    assert any(r.namespace == NS for r in relevant)
    refused = denied(docs, relevant, SUBJECT)
    assert not refused, "the namespaced RBAC would refuse:\n" + "\n".join(refused)
    roles = [d for d in docs if d["kind"] == "Role"]
    assert len(roles) == len(namespaces)
    job = next(r for r in relevant if r.resource == "jobs" and r.verb == "create")
    assert allows(docs, job, SUBJECT)


def granted(docs: list[Obj]) -> set[tuple[str, str, str]]:
    """Every (verb, group, resource) the rendered RBAC grants the operator's ServiceAccount."""
    return {
        (verb, group, resource)
        for _, rule in grants(docs, SUBJECT)
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule.get("verbs", [])
    }


def used(grant: tuple[str, str, str], requests: list[ApiRequest]) -> bool:
    verb, group, resource = grant
    rule = {"verbs": [verb], "apiGroups": [group], "resources": [resource]}
    return any(rule_allows(rule, r) for r in requests)


def test_every_granted_verb_is_used_or_allow_listed(
    helm_bin: Path,  # noqa: F811
    operator_requests: list[ApiRequest],
) -> None:
    grants_ = granted(render(*STANDALONE))
    unused = sorted(g for g in grants_ if not used(g, operator_requests))
    unexplained = [f"{v} {grp or 'core'}/{res}" for v, grp, res in unused
                   if (v, grp, res) not in ALLOWED_UNUSED]  # fmt: skip
    assert not unexplained, (
        "the chart grants the operator verbs no recorded request used (remove them from "
        "_rbac_rules.tpl, or allow-list them with the reason):\n" + "\n".join(unexplained)
    )
    stale = sorted(set(ALLOWED_UNUSED) - set(unused))
    assert not stale, f"allow-listed but now used or no longer granted, drop them: {stale}"
