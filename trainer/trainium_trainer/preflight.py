"""`python -m trainium_trainer preflight`: is this node fit to train, before the gang starts?

Runs as the training pods' init container (same image): the Neuron devices the pod was given are
present and can be opened, the EFA devices are there, /dev/shm is big enough. A node that fails
exits with contract.EXIT_PREFLIGHT and one line, so the operator keeps the node out and restarts
the gang without charging runPolicy.maxRetries (the node is at fault, not the job).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from trainium_trainer import contract, termination

#: /dev/shm the trainer's data loaders and XLA's host transfers want at least (MiB).
DEFAULT_SHM_MB = 1024
_NEURON = re.compile(r"^neuron\d+$")
_UVERBS = re.compile(r"^uverbs\d+$")


def neuron_problems(root: Path, wanted: int) -> list[str]:
    """Too few /dev/neuron<N> devices, or one that cannot be opened."""
    if wanted <= 0:
        return []
    dev = root / "dev"
    found = sorted(p for p in dev.glob("neuron*") if _NEURON.match(p.name)) if dev.is_dir() else []
    if len(found) < wanted:
        return [f"{len(found)} Neuron devices in /dev (want {wanted})"]
    problems = []
    for path in found:
        try:
            os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
        except OSError as exc:
            problems.append(f"/dev/{path.name} cannot be opened ({exc.strerror or exc})")
    return problems


def efa_problems(root: Path, wanted: int) -> list[str]:
    """Too few EFA devices (RDMA devices in /sys/class/infiniband, or /dev/infiniband/uverbs*)."""
    if wanted <= 0:
        return []
    sys_ib, dev_ib = root / "sys" / "class" / "infiniband", root / "dev" / "infiniband"
    in_sys = len(list(sys_ib.iterdir())) if sys_ib.is_dir() else 0
    in_dev = len([p for p in dev_ib.iterdir() if _UVERBS.match(p.name)]) if dev_ib.is_dir() else 0
    found = max(in_sys, in_dev)
    if found < wanted:
        return [f"{found} EFA devices (/sys/class/infiniband, /dev/infiniband; want {wanted})"]
    return []


def shm_problems(root: Path, wanted_mb: int) -> list[str]:
    """/dev/shm missing, or smaller than wanted."""
    if wanted_mb <= 0:
        return []
    try:
        st = os.statvfs(root / "dev" / "shm")
    except OSError:
        return ["/dev/shm is missing"]
    size_mb = st.f_frsize * st.f_blocks // 2**20
    if size_mb < wanted_mb:
        return [f"/dev/shm is {size_mb} MiB (want {wanted_mb})"]
    return []


def check(root: Path, neuron_devices: int, efa: int, shm_mb: int) -> list[str]:
    """Every problem of the node, in a fixed order."""
    return [
        *neuron_problems(root, neuron_devices),
        *efa_problems(root, efa),
        *shm_problems(root, shm_mb),
    ]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m trainium_trainer preflight", description=__doc__)
    p.add_argument("--neuron-devices", type=int, default=0, help="devices the pod was given")
    p.add_argument("--efa", type=int, default=0, help="EFA interfaces the pod was given")
    p.add_argument("--shm-mb", type=int, default=DEFAULT_SHM_MB, help="/dev/shm at least")
    p.add_argument("--root", type=Path, default=Path("/"), help=argparse.SUPPRESS)  # tests
    return p


def main(argv: Sequence[str]) -> int:
    """Check the node; one line on stdout (fit) or stderr and the termination log (unfit)."""
    ns = _parser().parse_args(argv)
    problems = check(ns.root, ns.neuron_devices, ns.efa, ns.shm_mb)
    if not problems:
        print(f"preflight ok: {ns.neuron_devices} Neuron devices, {ns.efa} EFA", flush=True)
        return 0
    node = os.environ.get(contract.ENV_NODE_NAME, "")
    line = f"{contract.PREFLIGHT_FAILED} {'; '.join(problems)}" + (
        f" (node {node})" if node else ""
    )
    print(line, file=sys.stderr, flush=True)
    with contextlib.suppress(OSError):
        termination.leave_outcome(Path(contract.TERMINATION_LOG), line)
    return contract.EXIT_PREFLIGHT
