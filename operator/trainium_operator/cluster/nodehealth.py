"""In the job's pass: the live training gang's pods whose node says it is unhealthy, and the
node of each pod index (a straggler's, stragglers.py).

The node index (watches.node_health) holds only unhealthy Nodes, with why; the pod index
(watches.gang_pods) where each of the job's pods is bound. Both are kopf's, read here without a
request; outside the operator (no watches) no node health is judged. The verdict is pure
(domain/health.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from trainium_operator.api import naming
from trainium_operator.cluster import reads
from trainium_operator.domain import health
from trainium_operator.domain.failures import Failure
from trainium_operator.manifests.ownership import Owner

Index = Mapping[Any, Iterable[Any]]
#: The gang's pods -> node: why, for the nodes a DRA device taint says are unhealthy.
Devices = Callable[[Sequence[health.GangPod]], Mapping[str, str]]
#: Pod phases of a gang pod that still runs on its node (or is about to).
_ON_NODE = frozenset({"Pending", "Running"})


def look(
    owner: Owner, indices: tuple[Index, Index] | None, gang: str, excluded: Sequence[str],
    devices: Devices | None = None,
) -> Failure | None:  # fmt: skip
    """The first pod of the Volcano job `gang` on an unhealthy node not yet kept out (`devices`:
    the nodes whose DRA device the gang's claims hold is tainted, cluster/devicetaints.py)."""
    if indices is None or not gang:
        return None
    sick, pods = indices
    on = [
        health.GangPod(e["name"], e["node"])
        for e in reads.lookup(pods, ("job", owner.uid))
        if isinstance(e, Mapping) and _live_of(e, gang)
    ]
    verdicts = {p.node: said for p in on if (said := _first(sick, p.node)) is not None}
    if devices is not None:
        verdicts = {**devices(on), **verdicts}
    return health.unhealthy(on, verdicts, excluded)


def gang_nodes(owner: Owner, indices: tuple[Index, Index] | None, gang: str) -> dict[int, str]:
    """The live gang's node by pod index ({}: not watched), to name a straggler's node."""
    if indices is None or not gang:
        return {}
    out = {}
    for e in reads.lookup(indices[1], ("job", owner.uid)):
        if isinstance(e, Mapping) and _live_of(e, gang):
            index = naming.node_index(e["name"])
            if index is not None:
                out[index] = str(e["node"])
    return out


def _live_of(entry: Mapping[str, Any], gang: str) -> bool:
    name, node = entry.get("name"), entry.get("node")
    if not (isinstance(name, str) and isinstance(node, str) and node):
        return False
    return naming.gang_of(name) == gang and entry.get("phase") in _ON_NODE


def _first(index: Index, key: str) -> str | None:
    """The node's verdict, if the index has one."""
    found = reads.lookup(index, key)
    return str(found[0]) if found else None
