"""A training node turning NeuronHealth unhealthy on a job with a spare: the spare takes its place.

The operator process against the emulator, standing in for Volcano and the kubelet: the gang is
stopped and the next one keeps the node out (no retry spent); that gang waits on the two nodes
left, so its reservation drops to them (a spare's node takes the bad node's place, the same
world size); status.spares and SpareSwapped Events name the node, why, and the spare's node
once a training pod runs on it; then the replacement spare is asked for. The second test: a
straggler replaced under spec.stragglers.replace (rank 0's metrics served on loopback) takes the
same swap, reason Straggler.
"""

from __future__ import annotations

import json
from typing import Any

from test_elastic_e2e import POOL, node
from test_operator_e2e import events, job, prerequisites, status, vcjob, wait_phase
from test_progress_e2e import reading_operator, trainer  # noqa: F401 (its fixtures, used below)

from harness import (
    EmulatorServer,
    OperatorProcess,
    apply,
    kubectl,
    simulate_vcjob_phase,
    train_gang,
    wait_for,
)
from trainium_trainer.live import LiveMetrics

Obj = dict[str, Any]
VCJOBS = "batch.volcano.sh/v1alpha1/jobs"


def rank0_pod(k8s: EmulatorServer, ns: str, gang: str, port: int, on: str) -> None:
    """Pod 0 of the gang on `on`, Running at 127.0.0.1, its metrics port moved to `port`."""
    template = k8s.get(VCJOBS, ns, gang)["spec"]["tasks"][0]["template"]
    spec = json.loads(json.dumps(template["spec"]))
    spec["containers"][0]["ports"][0]["containerPort"] = port
    name = f"{gang}-node-0"
    apply({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": ns, **template["metadata"]},
           "spec": {**spec, "nodeName": on}})  # fmt: skip
    patch = {"status": {"phase": "Running", "podIP": "127.0.0.1",
                        "conditions": [{"type": "Ready", "status": "True"}]}}  # fmt: skip
    kubectl("patch", "pod", name, "-n", ns, "--subresource=status", "--type=merge",
            "-p", json.dumps(patch))  # fmt: skip


def gang_pod(k8s: EmulatorServer, ns: str, gang: str, task: int, index: int, on: str) -> None:
    """Pod `index` of the gang's task (0: training, 1: spare), bound to `on` and Running."""
    spec = k8s.get(VCJOBS, ns, gang)["spec"]["tasks"][task]
    name = f"{gang}-{spec['name']}-{index}"
    template = spec["template"]
    apply({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": ns, **template["metadata"]},
           "spec": {**template["spec"], "nodeName": on}})  # fmt: skip
    patch = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    kubectl("patch", "pod", name, "-n", ns, "--subresource=status", "--type=merge",
            "-p", json.dumps(patch))  # fmt: skip


def conditions(name: str, unhealthy: bool = False) -> None:
    """The node's conditions, as its kubelet (Ready) and Neuron's node problem detector set them
    (a create's status is dropped: the status subresource)."""
    found = [{"type": "Ready", "status": "True"}]
    if unhealthy:
        found.append({"type": "NeuronHealth", "status": "True", "message": "HBM",
                      "reason": "NeuronHasError_HBM_UNCORRECTABLE_ERROR"})  # fmt: skip
    kubectl("patch", "node", name, "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": {"conditions": found}}))  # fmt: skip


def test_a_node_marked_unhealthy_goes_to_the_spare_at_the_same_world_size(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    n0, n1, n2 = (f"{ns}-n{i}" for i in range(3))
    for name in (n0, n1, n2):
        apply(node(name, ns))
        conditions(name)
    q = prerequisites(ns)

    apply(job(ns, "sp", q, spares=1, precompile={"policy": "Never"},
              scheduling={"queue": q, "nodeSelector": {POOL: ns}}))  # fmt: skip
    first = vcjob(k8s, ns, "sp-train")
    assert first["spec"]["minAvailable"] == 3
    simulate_vcjob_phase(ns, "sp-train", "Running")
    wait_phase(ns, "sp", "Training")
    gang_pod(k8s, ns, "sp-train", 0, 0, n0)
    gang_pod(k8s, ns, "sp-train", 0, 1, n1)
    gang_pod(k8s, ns, "sp-train", 1, 0, n2)
    kubectl("annotate", "trainiumjob", "sp", "-n", ns, "e2e/look=1")  # a pass sees the pods
    wait_for(lambda: status(ns, "sp").get("spares", {}).get("standby") == [n2],
             what="the spare standing by on status")  # fmt: skip

    conditions(n1, unhealthy=True)

    def replaced() -> Obj | None:
        found = k8s.get(VCJOBS, ns, train_gang(k8s, ns, "sp"))
        ours = found is not None and found["metadata"]["uid"] != first["metadata"]["uid"]
        return found if ours else None

    nxt = wait_for(replaced, timeout=30, what="the gang recreated without the node")
    gang = nxt["metadata"]["name"]
    st = status(ns, "sp")
    assert [(e["node"], e["reason"]) for e in st["excludedNodes"]] == [(n1, "NodeUnhealthy")]
    assert st.get("restarts", 0) == 0 and st["disruptions"] == 1, st
    # The next gang waits on the two nodes left: its reservation drops to them.
    simulate_vcjob_phase(ns, gang, "Pending")

    def swapped() -> Obj | None:
        spares = status(ns, "sp").get("spares") or {}
        return spares if spares.get("swaps") == 1 else None

    spares = wait_for(swapped, timeout=30, what="the swap on status")
    last = spares["lastSwap"]
    assert (last["node"], last["reason"], last["spares"]) == (n1, "NodeUnhealthy", [n2]), last
    assert "replacement" not in last and spares["reserved"] == 0 and spares["lost"] == []
    patched = k8s.get(VCJOBS, ns, gang)
    assert patched["spec"]["minAvailable"] == 2 and patched["spec"]["tasks"][0]["replicas"] == 2
    assert patched["spec"]["tasks"][1]["replicas"] == 0
    told = [e["message"] for e in events(ns) if e["reason"] == "SpareSwapped"]
    assert any(f"training node {n1} was taken out (NodeUnhealthy)" in m for m in told), told

    # It forms on the spare's node: lastSwap names it, and a second Event says so.
    gang_pod(k8s, ns, gang, 0, 0, n2)
    gang_pod(k8s, ns, gang, 0, 1, n0)
    simulate_vcjob_phase(ns, gang, "Running")

    def named() -> Obj | None:
        got = (status(ns, "sp").get("spares") or {}).get("lastSwap") or {}
        return got if got.get("replacement") else None

    assert wait_for(named, timeout=30, what="lastSwap.replacement")["replacement"] == n2
    told = [e["message"] for e in events(ns) if e["reason"] == "SpareSwapped"]
    assert any(f"spare on node {n2} took the place of training node {n1}" in m for m in told)
    # The replacement spare is asked for; no retry was spent.
    wait_for(lambda: k8s.get(VCJOBS, ns, gang)["spec"]["tasks"][1]["replicas"] == 1,
             timeout=30, what="the replacement spare asked for")  # fmt: skip
    assert status(ns, "sp").get("restarts", 0) == 0


def test_a_straggler_replaced_at_a_checkpoint_goes_to_the_spare(
    reading_operator: OperatorProcess,  # noqa: F811 (the fixture imported above)
    ns: str,
    k8s: EmulatorServer,
    trainer: LiveMetrics,  # noqa: F811
) -> None:
    """spec.stragglers.replace: node 1 steps at 1.5x node 0 for the window, a checkpoint lands
    after the flag: the gang leaves it (reason Straggler) and the spare's node takes its place."""
    assert trainer.port is not None
    n0, n1, n2 = (f"{ns}-n{i}" for i in range(3))
    for name in (n0, n1, n2):
        apply(node(name, ns))
        conditions(name)
    q = prerequisites(ns)
    knobs = {"threshold": 1.1, "windowSeconds": 10, "replace": True}
    apply(job(ns, "slow", q, spares=1, precompile={"policy": "Never"}, stragglers=knobs,
              scheduling={"queue": q, "nodeSelector": {POOL: ns}}))  # fmt: skip
    first = vcjob(k8s, ns, "slow-train")
    simulate_vcjob_phase(ns, "slow-train", "Running")
    wait_phase(ns, "slow", "Training")
    trainer.log({"step": 5, "loss": 4.0})
    trainer.node_steps({0: 1.0, 1: 1.5})
    rank0_pod(k8s, ns, "slow-train", trainer.port, n0)
    gang_pod(k8s, ns, "slow-train", 0, 1, n1)
    gang_pod(k8s, ns, "slow-train", 1, 0, n2)

    steps = [5]

    def flagged() -> Obj | None:
        """The flagged entry; meanwhile the trainer steps on (the operator reads each second)."""
        steps.append(steps[-1] + 1)
        trainer.log({"step": steps[-1], "loss": 4.0})
        found = status(ns, "slow").get("stragglers") or []
        return next((e for e in found if e.get("flaggedAt")), None)

    entry = wait_for(flagged, timeout=40, interval=0.5, what="node 1 flagged")
    assert entry["node"] == n1, entry
    trainer.checkpoint(steps[-1])  # the next checkpoint: it is replaced now
    trainer.log({"step": steps[-1] + 1, "loss": 4.0})

    def replaced() -> Obj | None:
        found = k8s.get(VCJOBS, ns, train_gang(k8s, ns, "slow"))
        ours = found is not None and found["metadata"]["uid"] != first["metadata"]["uid"]
        return found if ours else None

    gang = wait_for(replaced, timeout=30, what="the gang without the slow node")["metadata"]["name"]
    simulate_vcjob_phase(ns, gang, "Pending")
    spares = wait_for(lambda: (s := status(ns, "slow").get("spares") or {}).get("swaps") and s,
                      timeout=30, what="the swap")  # fmt: skip
    last = spares["lastSwap"]
    assert (last["node"], last["reason"], last["spares"]) == (n1, "Straggler", [n2]), last
    st = status(ns, "slow")
    assert [(e["node"], e["reason"]) for e in st["excludedNodes"]] == [(n1, "Straggler")]
    assert st.get("restarts", 0) == 0 and k8s.get(VCJOBS, ns, gang)["spec"]["minAvailable"] == 2
