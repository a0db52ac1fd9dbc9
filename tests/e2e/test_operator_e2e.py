"""The real operator process, over HTTP, against the emulator, driven by real kubectl.

Volcano is simulated by patching Volcano jobs' status, as its controller would.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

from harness import (
    EmulatorServer,
    OperatorProcess,
    apply,
    get,
    kubectl,
    simulate_vcjob_phase,
    wait_for,
)

TJ = "trainiumjobs.v1alpha1.trainium.dev"
VCJOBS = "batch.volcano.sh/v1alpha1/jobs"
Obj = dict[str, Any]


def queue(name: str) -> None:
    """A Volcano queue (cluster-scoped), as `kubectl apply` of AWS's test queue would make."""
    apply(
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": name},
            "spec": {"weight": 1, "reclaimable": False},
        }
    )


def claim(ns: str, name: str = "fsx-claim", storage_class: str = "fsx-sc") -> None:
    """An existing ReadWriteMany claim, as the tutorial's create_lustre_pv_claim.sh makes.

    The emulated provisioner binds it when its StorageClass exists (the tutorial's fsx-sc).
    """
    apply(
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": "fsx-sc"},
            "provisioner": "fsx.csi.aws.com",
        }
    )
    apply(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": storage_class,
                "resources": {"requests": {"storage": "1200Gi"}},
            },
        }
    )


def prerequisites(ns: str) -> str:
    """The queue and claim a job needs (tests of their absence make them by hand); the queue."""
    q = f"q-{ns}"
    queue(q)
    claim(ns)
    return q


def job(ns: str, name: str, q: str, **spec: Any) -> Obj:
    """A TrainiumJob like the tutorial's: 2 x trn1.32xlarge on an existing claim."""
    body: Obj = {
        "image": "123456789012.dkr.ecr.us-west-2.amazonaws.com/trainer:1.0",
        "args": ["bert-pretrain", "--data-dir", "/data/bert", "--batch-size", "16"],
        "instanceType": "trn1.32xlarge",
        "nodes": 2,
        "storage": {"claimName": "fsx-claim"},
        "cache": {"name": "bert-large"},
        "scheduling": {"queue": q},
    }
    body.update(spec)
    return {
        "apiVersion": "trainium.dev/v1alpha1",
        "kind": "TrainiumJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": body,
    }


def status(ns: str, name: str) -> Obj:
    """The TrainiumJob's status as kubectl shows it."""
    return (get(TJ, name, ns) or {}).get("status") or {}


def condition(ns: str, name: str, ctype: str) -> Obj:
    """One condition of the job's status, or {}."""
    return next((c for c in status(ns, name).get("conditions", []) if c["type"] == ctype), {})


def wait_phase(ns: str, name: str, phase: str, timeout: float = 20) -> Obj:
    """Wait for status.phase and return the status."""
    wait_for(lambda: status(ns, name).get("phase") == phase, timeout=timeout,
             what=f"{name} phase {phase} (status {status(ns, name)})")  # fmt: skip
    return status(ns, name)


def vcjob(k8s: EmulatorServer, ns: str, name: str, timeout: float = 20) -> Obj:
    """Wait until a Volcano job exists and return it."""
    return wait_for(lambda: k8s.get(VCJOBS, ns, name), timeout=timeout, what=f"vcjob {name}")


def vcjobs(k8s: EmulatorServer, ns: str) -> list[str]:
    """Names of the Volcano jobs in a namespace."""
    return sorted(j["metadata"]["name"] for j in k8s.list(VCJOBS, ns))


def printer_columns() -> str:
    """kubectl custom-columns from the CRD's additionalPrinterColumns.

    The emulator does not render server-side Tables, so this checks that every column's jsonPath
    picks a real value from a live status instead.
    """
    crd = yaml.safe_load(
        (Path(__file__).parents[2] / "crds/trainiumjobs.trainium.dev.yaml").read_text()
    )
    cols = crd["spec"]["versions"][0]["additionalPrinterColumns"]
    return ",".join(f"{c['name'].upper()}:{c['jsonPath']}" for c in cols)


def events(ns: str) -> list[Obj]:
    """Core Events in the namespace."""
    out = kubectl("get", "events", "-n", ns, "-o", "json").stdout
    items: list[Obj] = json.loads(out)["items"]
    return items


def test_full_lifecycle_then_cache_hit(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    q = prerequisites(ns)
    apply(job(ns, "bert", q))

    pre = vcjob(k8s, ns, "bert-compile")
    uid = get(TJ, "bert", ns)["metadata"]["uid"]  # type: ignore[index]
    assert pre["metadata"]["ownerReferences"][0]["uid"] == uid
    assert pre["metadata"]["labels"]["trainium.dev/stage"] == "precompile"
    assert pre["spec"]["minAvailable"] == 2 and pre["spec"]["queue"] == q
    pod = pre["spec"]["tasks"][0]["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"][0] == "neuron_parallel_compile"
    assert container["resources"]["limits"] == {
        "aws.amazon.com/neuron": "16",
        "vpc.amazonaws.com/efa": "8",
    }
    env = {e["name"]: e.get("value") for e in container["env"]}
    # one task for both nodes: each pod's own index, as the kubelet expands it
    want = "--cache_dir=/data/neuron_cache/bert-large_$(TRAINIUM_NODE_INDEX)"
    assert env["NEURON_CC_FLAGS"] == want
    st = wait_phase(ns, "bert", "Precompiling")
    assert st["precompileJob"] == "bert-compile" and st["cache"]["outcome"] == "miss"

    simulate_vcjob_phase(ns, "bert-compile", "Running")
    simulate_vcjob_phase(ns, "bert-compile", "Completed")
    train = vcjob(k8s, ns, "bert-train")
    assert train["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["command"][:3] == [
        "python3", "-m", "trainium_trainer.torchrun",
    ]  # fmt: skip
    records = k8s.list("v1/configmaps", ns)
    assert [r["data"]["key"] for r in records] == [st["cache"]["key"]]

    simulate_vcjob_phase(ns, "bert-train", "Running")
    wait_phase(ns, "bert", "Training")
    printed = kubectl("get", "tj", "bert", "-n", ns, "-o", f"custom-columns={printer_columns()}")
    assert printed.stdout.split("\n")[1].split()[:6] == [
        "Training",
        "trn1.32xlarge",
        "2",
        "<none>",  # SIZE: only an elastic job has one
        "miss",
        "0",
    ]
    simulate_vcjob_phase(ns, "bert-train", "Completed")
    kubectl("wait", "--for=condition=Succeeded", "tj/bert", "-n", ns, "--timeout=20s")
    st = status(ns, "bert")
    assert st["phase"] == "Succeeded" and st["completionTime"]
    # Each gang's unscheduled span (created -> seen Running) is on the history: the waiting cost.
    # describe shows the transitions alone: each stage's pending span is on its phase's entry.
    phases = [e["phase"] for e in st["history"]]
    assert phases == ["Precompiling", "Training", "Succeeded"], phases
    spans = [s.split("/") for e in st["history"][:2] for s in e["waitedForGang"]]
    assert spans and all(since <= until for since, until in spans), spans
    assert set(st["cost"]["instanceHours"]) >= {"waiting", "compiling", "training", "restarts"}
    posted = events(ns)
    reasons = {e["reason"] for e in posted}
    assert {"TrainingCompleted"} <= reasons, reasons
    for event in posted:  # what the operator posted is a valid core/v1 Event
        kubernetes_validate.validate(event, "1.33.0", strict=True)

    # Same graphs under another name: the cache record makes precompile unnecessary.
    apply(job(ns, "bert-again", q, runPolicy={"maxRetries": 1}))
    vcjob(k8s, ns, "bert-again-train")
    st = wait_phase(ns, "bert-again", "Training")  # the gang is pending: reason, not phase
    assert condition(ns, "bert-again", "Running")["reason"] == "GangPending"
    assert st["cache"] == {**st["cache"], "hit": True, "outcome": "hit"}
    assert "bert-again-compile" not in vcjobs(k8s, ns)

    metrics = urllib.request.urlopen(operator.metrics_url, timeout=5).read().decode()
    assert (
        'trainium_operator_phase_transitions_total{from_phase="Training",to_phase="Succeeded"} 1.0'
        in metrics
    )
    assert 'trainium_operator_cache_lookups_total{result="hit"} 1.0' in metrics
    assert "trainium_operator_reconcile_duration_seconds_count" in metrics


def test_precompile_failure_fails_the_job(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    q = prerequisites(ns)
    apply(job(ns, "bad-graph", q, precompile={"policy": "Always"}))
    vcjob(k8s, ns, "bad-graph-compile")
    simulate_vcjob_phase(
        ns,
        "bad-graph-compile",
        "Failed",
        state={"phase": "Failed", "reason": "PodFailed", "message": "neuronx-cc exited 70"},
    )
    st = wait_phase(ns, "bad-graph", "Failed")
    failed = condition(ns, "bad-graph", "Failed")
    assert failed["status"] == "True" and failed["reason"] == "PrecompileFailed"
    assert "neuronx-cc exited 70" in failed["message"]
    assert vcjobs(k8s, ns) == ["bad-graph-compile"]
    warnings = [e for e in events(ns) if e["type"] == "Warning"]
    assert any(e["reason"] == "PrecompileFailed" for e in warnings)
    assert st["completionTime"]


def test_training_failure_fails_the_job(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    q = prerequisites(ns)
    apply(job(ns, "oom", q, precompile={"policy": "Never"}))
    vcjob(k8s, ns, "oom-train")
    assert vcjobs(k8s, ns) == ["oom-train"]
    simulate_vcjob_phase(ns, "oom-train", "Running", retryCount=2)
    wait_for(lambda: status(ns, "oom").get("restarts") == 2, what="restarts from retryCount")
    simulate_vcjob_phase(ns, "oom-train", "Failed")
    wait_phase(ns, "oom", "Failed")
    assert condition(ns, "oom", "Failed")["reason"] == "TrainingFailed"


def test_missing_claim_waits_then_proceeds(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    q = f"q-{ns}"
    queue(q)
    apply(job(ns, "early", q))
    wait_for(lambda: condition(ns, "early", "StorageReady").get("reason") == "ClaimNotFound",
             what="ClaimNotFound")  # fmt: skip
    cond = condition(ns, "early", "StorageReady")
    assert cond["status"] == "False" and "fsx-claim" in cond["message"]
    assert status(ns, "early")["phase"] == "Pending" and vcjobs(k8s, ns) == []
    warned = wait_for(lambda: [e for e in events(ns) if e["reason"] == "ClaimNotFound"],
                      what="ClaimNotFound Warning event")  # fmt: skip
    assert warned[0]["type"] == "Warning" and "fsx-claim" in warned[0]["message"]
    claim(ns)
    vcjob(k8s, ns, "early-compile")
    assert condition(ns, "early", "StorageReady")["status"] == "True"


def test_a_blocked_jobs_events_say_what_was_done_once(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    """An action word on every Event (kopf's say "Action?"), and no text posted twice."""
    q = f"q-{ns}"
    queue(q)
    apply(job(ns, "blocked", q))
    posted = wait_for(lambda: len(events(ns)) >= 2 and events(ns), what="two Events")
    assert {e["action"] for e in posted} == {"Wait"}
    messages = [e["message"] for e in posted]
    assert len(messages) == len(set(messages)), messages
    st = status(ns, "blocked")
    assert st["cache"]["outcome"] == "-" and "hit" not in st["cache"]  # the CACHE column


def operator_passes(api_requests: list[Any], ns: str, name: str) -> int:
    """How many fresh passes (the backstop's: they GET the job) the operator made over one job."""
    return sum(
        1
        for r in api_requests
        if r.client == "trainium-operator" and r.verb == "get" and r.resource == "trainiumjobs"
        and r.namespace == ns and r.name == name
    )  # fmt: skip


def test_missing_queue_waits_then_proceeds(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    q = f"q-{ns}"
    claim(ns)
    apply(job(ns, "queued", q))
    wait_for(lambda: "QueueNotFound" in json.dumps(status(ns, "queued")), what="QueueNotFound")
    assert q in status(ns, "queued")["message"] and vcjobs(k8s, ns) == []
    before = operator.passes()
    for i in range(3):  # three more passes while the queue is still missing
        kubectl("annotate", TJ, "queued", "-n", ns, f"poke={i}", "--overwrite")
    wait_for(lambda: operator.passes() >= before + 3, what="3 passes")
    warned = [e for e in events(ns) if e["reason"] == "QueueNotFound"]
    assert len(warned) == 1 and warned[0]["type"] == "Warning", warned  # once, not every pass
    queue(q)
    vcjob(k8s, ns, "queued-compile")


def test_invalid_spec_fails_without_children(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    # The emulator, like an API server without the CRD's schema, accepts anything.
    apply(job(ns, "too-wide", "default", nprocPerNode=64, compilerFlags=["--cache_dir=/x"]))
    st = wait_phase(ns, "too-wide", "Failed")
    valid = condition(ns, "too-wide", "Validated")
    assert valid["status"] == "False" and valid["reason"] == "InvalidSpec"
    assert "spec.nprocPerNode" in valid["message"] and "spec.compilerFlags" in valid["message"]
    assert (
        st["phase"] == "Failed"
        and vcjobs(k8s, ns) == []
        and k8s.list("v1/persistentvolumeclaims", ns) == []
    )
    assert any(e["reason"] == "InvalidSpec" for e in events(ns))
    assert operator.running


def test_fsx_storage_creates_static_volume(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    q = f"q-{ns}"
    queue(q)
    fsx = {
        "fileSystemId": "fs-0123456789abcdef0",
        "dnsName": "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com",
        "mountName": "abcdefgh",
    }
    apply(job(ns, "lustre", q, storage={"fsx": fsx}))
    pvc = wait_for(lambda: k8s.get("v1/persistentvolumeclaims", ns, "lustre-fsx"), what="claim")
    pv = k8s.get("v1/persistentvolumes", None, pvc["spec"]["volumeName"])
    assert pv is not None
    assert pv["spec"]["csi"] == {
        "driver": "fsx.csi.aws.com",
        "volumeHandle": "fs-0123456789abcdef0",
        "volumeAttributes": {"dnsname": fsx["dnsName"], "mountname": "abcdefgh"},
    }
    assert pv["spec"]["mountOptions"] == ["flock"]
    pre = vcjob(k8s, ns, "lustre-compile")
    volumes = pre["spec"]["tasks"][0]["template"]["spec"]["volumes"]
    assert {"name": "mount-0", "persistentVolumeClaim": {"claimName": "lustre-fsx"}} in volumes


def test_operator_killed_mid_lifecycle_adopts(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer, api_requests: list[Any]
) -> None:
    q = prerequisites(ns)
    apply(job(ns, "sturdy", q))
    vcjob(k8s, ns, "sturdy-compile")
    operator.kill()
    simulate_vcjob_phase(ns, "sturdy-compile", "Completed")
    operator.start()
    vcjob(k8s, ns, "sturdy-train")
    simulate_vcjob_phase(ns, "sturdy-train", "Completed")
    wait_phase(ns, "sturdy", "Succeeded")
    operator.restart()  # a settled job is left alone by a new operator
    assert vcjobs(k8s, ns) == ["sturdy-compile", "sturdy-train"]
    created = [
        r
        for r in api_requests
        if r.verb == "create" and r.namespace == ns and r.resource == "jobs" and r.code == 201
    ]
    assert len(created) == 2  # one create per stage, though three operators saw the job
    assert status(ns, "sturdy")["phase"] == "Succeeded"


def test_delete_removes_children(operator: OperatorProcess, ns: str, k8s: EmulatorServer) -> None:
    q = prerequisites(ns)
    apply(job(ns, "shortlived", q))
    vcjob(k8s, ns, "shortlived-compile")
    kubectl("delete", TJ, "shortlived", "-n", ns, "--wait=false")
    wait_for(lambda: get(TJ, "shortlived", ns) is None, what="job deleted (no finalizer holds it)")
    wait_for(lambda: vcjobs(k8s, ns) == [], what="children garbage-collected")
    assert k8s.get("v1/persistentvolumeclaims", ns, "fsx-claim") is not None  # user's claim stays
    assert operator.running


def test_ttl_after_finished_deletes_the_job(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    q = prerequisites(ns)
    ttl = {"ttlSecondsAfterFinished": 3600}
    apply(job(ns, "brief", q, precompile={"policy": "Never"}, runPolicy=ttl))
    vcjob(k8s, ns, "brief-train")
    simulate_vcjob_phase(ns, "brief-train", "Completed")
    wait_phase(ns, "brief", "Succeeded")
    assert get(TJ, "brief", ns) is not None  # kept until the TTL has passed (an hour)
    patch = json.dumps({"spec": {"runPolicy": {"ttlSecondsAfterFinished": 2}}})
    kubectl("patch", TJ, "brief", "-n", ns, "--type=merge", "-p", patch)  # runPolicy may change
    wait_for(lambda: get(TJ, "brief", ns) is None, timeout=15, what="TTL deletion")
    wait_for(lambda: vcjobs(k8s, ns) == [], what="children garbage-collected")


def start_training(k8s: EmulatorServer, ns: str, name: str) -> str:
    """A job without precompile whose training gang Volcano runs; returns its queue."""
    q = prerequisites(ns)
    apply(job(ns, name, q, precompile={"policy": "Never"}))
    vcjob(k8s, ns, f"{name}-train")
    simulate_vcjob_phase(ns, f"{name}-train", "Running")
    wait_phase(ns, name, "Training")
    return q


def test_a_non_leaf_queue_holds_its_jobs_across_an_operator_restart(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    """Issue 17 bug 2: the hierarchy is what kopf listed (an index), not what handlers saw yet."""
    parent, child = f"p-{ns}", f"c-{ns}"
    queue(parent)
    apply({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
           "metadata": {"name": child}, "spec": {"weight": 1, "parent": parent}})  # fmt: skip
    claim(ns)
    apply(job(ns, "before", parent))
    wait_for(lambda: condition(ns, "before", "Precompiled").get("reason") == "QueueNotLeaf",
             what="QueueNotLeaf before the restart")  # fmt: skip
    operator.stop()
    apply(job(ns, "during", parent))  # listed at start-up together with the queues
    operator.start()
    for name in ("before", "during"):
        wait_for(lambda: condition(ns, name, "Precompiled").get("reason") == "QueueNotLeaf",  # noqa: B023
                 what=f"{name}: QueueNotLeaf after the restart")  # fmt: skip
    assert vcjobs(k8s, ns) == [] and status(ns, "during")["phase"] != "Failed"
