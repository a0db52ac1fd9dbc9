"""Set-up shared by the real-trainer modules (test_tier_e2e*.py): nodes, shards, running pods.

The kubelet's running mode (runmode.py, podrun.py) runs every pod of these tests' namespaces as
processes. "The image": every image name (`trainium-trainer:local` here) maps to the worktree's
.venv, which holds what docker/trainer.Dockerfile installs (the trainer extra, CPU torch). The
jobs are trn2.48xlarge (two nodes `trn2_nodes` adds, one process each): trn2's default backend is
native PyTorch, which runs on CPU with gloo and torch.compile's C++ backend when torch-neuronx is
absent; trn1's XLA backend needs torch-xla and neuron_parallel_compile, which this machine lacks.
The shards are written by `trainium data` into the claim's PV directory (the "FSx" file system).
The fixtures (trn2_nodes, shards, running_pods, trainer_pods) reach every tier module through
conftest.py; only modules that ask for them get nodes, shards or running pods.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster import Cluster, wait_until
from harness import OperatorProcess
from jobs import FSX_ID, fsx_claim
from kubelet import Behavior, FakeKubelet, NodeType
from podrun import PodRun

TRN2_48XLARGE = NodeType("trn2.48xlarge", "192", "2048Gi", 16, 128, 16)
NODES = ("trn2-e2e-0", "trn2-e2e-1")
IMAGE = "trainium-trainer:local"  # -> podrun.VENV (the worktree's .venv)
MAX_STEPS = 20
#: Eager CPU unless TRAINIUM_E2E_NATIVE=1 (torch.compile: minutes per job here).
BACKEND_ARGS = [] if os.environ.get("TRAINIUM_E2E_NATIVE") == "1" else ["--backend", "cpu"]
#: The scenarios that take minutes each on a busy machine run only with TRAINIUM_E2E_FAULTS=1.
OPT_IN = pytest.mark.skipif(
    os.environ.get("TRAINIUM_E2E_FAULTS") != "1",
    reason="minutes per scenario: TRAINIUM_E2E_FAULTS=1 runs them",
)
Obj = dict[str, Any]
#: examples/local-tiny-bert.yaml's, with a checkpoint every 10 steps.
TRAINER_ARGS = (
    "bert-pretrain --data-dir /data/bert-synth --model-config tiny --seq-len 64 --batch-size 8"
    " --lr 0.003 --warmup-steps 5 --log-every 5 --checkpoint-every 10"
)


@pytest.fixture(scope="module", name="trn2_nodes")
def nodes_fixture(kubelet: FakeKubelet) -> Iterator[tuple[str, ...]]:
    """Two trn2.48xlarge nodes for this module (only its jobs ask for that instance type)."""
    for name in NODES:
        kubelet.add_node(name, TRN2_48XLARGE)
    yield NODES
    with contextlib.suppress(urllib.error.URLError):  # the control plane may be gone already
        kubelet.remove_nodes([n for n in NODES if n in kubelet.nodes])


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


@pytest.fixture(scope="module", name="shards")
def shards_fixture(kubelet: FakeKubelet) -> Path:
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


def log_events(text: str) -> list[Obj]:
    """The JSON lines of a trainer's log (torchrun's `[default0]:` prefix removed)."""
    out = []
    for line in text.splitlines():
        body = line.split("]:", 1)[1] if line.startswith("[default") else line
        if body.startswith("{"):
            with contextlib.suppress(ValueError):
                out.append(json.loads(body))
    return out


@pytest.fixture(name="running_pods")
def running_fixture(
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


@pytest.fixture(name="trainer_pods")
def trainer_fixture(
    cluster: Cluster, running_pods: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> FakeKubelet:
    """running_pods, the operator running, and the namespace's FSx claim (`fsx-claim`)."""
    fsx_claim(cluster, ns)
    return running_pods


def stopped_with_checkpoint(first: list[PodRun], steps: int) -> int:
    """The gang's trainers were told to stop: every one exited 143 after a checkpoint report;
    the step it kept (before any pod failed, as a health signal's stop should be)."""
    wait_until(lambda: all(r.done.is_set() for r in first), 120, "the first gang stopped")
    codes = [(r.pod["metadata"]["name"], b.exit_code) for r in first for b in r.containers]
    assert all(code == 143 for _, code in codes), codes
    said = "\n".join(r.message(b) for r in first for b in r.containers)
    report = [json.loads(ln) for ln in said.splitlines() if "trainiumCheckpoint" in ln]
    assert report and "stopped:" in said, said
    kept = int(report[-1]["trainiumCheckpoint"]["step"])
    assert 0 < kept < steps, report
    return kept
