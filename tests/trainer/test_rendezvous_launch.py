"""Node 0 of a cluster gang hosts the c10d store from its index alone (issue 35).

Every pod of a stage runs one argv: the other nodes' (`--rdzv_endpoint <pod 0's DNS name>`,
`is_host=0`). Here pod 0's DNS name does not resolve, as on a cluster before its record exists:
the node whose TRAINIUM_NODE_INDEX is 0 must host the store on localhost by itself, through the
trainer's torchrun wrapper and through `python3 -c <rendezvous.py>` (images without the trainer).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from trainer_utils import free_port

from trainium_operator.manifests import appdef
from trainium_trainer import contract

LAUNCHERS = {
    "wrapper": ["-m", contract.TORCHRUN_MODULE],
    "program": ["-c", appdef.RENDEZVOUS_PROGRAM],
}


def _launch(
    launcher: list[str], tmp_path: Path, index: str | None
) -> subprocess.CompletedProcess[str]:
    worker = tmp_path / "worker.py"
    worker.write_text("import os\nprint('rank', os.environ['RANK'], flush=True)\n", "utf-8")
    argv = [sys.executable, *launcher, "--nnodes", "1", "--nproc_per_node", "1"]
    argv += ["--rdzv_backend", "c10d", "--rdzv_endpoint", f"pod-0.gang.invalid:{free_port()}"]
    argv += ["--rdzv_conf", "is_host=0,join_timeout=60,read_timeout=5", "--rdzv_id", "j-train"]
    argv += ["--max_restarts", "0", str(worker)]
    env = {k: v for k, v in os.environ.items() if k != contract.ENV_NODE_INDEX}
    if index is not None:
        env[contract.ENV_NODE_INDEX] = index
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_node_0_hosts_the_store_without_pod_0s_dns_record(launcher: str, tmp_path: Path) -> None:
    proc = _launch(LAUNCHERS[launcher], tmp_path, "0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rank 0" in proc.stdout


def test_another_node_dials_pod_0(tmp_path: Path) -> None:
    """Without index 0 the argv is kept: the node dials the (here unresolvable) store host."""
    proc = _launch(LAUNCHERS["program"], tmp_path, "1")
    assert proc.returncode != 0 and "rank 0" not in proc.stdout
    assert "pod-0.gang.invalid" in proc.stderr
