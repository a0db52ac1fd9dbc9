"""A Kueue job end to end (issue 33): the real operator, Kueue's own CRDs, Kueue simulated.

Kueue is simulated by patching the Workload's status as its controller would (QuotaReserved,
Admitted with a flavor assignment); Volcano by patching the Volcano job's, as elsewhere.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from test_operator_e2e import condition, job, prerequisites, vcjobs, wait_phase

from harness import EmulatorServer, OperatorProcess, apply, kubectl, simulate_vcjob_phase, wait_for

Obj = dict[str, Any]
#: The Kueue CRDs this test needs: minimal copies of Kueue v0.19.2's (names, scope, version,
#: status subresource), schemaless: the emulator stores what it is given.
PLURALS = ("workloads", "resourceflavors", "localqueues", "workloadpriorityclasses")
WORKLOADS = "kueue.x-k8s.io/v1beta2/workloads"
Q_LABEL, P_LABEL = "kueue.x-k8s.io/queue-name", "kueue.x-k8s.io/priority-class"


def kueue_crd(plural: str) -> Obj:
    kind = {
        "workloads": "Workload",
        "resourceflavors": "ResourceFlavor",
        "localqueues": "LocalQueue",
        "workloadpriorityclasses": "WorkloadPriorityClass",
    }[plural]
    scope = "Namespaced" if plural in ("workloads", "localqueues") else "Cluster"
    version: Obj = {
        "name": "v1beta2",
        "served": True,
        "storage": True,
        "schema": {
            "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        },
    }
    if scope == "Namespaced":
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.kueue.x-k8s.io"},
        "spec": {
            "group": "kueue.x-k8s.io",
            "scope": scope,
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
            "versions": [version],
        },
    }


@pytest.fixture(scope="module")
def kueue(k8s: EmulatorServer) -> Iterator[None]:
    """Kueue's CRDs, as its install applies them (the conversion webhooks are not served here)."""
    for plural in PLURALS:
        crd = kueue_crd(plural)
        apply(crd)
        name = crd["metadata"]["name"]
        kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=10s")
    yield


def kueue_says(ns: str, name: str, status: Obj) -> None:
    """Stand in for Kueue's controller: write the Workload's status."""
    kubectl(
        "patch",
        WORKLOADS.rsplit("/", 1)[1] + ".kueue.x-k8s.io",
        name,
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )


def cond(kind: str, status: str, reason: str, message: str = "") -> Obj:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }


def test_waits_for_admission_then_runs_on_the_flavor_and_finishes(
    kueue: None, operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    q = prerequisites(ns)
    toleration = {"key": "trn1-pool", "operator": "Exists", "effect": "NoSchedule"}
    apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": f"trn1-{ns}"},
            "spec": {"nodeLabels": {"pool": "trn1-a"}, "tolerations": [toleration]},
        }
    )
    apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "team-a", "namespace": ns},
            "spec": {"clusterQueue": "cq"},
        }
    )
    apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": f"prod-{ns}"},
            "value": 1000,
        }
    )
    body = job(ns, "bert", q, precompile={"policy": "Never"})
    body["metadata"]["labels"] = {Q_LABEL: "team-a", P_LABEL: f"prod-{ns}"}
    apply(body)

    name = "trainiumjob-bert-train"
    wl = wait_for(lambda: k8s.get(WORKLOADS, ns, name), timeout=20, what="the training Workload")
    assert wl["spec"]["queueName"] == "team-a"
    assert wl["spec"]["priorityClassRef"]["name"] == f"prod-{ns}" and wl["spec"]["priority"] == 1000
    (pod_set,) = wl["spec"]["podSets"]
    assert pod_set["count"] == 2
    requests = pod_set["template"]["spec"]["containers"][0]["resources"]["requests"]
    assert requests["aws.amazon.com/neuron"] == "16"
    assert vcjobs(k8s, ns) == []  # nothing starts outside the quota
    # One Workload: precompile policy Never (as a cache hit) asks no quota for a compile.
    assert [w["metadata"]["name"] for w in k8s.list(WORKLOADS, ns)] == [name]

    said = "couldn't assign flavors: insufficient unused quota for aws.amazon.com/neuron"
    kueue_says(ns, name, {"conditions": [cond("QuotaReserved", "False", "Pending", said)]})
    wait_for(
        lambda: said in condition(ns, "bert", "Running").get("message", ""),
        timeout=20,
        what="Kueue's reason on the job",
    )
    running = condition(ns, "bert", "Running")
    assert running["reason"] == "WaitingForQuota" and vcjobs(k8s, ns) == []

    admission = {
        "clusterQueue": "cq",
        "podSetAssignments": [
            {"name": "train", "count": 2, "flavors": {"aws.amazon.com/neuron": f"trn1-{ns}"}}
        ],
    }
    kueue_says(
        ns,
        name,
        {
            "conditions": [
                cond("QuotaReserved", "True", "QuotaReserved"),
                cond("Admitted", "True", "Admitted"),
            ],
            "admission": admission,
        },
    )
    train = wait_for(
        lambda: k8s.get("batch.volcano.sh/v1alpha1/jobs", ns, "bert-train"),
        timeout=20,
        what="the training gang after admission",
    )
    for task in train["spec"]["tasks"]:
        pod = task["template"]["spec"]
        assert pod["nodeSelector"]["pool"] == "trn1-a"
        assert toleration in pod["tolerations"]
        assert Q_LABEL not in task["template"]["metadata"]["labels"]

    simulate_vcjob_phase(ns, "bert-train", "Running")
    wait_phase(ns, "bert", "Training")
    simulate_vcjob_phase(ns, "bert-train", "Completed")
    wait_phase(ns, "bert", "Succeeded")

    def finished() -> Obj | None:
        conds = ((k8s.get(WORKLOADS, ns, name) or {}).get("status") or {}).get("conditions") or []
        return next((c for c in conds if c["type"] == "Finished"), None)

    done = wait_for(finished, timeout=20, what="the Workload's Finished condition")
    assert done["status"] == "True" and done["reason"] == "Succeeded"
    kinds = {c["type"] for c in k8s.get(WORKLOADS, ns, name)["status"]["conditions"]}  # type: ignore[index]
    assert {"QuotaReserved", "Admitted", "Finished"} <= kinds  # Kueue's own conditions kept


def test_a_job_without_the_label_makes_no_workload(
    kueue: None, operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    q = prerequisites(ns)
    apply(job(ns, "plain", q, precompile={"policy": "Never"}))
    wait_for(
        lambda: k8s.get("batch.volcano.sh/v1alpha1/jobs", ns, "plain-train"),
        timeout=20,
        what="the training gang, at once",
    )
    assert k8s.list(WORKLOADS, ns) == []
