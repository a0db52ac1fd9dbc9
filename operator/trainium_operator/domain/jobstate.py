"""Per-job state metrics, computed at scrape time from the TrainiumJob objects' status.

Why at scrape time: a gauge kept up to date by handlers drifts (restarts, missed deletes) and a
phase count cannot say which job is slow. Reading the objects (a kopf index) at each scrape
gives one series per job that disappears with the job, and a phase start time to alert on.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from trainium_operator.domain.model import Phase

Json = dict[str, Any]
#: (namespace, name, status) of every TrainiumJob the operator sees.
JobSource = Callable[[], Iterable[tuple[str, str, Json]]]
#: A kopf index: (namespace, name) -> the statuses indexed under it.
JobIndex = Mapping[tuple[str, str], Iterable[Json]]

#: Every phase, exported at 0 when no job is in it.
PHASES = tuple(p.value for p in Phase)
#: The condition whose lastTransitionTime is when the job entered each phase: (type, status).
PHASE_CONDITION = {
    "Precompiling": ("Precompiled", "False"),
    "Training": ("Running", "True"),
    "Succeeded": ("Succeeded", "True"),
    "Failed": ("Failed", "True"),
}


def _epoch(timestamp: Any) -> float | None:
    """Seconds since the epoch of an RFC 3339 timestamp; None when absent or malformed."""
    if not isinstance(timestamp, str):
        return None
    try:
        parsed = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.timezone.utc)
    return parsed.timestamp()


def history_since(status: Mapping[str, Any]) -> Any:
    """When status.history says the current phase began (its last entry of that phase)."""
    entries, phase = status.get("history"), status.get("phase")
    if not isinstance(entries, list):
        return None
    for entry in reversed(entries):
        if isinstance(entry, dict) and entry.get("phase") == phase:
            return entry.get("since")
    return None


def phase_started(status: Json) -> float | None:
    """When the job entered its current phase: status.history, else the phase's condition.

    The history first: a job that waited for another's compile (WaitingForCache, Precompiled
    False) keeps that condition's time when it starts compiling itself. Falls back to
    status.startTime (Pending, or a status without either), else None.
    """
    since = _epoch(history_since(status))
    if since is not None:
        return since
    wanted = PHASE_CONDITION.get(status.get("phase") or "")
    conditions = status.get("conditions")
    if wanted and isinstance(conditions, list):
        for cond in conditions:
            if isinstance(cond, dict) and (cond.get("type"), cond.get("status")) == wanted:
                started = _epoch(cond.get("lastTransitionTime"))
                if started is not None:
                    return started
    return _epoch(status.get("startTime"))


def snapshot(index: JobIndex) -> list[tuple[str, str, Json]]:
    """(namespace, name, status) from a kopf index keyed by (namespace, name).

    Called from the metrics server's thread while kopf's loop updates the index: list() copies
    the keys in one step, and a key deleted meanwhile is skipped.
    """
    out = []
    for key in list(index):
        try:
            values = list(index[key])
        except KeyError:
            continue
        if values:
            out.append((key[0], key[1], values[-1]))
    return out


class JobStateCollector(Collector):
    """trainium_operator_job_phase, _job_phase_start_time_seconds and _job_straggler_nodes, one
    series per job."""

    def __init__(self) -> None:
        self.source: JobSource | None = None

    def describe(self) -> list[GaugeMetricFamily]:
        """Nothing up front: keeps registration from calling collect()."""
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Read the jobs now; a job without a phase yet has no series; counts by phase too.

        trainium_operator_jobs comes from the same read: one source for jobs by phase.
        """
        labels = ["namespace", "name", "phase"]
        counts = dict.fromkeys(PHASES, 0)
        phase = GaugeMetricFamily(
            "trainium_operator_job_phase", "1 for each TrainiumJob, labelled with its phase", None,
            labels,
        )  # fmt: skip
        started = GaugeMetricFamily(
            "trainium_operator_job_phase_start_time_seconds",
            "Unix time at which each TrainiumJob entered its current phase",
            labels=labels,
        )
        slow = GaugeMetricFamily(
            "trainium_operator_job_straggler_nodes",
            "Nodes of each TrainiumJob's training gang flagged as stragglers (status.stragglers)",
            labels=["namespace", "name"],
        )
        for namespace, name, status in self.source() if self.source else ():
            current = status.get("phase") if isinstance(status, dict) else None
            if not isinstance(current, str) or not current:
                continue
            phase.add_metric([namespace, name, current], 1)
            slow.add_metric([namespace, name], _flagged(status.get("stragglers")))
            counts[current] = counts.get(current, 0) + 1
            since = phase_started(status)
            if since is not None:
                started.add_metric([namespace, name, current], since)
        yield phase
        yield started
        yield slow
        yield _by_phase(counts)


def _flagged(entries: Any) -> int:
    """How many status.stragglers entries are flagged."""
    if not isinstance(entries, list):
        return 0
    return sum(1 for e in entries if isinstance(e, Mapping) and e.get("flaggedAt"))


def _by_phase(counts: Mapping[str, int]) -> GaugeMetricFamily:
    family = GaugeMetricFamily("trainium_operator_jobs", "TrainiumJobs by phase", labels=["phase"])
    for name, n in counts.items():
        family.add_metric([name], n)
    return family
