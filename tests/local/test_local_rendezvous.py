"""A node started before the rendezvous host waits for it: real torchrun processes, node 1 first.

Volcano starts a gang's pods minutes apart (image pulls, volume mounts). torchrun's c10d client
gives up after its read timeout (60 s by default), so a node whose pod 0 comes later fails the
gang. Each node's argv and env here are the local backend's own (its TorchX dry run, replica 0
rewritten as on a cluster); only the start order is the test's: node 1, then node 0 once node 1
is blocked in the rendezvous for longer than a short timeout lets a node wait.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from torchx.runner import get_runner

import procs
from trainium_operator.api import naming
from trainium_operator.api.spec import parse
from trainium_operator.local import runner as local
from trainium_operator.manifests import appdef

HERE = Path(__file__).resolve().parent
WORKER = HERE / "dump_worker.py"
#: A rendezvous timeout below the CRD's minimum, only so the failing case ends in seconds.
SHORT = 3
DEADLINE = 180.0
#: torchrun logs this (at LOGLEVEL=INFO) right before it dials the rendezvous store.
ENTERING_RENDEZVOUS = "Starting elastic_operator with launch configs"


def local_run(root: Path, timeout: int | None = None) -> local.LocalRun:
    """A 2-node, 1-process-per-node job running the dump worker, as `trainium run` sees it."""
    doc = {
        "apiVersion": "trainium.dev/v1alpha1",
        "kind": "TrainiumJob",
        "metadata": {"name": "rdzv", "namespace": "default"},
        "spec": {
            "image": "trainium-trainer:local",
            "instanceType": "trn1.2xlarge",
            "nodes": 2,
            "nprocPerNode": 1,
            "precision": "fp32",
            "script": str(WORKER),
            "storage": {"claimName": "fsx-claim"},
        },
    }
    spec = parse(doc)
    if timeout is not None:
        spec = replace(spec, runPolicy=replace(spec.runPolicy, rendezvousTimeoutSeconds=timeout))
    return local.LocalRun(name="rdzv", spec=spec, root=root)


def replicas(run: local.LocalRun) -> list[Any]:
    """Each node's argv and env from the local backend's TorchX dry run of the training stage."""
    runner = get_runner()
    try:
        info = local.dryrun(run, appdef.TRAIN, runner)
    finally:
        runner.close()
    params: list[Any] = info.request.role_params[naming.ROLE]
    return params


class Node:
    """One torchrun process started as TorchX's local scheduler starts a replica."""

    def __init__(self, param: Any, log: Path) -> None:
        self.log = log
        env = {**os.environ, **param.env, "LOGLEVEL": "INFO"}  # INFO only shows progress
        Path(param.env["TORCHELASTIC_ERROR_FILE"]).parent.mkdir(parents=True, exist_ok=True)
        with log.open("w") as out:
            self.proc = procs.track(subprocess.Popen(
                param.args, env=env, cwd=param.cwd, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group: stopping it ends torchrun's workers too
            ))  # fmt: skip

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def running(self) -> bool:
        return self.proc.poll() is None


@pytest.fixture
def nodes() -> Iterator[list[Node]]:
    """Started nodes; any still running at the end are killed (a failed test leaves none)."""
    started: list[Node] = []
    yield started
    for node in started:
        procs.stop_tree(node.proc, grace=2)


def store_is_up(port: int) -> bool:
    """Whether anything accepts connections on the rendezvous port."""
    with socket.socket() as sock:
        return sock.connect_ex(("localhost", port)) == 0


def poll(condition: Callable[[], bool], what: str, deadline: float = DEADLINE) -> None:
    """Wait until condition() holds, failing with `what` after deadline seconds."""
    end = time.monotonic() + deadline
    while not condition():
        assert time.monotonic() < end, f"timed out waiting until {what}"
        time.sleep(0.1)


def test_a_node_gives_up_when_the_store_host_comes_later_than_its_timeout(
    tmp_path: Path, nodes: list[Node]
) -> None:
    run = local_run(tmp_path, timeout=SHORT)
    nodes.append(Node(replicas(run)[1], tmp_path / "node1.log"))
    assert nodes[0].proc.wait(timeout=DEADLINE) != 0
    assert "RendezvousConnectionError" in nodes[0].output()


def test_node_1_started_first_waits_for_a_late_node_0(tmp_path: Path, nodes: list[Node]) -> None:
    run = local_run(tmp_path)  # the CRD's default timeout
    node0_param, node1_param = replicas(run)
    nodes.append(Node(node1_param, tmp_path / "node1.log"))
    node1 = nodes[0]
    poll(lambda: ENTERING_RENDEZVOUS in node1.output(), "node 1 dials the store")
    # Past the short timeout node 1 is still waiting, and it did not host the store itself.
    blocked_since = time.monotonic()
    while time.monotonic() - blocked_since < SHORT + 2:
        assert node1.running(), node1.output()
        assert not store_is_up(run.rdzv_port), "node 1 hosts the store; node 0 must"
        time.sleep(0.2)

    nodes.append(Node(node0_param, tmp_path / "node0.log"))
    for node in nodes:
        assert node.proc.wait(timeout=DEADLINE) == 0, node.output()
    out = Path(appdef.output_dir(run.spec, local.stage_context(run, appdef.TRAIN)))
    dumps = [json.loads((out / f"dump-train-{rank}.json").read_text()) for rank in (0, 1)]
    assert [d["world_size"] for d in dumps] == [2, 2]
    assert [d["sum"] for d in dumps] == [3.0, 3.0]  # ranks 0 and 1 all-reduced (1 + 2)
