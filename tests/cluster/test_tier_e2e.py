"""Issue 40: the real trainer runs inside the tier's pods, started only from the operator's pods.

The kubelet's running mode (runmode.py, podrun.py) runs every pod of these tests' namespaces as
processes. "The image": every image name (`trainium-trainer:local` here) maps to the worktree's
.venv, which holds what docker/trainer.Dockerfile installs (the trainer extra, CPU torch). The
jobs are trn2.48xlarge (two nodes this module adds, one process each): trn2's default backend is
native PyTorch, which runs on CPU with gloo and torch.compile's C++ backend when torch-neuronx is
absent; trn1's XLA backend needs torch-xla and neuron_parallel_compile, which this machine lacks.
The shards are written by `trainium data` into the claim's PV directory (the "FSx" file system).
No test here writes a termination message, a metric or a checkpoint: the trainer does.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster import Cluster, wait_until
from harness import OperatorProcess
from jobs import FSX_ID, TJ, VCJOB, children, create, fsx_claim, get, wait_condition
from kubelet import Behavior, FakeKubelet, NodeType

TRN2_48XLARGE = NodeType("trn2.48xlarge", "192", "2048Gi", 16, 128, 16)
NODES = ("trn2-e2e-0", "trn2-e2e-1")
IMAGE = "trainium-trainer:local"  # -> podrun.VENV (the worktree's .venv)
MAX_STEPS = 20
#: Eager CPU unless TRAINIUM_E2E_NATIVE=1 (torch.compile: minutes per job here).
BACKEND_ARGS = [] if os.environ.get("TRAINIUM_E2E_NATIVE") == "1" else ["--backend", "cpu"]
Obj = dict[str, Any]
#: examples/local-tiny-bert.yaml's, with a checkpoint every 10 steps.
TRAINER_ARGS = (
    "bert-pretrain --data-dir /data/bert-synth --model-config tiny --seq-len 64 --batch-size 8"
    " --lr 0.003 --warmup-steps 5 --log-every 5 --checkpoint-every 10"
)


@pytest.fixture(scope="module")
def trn2_nodes(kubelet: FakeKubelet) -> Iterator[tuple[str, ...]]:
    """Two trn2.48xlarge nodes for this module (only its jobs ask for that instance type)."""
    for name in NODES:
        kubelet.add_node(name, TRN2_48XLARGE)
    yield NODES
    with contextlib.suppress(urllib.error.URLError):  # the control plane may be gone already
        kubelet.remove_nodes(NODES)


def tiny_bert(
    name: str, ns: str, steps: int = MAX_STEPS, args: tuple[str, ...] = (), **spec: Any
) -> Obj:
    """examples/local-tiny-bert.yaml's training, on two trn2 nodes of the tier, one process each."""
    body: Obj = {
        "apiVersion": "trainium.dev/v1alpha1",
        "kind": "TrainiumJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "image": IMAGE,
            "instanceType": TRN2_48XLARGE.name,
            "nodes": 2,
            "nprocPerNode": 1,
            "precision": "fp32",
            "module": "trainium_trainer",
            "args": [*TRAINER_ARGS.split(), "--max-steps", str(steps), *BACKEND_ARGS, *args],
            "storage": {"claimName": "fsx-claim"},
            "cache": {"name": "tiny-bert-e2e"},
            "precompile": {"policy": "IfNotCached", "steps": 2},
            "scheduling": {"queue": "test"},
        },
    }
    body["spec"].update(spec)
    return body


def volume(kubelet: FakeKubelet) -> Path:
    """The FSx file system of jobs.fsx_claim as a directory here (every pod mounts it at /data)."""
    return kubelet.pods_root / "pv" / FSX_ID


@pytest.fixture(scope="module")
def shards(kubelet: FakeKubelet) -> Path:
    """Synthetic BERT shards on the file system, written once by `trainium data`."""
    out = volume(kubelet) / "bert-synth"
    if not (out / "vocab.txt").exists():
        trainium = str(Path(sys.executable).with_name("trainium"))
        argv = [trainium, "data", "synth-bert", "--out", str(out), "--shards", "2",
                "--seq-len", "64"]  # fmt: skip
        subprocess.run(argv, check=True, capture_output=True, timeout=300)
    return out


def metrics(output: Path) -> list[Obj]:
    path = output / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def goodput(records: list[Obj]) -> float:
    """The trainer's own training time (s): each logged interval's samples over its rate."""
    total, samples = 0.0, 0
    for record in records:
        if "loss" in record and record.get("samples_per_second"):
            total += (record["samples"] - samples) / record["samples_per_second"]
            samples = record["samples"]
    return total


@pytest.fixture
def running_pods(
    kubelet: FakeKubelet, trn2_nodes: tuple[str, ...], shards: Path, ns: str
) -> Iterator[FakeKubelet]:
    """Every pod of the test's namespace runs as processes; all of them killed at its end."""
    if os.geteuid() != 0 or not (shutil.which("ip") and shutil.which("unshare")):
        pytest.skip("running pods needs root, ip (iproute2) and unshare (util-linux)")
    kubelet.plan({}, Behavior(outcome="Run"), namespace=ns)
    yield kubelet
    for run in kubelet.runs(ns):
        run.kill()
    for run in kubelet.runs(ns):
        run.done.wait(30)


def test_tutorial_shape_precompile_then_training_with_the_real_trainer(
    cluster: Cluster, running_pods: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    kubelet = running_pods
    fsx_claim(cluster, ns)
    began = time.monotonic()
    create(cluster, tiny_bert("tiny", ns))
    seen: list[Obj] = []

    def progress() -> Obj | None:
        job = get(cluster, TJ, "tiny", ns) or {}
        found = (job.get("status") or {}).get("progress") or {}
        if found.get("step"):
            seen.append(found)
        return found if found.get("step") or job.get("status", {}).get("phase") in (
            "Succeeded", "Failed") else None  # fmt: skip

    wait_until(progress, 420, "progress from rank 0's metrics, or the end", every=1)
    job = wait_condition(cluster, "tiny", ns, "Succeeded", timeout=420)
    took = time.monotonic() - began
    status = job["status"]
    assert status["cache"]["outcome"] == "miss", status
    stages = {
        v["metadata"]["labels"]["trainium.dev/stage"] for v in children(cluster, VCJOB, ns, "tiny")
    }
    assert stages == {"precompile", "train"}, stages
    # Progress on status came from the real rank 0: the total is the trainer's --max-steps.
    assert seen and seen[-1]["totalSteps"] == MAX_STEPS, seen
    out = volume(kubelet) / "output" / "tiny"
    records = [r for r in metrics(out) if "loss" in r]
    assert records and records[-1]["step"] == MAX_STEPS, records[-3:]
    assert records[-1]["loss"] < records[0]["loss"], [(r["step"], r["loss"]) for r in records]
    assert sorted(p.name for p in out.glob("checkpoint*")), sorted(p.name for p in out.iterdir())
    probe = ("import sys, transformers; m = transformers.AutoModelForPreTraining.from_pretrained("
             "sys.argv[1]); print(type(m).__name__)")  # fmt: skip
    loaded = subprocess.run([sys.executable, "-c", probe, str(out / "model")], check=True,
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert "Bert" in loaded.stdout, loaded.stdout
    # The precompile gang ran the trainer's precompile mode; the cache dirs are on the volume.
    pre = [r for r in kubelet.runs(ns) if r.pod["metadata"]["labels"].get("trainium.dev/stage")
           == "precompile"]  # fmt: skip
    assert pre and all(b.exit_code == 0 for r in pre for b in r.containers), pre
    print(f"tutorial shape: apply -> Succeeded in {took:.0f}s")

    # A second job with the same cache key skips the precompile.
    create(cluster, tiny_bert("again", ns, steps=5))  # the step limit is not in the cache key

    def training_from_the_cache() -> Obj | None:
        status = (get(cluster, TJ, "again", ns) or {}).get("status") or {}
        gangs = children(cluster, VCJOB, ns, "again")
        return status if gangs and (status.get("cache") or {}).get("outcome") else None

    status = wait_until(training_from_the_cache, 300, "again's cache outcome and gang", every=1)
    assert status["cache"]["outcome"] == "hit", status
    stages = {v["metadata"]["labels"]["trainium.dev/stage"]
              for v in children(cluster, VCJOB, ns, "again")}  # fmt: skip
    assert stages == {"train"}, stages
    # Training from the cache was shown above; its pods get SIGTERM now (CI's minutes count).
    cluster.kubectl("delete", TJ, "again", "-n", ns, "--timeout=120s")
