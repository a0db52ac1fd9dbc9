"""Issue 40, scenario 3 with the real trainer: a node lost mid-training, the gang 3 -> 2 -> 3.

An elastic job (spec.elastic: global batch 48 = 3 nodes x 1 process x 8 x 2 micro-steps =
2 x 1 x 8 x 3) trains on three trn2 nodes; one is lost as EKS loses an instance (its processes
killed, the Node deleted: kubelet.lose_node). The operator shrinks the gang to 2 after
shrinkAfterSeconds and its trainer resumes from the newest checkpoint on the volume at world size
2 with the same global batch (3 micro-steps instead of 2); the node comes back, the gang grows
to 3 at the next checkpoint (the old gang's SIGTERM checkpoint is where the new one resumes).
The proof is the trainer's own: rank 0's live metrics (world size, global batch, accumulation)
at each size, its `resumed` log lines, metrics.jsonl's samples per step and summary.json.
Minutes on a busy machine (three gangs' starts), so opt-in: TRAINIUM_E2E_FAULTS=1.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from cluster import Cluster, wait_until
from jobs import TJ, VCJOB, create, events, get, wait_condition
from kubelet import FakeKubelet, metrics_port
from podrun import PodRun
from realtrainer import OPT_IN, TRN2_48XLARGE, goodput, log_events, metrics, tiny_bert, volume

pytestmark = OPT_IN
Obj = dict[str, Any]
THIRD = "trn2-e2e-2"
GLOBAL_BATCH, MICRO_BATCH = 48, 8
#: Enough that the gang grows back before the end on an idle machine too (at load 13 a step at
#: 3 nodes took ~4 s; 120 steps made the run 13 minutes).
STEPS = 80
ELASTIC = {"minNodes": 2, "globalBatchSize": GLOBAL_BATCH, "batchSizePerProcess": MICRO_BATCH,
           "shrinkAfterSeconds": 10}  # fmt: skip
SHAPE = ("world_size", "global_batch_size", "grad_accum_steps")


@pytest.fixture(scope="module")
def three_nodes(trn2_nodes: tuple[str, ...], kubelet: FakeKubelet) -> Iterator[tuple[str, ...]]:
    """trn2_nodes and a third trn2.48xlarge node."""
    kubelet.add_node(THIRD, TRN2_48XLARGE)
    yield (*trn2_nodes, THIRD)
    with contextlib.suppress(urllib.error.URLError):
        kubelet.remove_nodes([n for n in (THIRD,) if n in kubelet.nodes])


def status_of(cluster: Cluster, ns: str) -> Obj:
    return (get(cluster, TJ, "elastic", ns) or {}).get("status") or {}


def rank0(kubelet: FakeKubelet, ns: str, gang: str) -> PodRun | None:
    """The running rank-0 pod of the Volcano job `gang`."""
    for run in kubelet.runs(ns):
        notes = run.pod["metadata"].get("annotations") or {}
        if (notes.get("volcano.sh/job-name") == gang and notes.get("volcano.sh/task-index") == "0"
                and not run.done.is_set()):  # fmt: skip
            return run
    return None


def shape(run: PodRun) -> dict[str, int]:
    """World size, global batch and accumulation from the trainer's own live metrics."""
    port = metrics_port(run.pod)
    with urllib.request.urlopen(f"http://{run.ip}:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    out = {}
    for line in text.splitlines():
        for key in SHAPE:
            if line.startswith(f"trainium_trainer_{key} "):
                out[key] = int(float(line.split()[1]))
    return out


def training_at(cluster: Cluster, kubelet: FakeKubelet, ns: str, size: int) -> Obj | None:
    """(status, rank 0's shape) once a gang of `size` trains: rank 0 served a step of it."""
    status = status_of(cluster, ns)
    gang_name = status.get("trainingJob") or "elastic-train"
    gang = get(cluster, VCJOB, gang_name, ns) or {}
    progress = status.get("progress") or {}
    sized = (status.get("elastic") or {}).get("currentNodes") == size
    ours = progress.get("gang") == (gang.get("metadata") or {}).get("uid")
    run = rank0(kubelet, ns, gang_name)
    if not (sized and ours and progress.get("step", 0) > 0 and run is not None):
        return None
    try:
        found = shape(run)
    except (OSError, ValueError):
        return None
    return {"status": status, "shape": found, "run": run} if len(found) == 3 else None


def trained_at(cluster: Cluster, kubelet: FakeKubelet, ns: str, size: int) -> Obj | None:
    """training_at, once the gang has trained a step past the one it started at."""
    seen = training_at(cluster, kubelet, ns, size)
    progress = (seen or {}).get("status", {}).get("progress") or {}
    return seen if progress.get("step", 0) > progress.get("firstStep", 0) else None


def lines(run: PodRun) -> list[Obj]:
    return log_events(run.containers[0].log.read_text()) if run.containers else []


def last_step(runs: list[PodRun]) -> int:
    """The newest step these runs' rank 0 logged (the trainer's metrics lines on stdout)."""
    return max((e["step"] for r in runs for e in lines(r) if "loss" in e), default=0)


def newest_checkpoint(runs: list[PodRun]) -> int:
    return max((e["step"] for r in runs for e in lines(r) if e.get("event") == "checkpoint"),
               default=0)  # fmt: skip


def resumed(runs: list[PodRun]) -> list[Obj]:
    return [e for r in runs for e in lines(r) if e.get("event") == "resumed"]


def test_an_elastic_job_loses_a_node_shrinks_to_2_and_grows_back_keeping_its_global_batch(
    cluster: Cluster, trainer_pods: FakeKubelet, three_nodes: tuple[str, ...], ns: str
) -> None:
    kubelet = trainer_pods
    body = tiny_bert("elastic", ns, STEPS, ("--checkpoint-every", "5", "--log-every", "1"),
                     nodes=3, elastic=ELASTIC, runPolicy={"maxRetries": 3})  # fmt: skip
    args = body["spec"]["args"]  # the batch comes from spec.elastic, and only from there
    at = args.index("--batch-size")
    body["spec"].update(args=args[:at] + args[at + 2 :], precompile={"policy": "Never"})
    began = time.monotonic()
    create(cluster, body)

    def checkpointed_at_3() -> Obj | None:
        seen = training_at(cluster, kubelet, ns, 3)
        step = seen and (seen["status"].get("progress") or {}).get("checkpointStep")
        return seen if isinstance(step, int) and step >= 5 else None

    at3 = wait_until(checkpointed_at_3, 420, "a checkpoint at 3 nodes", every=1)
    assert at3["shape"] == {"world_size": 3, "global_batch_size": 48, "grad_accum_steps": 2}
    first = list(kubelet.runs(ns))
    node = sorted(r.pod["spec"]["nodeName"] for r in first if not r.done.is_set())[-1]
    kubelet.lose_node(node)
    try:
        at2 = wait_until(lambda: trained_at(cluster, kubelet, ns, 2), 420,
                         "a step trained at 2 nodes", every=1)  # fmt: skip
        assert at2["shape"] == {"world_size": 2, "global_batch_size": 48, "grad_accum_steps": 3}
        kept = newest_checkpoint(first)
        lost_to_shrink = last_step(first) - kept
        second = [r for r in kubelet.runs(ns) if r not in first]
        [back] = [e for e in resumed(second) if e["world_size"] == 2]
        assert (back["step"], back["checkpoint_world_size"]) == (kept, 3), back
        assert back["samples"] == kept * GLOBAL_BATCH, back
    finally:
        if node not in kubelet.nodes:
            kubelet.add_node(node, TRN2_48XLARGE)  # the node comes back
    at3 = wait_until(lambda: training_at(cluster, kubelet, ns, 3) if at2["run"].done.is_set()
                     else None, 420, "training at 3 nodes again", every=1)  # fmt: skip
    assert at3["shape"] == {"world_size": 3, "global_batch_size": 48, "grad_accum_steps": 2}
    job = wait_condition(cluster, "elastic", ns, "Succeeded", timeout=600)
    took = time.monotonic() - began
    status = job["status"]
    assert status["elastic"]["resizes"] == 2, status["elastic"]
    assert [s["nodes"] for s in status["elastic"]["sizes"]] == [3, 2, 3], status["elastic"]
    kinds = [e["message"].split(" because")[0] for e in events(cluster, ns, "elastic")
             if e["reason"] == "Resized"]  # fmt: skip
    assert kinds == ["from 3 to 2 nodes", "from 2 to 3 nodes"], kinds
    # The grow: the 2-node gang checkpointed on its SIGTERM, the 3-node one resumed there.
    third = [r for r in kubelet.runs(ns) if r not in first and r not in second]
    [grown] = [e for e in resumed(third) if e["world_size"] == 3]
    assert grown["checkpoint_world_size"] == 2 and grown["samples"] == grown["step"] * 48, grown
    lost_to_grow = last_step(second) - grown["step"]
    assert lost_to_grow <= 0, (last_step(second), grown)
    # The trainer's own record: every optimizer step saw 48 samples, at every size.
    out = volume(kubelet) / "output" / "elastic"
    records = [r for r in metrics(out) if "loss" in r]
    assert [r["step"] for r in records] == list(range(1, STEPS + 1)), records[-3:]
    assert all(r["samples"] == r["step"] * GLOBAL_BATCH for r in records), records[:3]
    summary = json.loads((out / "summary.json").read_text())
    assert {k: summary[k] for k in SHAPE} == at3["shape"], summary
    assert summary["resumed_from_step"] == grown["step"] and summary["steps"] == STEPS, summary
    codes = sorted(str(b.exit_code) for r in first for b in r.containers)
    saved = sorted({e["step"] for r in first for e in lines(r) if e.get("event") == "checkpoint"})
    print(f"\nelastic: first gang's exit codes {codes}, its checkpoints {saved}")
    print(f"elastic: apply -> Succeeded {took:.0f}s; the trainer's training time "
          f"{goodput(metrics(out)):.0f}s; lost {node} at step {last_step(first)}, resumed at 2 "
          f"nodes from checkpoint {kept} (steps lost: {lost_to_shrink}); grew at step "
          f"{last_step(second)}, resumed at 3 from {grown['step']} (steps lost: "
          f"{max(lost_to_grow, 0)})")  # fmt: skip
