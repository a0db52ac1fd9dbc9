"""Pure: which pods `trainium logs` reads, and how each line is labelled with its node and rank.

torchrun runs with `--tee 3`, so every worker line starts with its local rank (`[default3]:`);
a pod is one node (named by naming.pod_name), so node i's local rank r is global rank
i x nprocPerNode + r, as torchrun assigns them with one process group per node.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainium_operator.api import naming

Json = Mapping[str, Any]
_TEE = re.compile(r"^\[(?:[A-Za-z_]+)?(\d+)\]:")
#: kubectl's JSONPath of a failure's log tail, one line each (status.lastFailure.logTail).
TAIL_PATH = '{range .status.lastFailure.logTail[*]}{@}{"\\n"}{end}'


@dataclass(frozen=True)
class Target:
    """What the user asked for: a stage, maybe one node, maybe one global rank."""

    stage: str = "train"
    node: int | None = None
    rank: int | None = None
    nprocs: int = 1

    @property
    def wanted_node(self) -> int | None:
        """The node to read: the one named, or the one that runs the rank."""
        if self.rank is not None:
            return self.rank // self.nprocs
        return self.node


def out_of_range(job: str, target: Target, nodes: int | None) -> str | None:
    """Why --rank or --node names nothing in a job of `nodes` nodes (None: fine, or unknown)."""
    if nodes is None:
        return None
    world = nodes * target.nprocs
    if target.rank is not None and not 0 <= target.rank < world:
        shape = f"{counted(nodes, 'node')} x {counted(target.nprocs, 'process', 'processes')}"
        ranks = f"{counted(world, 'rank')} ({_span(world)}: {shape})"
        return f"--rank {target.rank}: job {job} has {ranks}"
    if target.node is not None and not 0 <= target.node < nodes:
        return f"--node {target.node}: job {job} has {counted(nodes, 'node')} ({_span(nodes)})"
    return None


def counted(n: int, one: str, many: str | None = None) -> str:
    """`1 node`, `2 nodes`, `1 process`, `4 processes`."""
    return f"{n} {one if n == 1 else many or one + 's'}"


def _span(n: int) -> str:
    """The indices 0..n-1 as a user reads them."""
    return "0" if n == 1 else f"0-{n - 1}"


def node_of(pod_name: str) -> int | None:
    """The node index Volcano put in the pod's name."""
    return naming.node_index(pod_name)


def select(pods: Sequence[Json], target: Target) -> list[tuple[int, str]]:
    """(node, pod name) of the pods to read, by node."""
    found = [(node_of(str(p["metadata"]["name"])), str(p["metadata"]["name"])) for p in pods]
    wanted = target.wanted_node
    return sorted((n, name) for n, name in found if n is not None and wanted in (None, n))


def label(line: str, node: int, target: Target) -> str | None:
    """The line with `node N rank R | ` in front (None: another rank's, when one is asked for)."""
    m = _TEE.match(line)
    if m is None:  # torchrun's own lines, or a launcher without --tee
        return None if target.rank is not None else f"node {node} | {line}"
    rank = node * target.nprocs + int(m.group(1))
    if target.rank is not None and rank != target.rank:
        return None
    return f"node {node} rank {rank} | {line[m.end() :]}"


def container_of(pod: Json) -> str:
    """The trainer's container (TorchX names it after the role)."""
    containers = (pod.get("spec") or {}).get("containers") or []
    return str(containers[0]["name"]) if containers else naming.ROLE


def ended_note(name: str, status: Json, namespace: str) -> str | None:
    """For a finished or failed job: where its last failure's tail is (None while it runs)."""
    phase = status.get("phase")
    failure = status.get("lastFailure") or {}
    if phase not in ("Succeeded", "Failed") and not failure:
        return None
    head = f"job {name} is {phase}"
    if not failure:
        return f"{head}; its pods' logs stay readable while the pods exist"
    first = str(failure.get("message", "")).splitlines()[0] if failure.get("message") else ""
    return (
        f"{head}; last failure {failure.get('reason')}: {first}\n"
        f"its log tail is in status.lastFailure.logTail: kubectl get tj {name} -n {namespace} "
        f"-o jsonpath='{TAIL_PATH}'"
    )
