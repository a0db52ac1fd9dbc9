"""What a pass concludes from its reads before deciding: the job's own status and budget, its
gang's progress, and the nodes to take out (hung, unhealthy, slow) or swap for a spare.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from trainium_operator.api import parsed
from trainium_operator.api.spec import TrainiumJobSpec
from trainium_operator.cluster import gangs, lookagain, nodehealth, report, scrape, sparesio
from trainium_operator.cluster.observe import Seen, Views
from trainium_operator.cluster.report import Emit
from trainium_operator.domain import (
    budget,
    elastic,
    events,
    nodes,
    spares,
    specdigest,
    status,
    stragglers,
    supervise,
)
from trainium_operator.domain.failures import Failure
from trainium_operator.domain.lifecycle import Child, Observed
from trainium_operator.manifests import dra
from trainium_operator.manifests.ownership import Owner

Json = dict[str, Any]


def judge(
    body: Json, spec: TrainiumJobSpec, seen: Seen, views: Views
) -> tuple[Seen, Observed, budget.Accounted]:
    """Add to what was observed what the job itself says: its status, budget, spec, progress."""
    previous = report.status_of(body)
    counted = budget.account(
        budget.read(previous), seen.gang, seen.observed.failure, spec.runPolicy.maxRetries,
        mirrored=budget.legacy(previous),
    )  # fmt: skip
    owner = gangs.owner_of(body["metadata"])
    seen, redo = _watch(spec, owner, seen, previous, views)
    if redo is not None:
        counted = budget.replaced(counted, redo.reason, spec.runPolicy.maxRetries)
    deadline_in = lookagain.deadline_in(spec, previous)
    observed = replace(
        seen.observed,
        failure=redo or supervise.explain_unschedulable(seen.observed.failure, previous),
        replace_gang=redo is not None and counted.exhausted is None,
        restarts=counted.tally.restarts,
        disruptions=counted.tally.disruptions,
        exhausted=counted.exhausted,
        changed_fields=specdigest.changed(parsed.digests(body), previous),
        previous_phase=previous.get("phase"),
        previous_conditions=status.read_conditions(previous),
        suspend=spec.runPolicy.suspend,
        deadline_exceeded=deadline_in is not None and deadline_in <= 0,
    )
    return seen, observed, counted


def _watch(
    spec: TrainiumJobSpec, owner: Owner, seen: Seen, previous: Json, views: Views
) -> tuple[Seen, Failure | None]:
    """Read the training gang's progress when due; whether it must be replaced (hung, bad node)."""
    training = seen.observed.training
    uid = seen.gang.uid if seen.gang is not None and training is not Child.ABSENT else None
    sight = scrape.Sight(
        training, uid, previous, scrape.read_time(), views.memory.metrics_read_at,
        rank0=views.rank0_pod, watched=views.pods_watched, last_progress=views.memory.progress,
    )  # fmt: skip
    watched = scrape.look(spec, owner, sight)
    gang = ((seen.train.job if seen.train else None) or {}).get("metadata", {}).get("name", "")
    sick = nodehealth.look(
        owner, views.health, gang, nodes.names(previous), _device_taints(spec, owner, views)
    )
    judged, slow = _stragglers(spec, owner, views, gang, previous, watched, seen)
    excluded, redo = supervise.gang_to_replace(
        seen.observed.failure, training, previous, watched.hung, sick or slow
    )
    seen = replace(
        seen, progress=watched.write, progress_in=watched.next_read_in,
        excluded_nodes=excluded, metrics_read_at=watched.read_at, progress_read=watched.latest,
        stragglers=judged.entries, straggler_flags=judged.flagged,
    )  # fmt: skip
    return seen, redo


def _device_taints(spec: TrainiumJobSpec, owner: Owner, views: Views) -> nodehealth.Devices | None:
    """A DRA job's device-taint verdicts (watched from its first pass on); None: not DRA."""
    watches = views.devices
    if watches is None or not dra.uses_dra(spec):
        return None
    watches.need()
    return lambda pods: watches.verdicts(owner.namespace, pods)


def _stragglers(
    spec: TrainiumJobSpec, owner: Owner, views: Views, gang: str, previous: Json,
    watched: scrape.Reading, seen: Seen,
) -> tuple[stragglers.Judged, Failure | None]:  # fmt: skip
    """Judge this reading's step times (stragglers.py); a flagged node due out now, if asked."""
    live = seen.checkpoint.step if seen.checkpoint else None
    checkpoint = elastic.newest_step((watched.latest or {}).get("checkpointStep"), live)
    before = [e for e in previous.get("stragglers") or () if isinstance(e, dict)]
    judged = stragglers.Judged(None)
    if watched.node_steps:
        names = nodehealth.gang_nodes(owner, views.health, gang)
        judged = stragglers.judge(
            watched.node_steps, names, before, spec.stragglers, views.now, checkpoint
        )
    entries = before if judged.entries is None else judged.entries
    return judged, stragglers.to_replace(
        entries, spec.stragglers, checkpoint, nodes.names(previous)
    )


def spares_status(
    body: Json, spec: TrainiumJobSpec, owner: Owner, seen: Seen, views: Views, emit: Emit,
    lost: tuple[str, ...], observed: Observed,
) -> Json | None:  # fmt: skip
    """status.spares; a swap (a spare's node for a lost or bad one, same world size) made and
    told, and the spare's node that joined the world told once seen."""
    previous = report.status_of(body)
    out = observed.failure.node if observed.replace_gang and observed.failure else None
    lost = (*lost, *spares.taken_out(spec, out, observed.replace_gang))
    gang = ((seen.train.job if seen.train else None) or {}).get("metadata", {}).get("name", "")
    training = nodehealth.gang_nodes(owner, views.health, gang) if views.health else None
    found = spares.Seen(
        None, sparesio.standby(spec, owner, previous, seen), lost,
        None if training is None else sorted(set(training.values())),
    )  # fmt: skip
    looked = sparesio.look(spec, owner, previous, seen, views.now, found)
    if looked.swap is not None:
        message = spares.message(spec, looked.swap)
        emit(body, "Normal", spares.EVENT_REASON, message, events.RESTART)
    elif said := spares.joined(previous, looked.status):
        emit(body, "Normal", spares.EVENT_REASON, said, events.RESTART)
    return looked.status
