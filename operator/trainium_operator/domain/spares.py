"""Pure: spare nodes (spec.spares): the gang's reservation, and when a spare takes a node's place.

A training gang is spec.nodes training pods (Volcano task `node`, the torchrun world) and
spec.spares standby pods (task `spare`, manifests/spares.py): Volcano's gang minAvailable and
the Kueue Workload's pod count include the spares, as SageMaker HyperPod's do (4 nodes + 2
spares ask for 6 pods), so their nodes are reserved with the job. A standby pod never joins the
world: torchrun's world and every rendezvous are the `node` task's.

A swap: when a training node is lost, Volcano restarts the gang (a pod gone is a disruption,
budget.py: no runPolicy.maxRetries spent), which cannot form again at nodes + reserved on the
nodes left. The operator lowers the gang's reservation, and its spare pods, to what the nodes
left hold beyond spec.nodes; the `node` task's minAvailable stays spec.nodes, so Volcano places
every training index, node 0 (the rendezvous host, naming.rank0_host) too, on the nodes left, a
spare's node among them: the same world size, so the same cache entry (no compile), resuming
from the newest checkpoint. Once the gang runs again, its spare task goes back to spec.spares
pods: the replacement spare it asks for, Pending until a node has room (asked earlier, a spare
pod could take a node a training pod needs: Volcano orders a job's pods, not us). Only with no
spare reserved does the elastic shrink (or the whole-gang restart, waiting for a node) take over.

A node marked bad rather than lost (health.py's signals, a node fault's verdict, a straggler
replaced: stragglers.py) takes the same swap: the operator stops the gang (the trainer
checkpoints on the SIGTERM) and creates the next one with the node kept out (supervise.py,
nodes.py; a disruption, no runPolicy.maxRetries spent), and `taken_out` adds the node to
status.spares.lost in that pass. The next gang asks for every spare at first, waits on the
nodes left, and `decide` lowers its reservation like a restarted gang's: a spare's node holds
the bad node's place, the swap naming the node and the class that marked it bad (its
status.excludedNodes entry). Once the gang runs, `replacement` names on lastSwap the spare's
node that joined the world (told in a second SpareSwapped Event, `joined`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainium_operator.api.spec import TrainiumJobSpec
from trainium_operator.domain.failures import NODE_FAULTS

Json = dict[str, Any]
#: The Event a swap posts on the TrainiumJob.
EVENT_REASON = "SpareSwapped"
#: The Volcano task of the standby pods (the training pods' is naming.TASK).
SPARE_TASK = "spare"
#: The reason a swap gives when the lost node's pod was removed because its Node is gone.
NODE_GONE = "NodeGone"


def gang_min(spec: TrainiumJobSpec, reserved: int | None = None) -> int:
    """The gang's minAvailable: the training nodes and the spares it reserves (all: None)."""
    return spec.nodes + (spec.spares if reserved is None else max(0, min(reserved, spec.spares)))


def spare_replicas(spec: TrainiumJobSpec, vcjob: Mapping[str, Any] | None) -> int:
    """The spare pods a live Volcano job asks for (its spare task's replicas)."""
    for task in ((vcjob or {}).get("spec") or {}).get("tasks") or ():
        if isinstance(task, Mapping) and task.get("name") == SPARE_TASK:
            found = task.get("replicas")
            return found if isinstance(found, int) and not isinstance(found, bool) else spec.spares
    return spec.spares


def reserved_of(spec: TrainiumJobSpec, vcjob: Mapping[str, Any] | None) -> int:
    """The spares a live Volcano job reserves: its minAvailable less spec.nodes (0..spares)."""
    found = ((vcjob or {}).get("spec") or {}).get("minAvailable")
    if not isinstance(found, int) or isinstance(found, bool):
        return spec.spares
    return max(0, min(found - spec.nodes, spec.spares))


@dataclass(frozen=True)
class Gang:
    """What the swap decision sees of the live training gang."""

    #: Spares its reservation holds now (reserved_of).
    reserved: int
    #: It has not formed (pods pending, or restarting).
    waiting: bool
    #: It formed before: Volcano restarted it (status.retryCount > 0), not a first start.
    restarted: bool
    #: It runs (formed); and the spare pods it asks for (its spare task's replicas).
    running: bool = False
    replicas: int = 0


@dataclass(frozen=True)
class Swap:
    """The gang's reservation drops so that it forms again at the same world size."""

    old: int
    new: int
    #: The training node that went ("": not known to this pass), and why.
    node: str
    reason: str
    #: Nodes the gang's spares stood on before (status.spares.standby).
    standby: tuple[str, ...] = ()


def replenish(
    spec: TrainiumJobSpec, gang: Gang | None, standing: int | None
) -> tuple[int, int] | None:
    """(reserved, replicas) a running gang is patched to (None: it stays): after a swap it asks
    for its replacement spares (its spare task back to spec.spares pods: a swap drops the pods it
    no longer reserves, so that no spare takes a node a training pod needs while the gang forms;
    Volcano orders a job's pods, not us), and a replacement that stands by (`standing`, running
    spare pods) is reserved again, so the next lost node is swapped too."""
    if spec.spares == 0 or gang is None or not gang.running:
        return None
    reserved = max(gang.reserved, min(standing or 0, spec.spares))
    if (reserved, spec.spares) == (gang.reserved, gang.replicas):
        return None
    return reserved, spec.spares


def needs_count(spec: TrainiumJobSpec, gang: Gang | None) -> bool:
    """Whether this pass must count the schedulable nodes: a swap may be due."""
    return spec.spares > 0 and gang is not None and _due(gang)


def _due(gang: Gang) -> bool:
    return gang.waiting and gang.restarted and max(gang.reserved, gang.replicas) > 0


def decide(
    spec: TrainiumJobSpec, gang: Gang | None, schedulable: int | None, lost: tuple[str, str],
    standby: Sequence[str] = (),
) -> Swap | None:  # fmt: skip
    """The swap to make now (None: none): a restarted gang that waits on at least spec.nodes
    nodes, fewer than its training and spare pods. lost: (node, reason) last seen."""
    if spec.spares == 0 or gang is None or schedulable is None or not _due(gang):
        return None
    if schedulable < spec.nodes:
        return None  # no spare can fill the place: the elastic shrink or the gang restart
    room = schedulable - spec.nodes
    new = min(gang.reserved, room)
    if new >= gang.reserved and gang.replicas <= room:
        return None
    node, reason = lost
    gone = tuple(n for n in standby if n != node)
    return Swap(gang.reserved, new, node, reason or NODE_GONE, gone)


def message(spec: TrainiumJobSpec, swap: Swap) -> str:
    """The SpareSwapped Event's message: which node, for which spares, why, what follows."""
    which = f"training node {swap.node}" if swap.node else "a training node"
    stood = f" (spares stood on {', '.join(swap.standby)})" if swap.standby else ""
    asked = spec.spares - swap.new
    went = "was lost" if swap.reason == NODE_GONE else "was taken out"
    return (
        f"{which} {went} ({swap.reason}): a spare's node takes its place{stood}; the gang "
        f"restarts at the same world size, {spec.nodes} nodes (no compile, no "
        "runPolicy.maxRetries spent), from the newest checkpoint; it reserves "
        f"{swap.new} of {spec.spares} spare(s) now and asks for {asked} replacement(s) once "
        "it trains again"
    )


@dataclass(frozen=True)
class Seen:
    """What a pass saw of the live gang's spares (None: not looked at)."""

    reserved: int | None = None
    #: The nodes its spare pods stand by on.
    standby: Sequence[str] | None = None
    #: Training nodes whose pods this pass removed because the Node is gone (or taken_out).
    lost: Sequence[str] = ()
    #: The nodes the live gang's training pods are bound to (None: not known in this pass).
    training: Sequence[str] | None = None


#: The CRD's maxItems of status.spares.lost.
MAX_LOST = 16


def status(
    spec: TrainiumJobSpec, previous: Mapping[str, Any], seen: Seen, swap: Swap | None, now: str
) -> Json | None:
    """status.spares after this pass (None: the job has no spares)."""
    if spec.spares == 0:
        return None
    before = previous.get("spares") if isinstance(previous.get("spares"), Mapping) else {}
    assert isinstance(before, Mapping)
    out: Json = {k: before[k] for k in ("swaps", "lastSwap", "standby", "lost") if k in before}
    out.update(wanted=spec.spares, reserved=spec.spares if seen.reserved is None else seen.reserved)
    out.setdefault("swaps", 0)
    if seen.standby is not None:
        out["standby"] = sorted(seen.standby)
    if seen.lost:
        out["lost"] = [*lost_since(previous), *seen.lost][-MAX_LOST:]
    if swap is None:
        _joined(out, seen.training)
        return out
    # the spares it had joined the world or wait for a node: looked at again once it runs
    out.update(reserved=swap.new, swaps=int(out["swaps"]) + 1, lost=[], standby=[])
    out["lastSwap"] = {
        "node": swap.node, "spares": list(swap.standby), "reason": swap.reason,
        "message": message(spec, swap)[:1024], "time": now,
    }  # fmt: skip
    return out


def _joined(out: Json, training: Sequence[str] | None) -> None:
    """lastSwap.replacement, once a training pod is seen on a node a spare stood on then."""
    last = out.get("lastSwap")
    if not isinstance(last, Mapping) or last.get("replacement") or training is None:
        return
    found = replacement(last, training)
    if found:
        out["lastSwap"] = {**last, "replacement": found}


def replacement(last: Mapping[str, Any], training: Sequence[str]) -> str | None:
    """The node that took the swapped node's place: one its spares stood on then that trains
    now (the first by name when several do); None until seen, or if their nodes were unknown."""
    stood = [n for n in last.get("spares") or () if isinstance(n, str)]
    joined = sorted(set(stood) & set(training))
    return joined[0] if joined else None


def joined(previous: Mapping[str, Any], now: Mapping[str, Any] | None) -> str | None:
    """The follow-up SpareSwapped Event's message when this pass named lastSwap.replacement."""
    before = ((previous.get("spares") or {}) if isinstance(previous, Mapping) else {}).get(
        "lastSwap"
    ) or {}
    last = (now or {}).get("lastSwap") or {}
    found = last.get("replacement")
    if not found or before.get("replacement") == found:
        return None
    which = f"training node {last['node']}" if last.get("node") else "the training node"
    return (
        f"the spare on node {found} took the place of {which} ({last.get('reason')}): it "
        "trains in the world now, at the same world size"
    )


def taken_out(spec: TrainiumJobSpec, node: str | None, replacing: bool) -> tuple[str, ...]:
    """The node a gang stopped for its fault leaves (health, verdict, straggler): a spare may
    take its place, so it joins status.spares.lost as a lost node does (none: no spares)."""
    return (node,) if spec.spares > 0 and replacing and node else ()


def lost_since(previous: Mapping[str, Any]) -> list[str]:
    """Training nodes lost since the last swap (status.spares.lost), oldest first."""
    found = (previous.get("spares") or {}).get("lost") if isinstance(previous, Mapping) else None
    return [n for n in found or () if isinstance(n, str)]


def lost_node(
    failure_node: str | None, failure_reason: str | None, lost: Sequence[str] = (),
    excluded: Mapping[str, str] | None = None,
) -> tuple[str, str]:  # fmt: skip
    """(node, reason) a swap names: the latest training node lost since the last swap (NodeGone,
    or the reason status.excludedNodes gives a node taken out: NodeUnhealthy, Straggler...),
    else the node a node fault pointed at. An eviction's node is not evidence: Volcano's
    restart stops every pod of the gang, on healthy nodes too."""
    if lost:
        return lost[-1], (excluded or {}).get(lost[-1]) or NODE_GONE
    if failure_node and failure_reason in NODE_FAULTS:
        return failure_node, str(failure_reason)
    return "", NODE_GONE
