"""Prometheus metrics of the operator (prometheus-client), served on TRAINIUM_METRICS_PORT.

Names follow Prometheus conventions (`promtool check metrics` passes): `trainium_operator_`
prefix, base units, `_total` counters, no `_created` series.
Stage durations are measured from the transitions this process saw; per-job state is read from
the TrainiumJob objects themselves at scrape time (jobstate.py).
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ParamSpec

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client import start_http_server as _serve

from trainium_operator.cluster import reads
from trainium_operator.domain.jobstate import JobIndex, JobStateCollector, history_since, snapshot
from trainium_operator.domain.lifecycle import FAILURE_REASONS, Phase

if TYPE_CHECKING:
    from trainium_operator.cluster.reconcile import Transition
    from trainium_operator.domain.cost import Cost

#: Counters' `_created` series double the page for nothing a dashboard uses.
disable_created_metrics()
P = ParamSpec("P")
log = logging.getLogger(__name__)
PHASES = tuple(p.value for p in Phase)
#: Every status reason of a Failed job (the Failed condition's reason), from the lifecycle;
#: tests/unit/test_metrics.py walks the lifecycle and fails when it produces one not listed.
#: API errors counted as Api<HTTP status>: the ones a reconcile pass can meet.
ERROR_KINDS = (
    *(f"Api{code}" for code in (400, 401, 403, 404, 409, 410, 422, 429, 500, 502, 503, 504)),
    "Network",  # reset, refused or timed-out connections
    "Internal",  # anything else: a bug, logged with its traceback
)
#: from_phase of a job's first transition (a label value is never empty).
NEW = "New"
_STAGE_BUCKETS = (30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 43200, 86400, 259200)


TRANSITIONS = Counter(
    "trainium_operator_phase_transitions_total",
    f"Phase transitions of TrainiumJobs (from_phase {NEW} for a job's first phase)",
    ["from_phase", "to_phase"],
)
FAILURES = Counter(
    "trainium_operator_job_failures_total", "TrainiumJobs that failed, by reason", ["reason"]
)
ERRORS = Counter(
    "trainium_operator_reconcile_errors_total", "Reconcile passes that hit an API error", ["kind"]
)
RECONCILE_SECONDS = Histogram(
    "trainium_operator_reconcile_duration_seconds", "Time of one reconcile pass"
)
STAGE_SECONDS = {
    "Precompiling": Histogram(
        "trainium_operator_precompile_duration_seconds",
        "Time from entering Precompiling to leaving it",
        buckets=_STAGE_BUCKETS,
    ),
    "Training": Histogram(
        "trainium_operator_training_duration_seconds",
        "Time from entering Training to leaving it",
        buckets=_STAGE_BUCKETS,
    ),
}
CACHE_LOOKUPS = Counter(
    "trainium_operator_cache_lookups_total",
    "Compile-cache lookups, by result (hit or miss)",
    ["result"],
)
#: Kinds whose CRDs may appear after the start (Kueue's), as plural.group.
LATE_RESOURCES = tuple(sorted(reads.resource(kind) for kind in reads.LATE))
UNWATCHED = Gauge(
    "trainium_operator_unwatched_resources",
    "1 while the watch of a served kind the operator reads keeps failing (read with GETs)",
    ["resource"],
)
JOB_STATES = JobStateCollector()
REGISTRY.register(JOB_STATES)
#: Seconds, not hours: Prometheus base units (`promtool check metrics`); divide by 3600.
INSTANCE_SECONDS = Counter(
    "trainium_operator_instance_seconds_total",
    "Instance-seconds of finished TrainiumJobs (nodes x wall-clock), by cost bucket and type",
    ["bucket", "instance_type"],
)
ESTIMATED_COST = Counter(
    "trainium_operator_estimated_cost_usd_total",
    "Estimated USD of finished TrainiumJobs (priced instance types only), by bucket and type",
    ["bucket", "instance_type"],
)


def never_raises(fn: Callable[P, None]) -> Callable[P, None]:
    """Log a metric update that fails instead of raising it into the reconcile pass.

    A pass that raised after its writes never scheduled its next look: no TTL, no PV cleanup.
    """

    @functools.wraps(fn)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            fn(*args, **kwargs)
        except Exception:
            log.exception("metrics: %s failed; the pass goes on", fn.__name__)

    return guarded


def _zero_known_labels() -> None:
    """Export every known label value at 0, so increase() sees the first failure of each."""
    for reason in FAILURE_REASONS:
        FAILURES.labels(reason=reason)
    for kind in ERROR_KINDS:
        ERRORS.labels(kind=kind)
    for result in ("hit", "miss"):
        CACHE_LOOKUPS.labels(result=result)
    for resource in LATE_RESOURCES:
        UNWATCHED.labels(resource=resource).set(0)


_zero_known_labels()


class PortTaken(Exception):
    """The metrics port cannot be served (taken, or not ours to bind): the operator stops."""


def start_from_env() -> int | None:
    """Serve /metrics when TRAINIUM_METRICS_PORT is set (the chart sets it); returns the port.

    Before kopf starts (cli/operator.py): a port that is taken stops the process with one line,
    where kopf retried the startup handler every 60 s with a traceback and /healthz never answered.
    """
    port = os.environ.get("TRAINIUM_METRICS_PORT")
    if not port:
        return None
    addr = os.environ.get("TRAINIUM_METRICS_ADDR", "0.0.0.0")
    try:
        _serve(int(port), addr=addr)
    except OSError as exc:
        raise PortTaken(
            f"cannot serve metrics on {addr}:{port} (TRAINIUM_METRICS_PORT): {exc.strerror or exc}"
        ) from exc
    return int(port)


def watch_jobs(index: JobIndex) -> None:
    """Serve per-job state from the handlers' kopf index (read live at every scrape)."""
    JOB_STATES.source = lambda: snapshot(index)


def indexed_status(status: Mapping[str, Any]) -> dict[str, Any]:
    """What the index keeps of a job's status: the fields jobstate reads, not kopf's view.

    The values are the watch event's own (never changed in place); copying whole statuses
    (history, cost) on every event cost more CPU than the rest of the indexing together.
    """
    kept = {k: status[k] for k in ("phase", "conditions", "startTime", "stragglers") if k in status}
    since = history_since(status)
    if since is not None:  # the current phase's start, not the whole history
        kept["history"] = [{"phase": status.get("phase"), "since": since}]
    return kept


@never_raises
def set_unwatched(resource: str, unwatched: bool) -> None:
    """A kind the operator reads is found served but not watched (1), or watched again (0)."""
    UNWATCHED.labels(resource=resource).set(1 if unwatched else 0)


@contextmanager
def reconcile_timer() -> Iterator[None]:
    """Observe how long one reconcile pass takes."""
    with RECONCILE_SECONDS.time():
        yield


@never_raises
def count_error(kind: str) -> None:
    """Count an API error seen while reconciling."""
    ERRORS.labels(kind=kind).inc()


@never_raises
def count_transition(t: Transition, started: float | None = None, now: float = 0.0) -> None:
    """Update every metric a phase transition moves.

    `started`: when the job entered the phase it leaves (monotonic; the job's record keeps it).
    """
    TRANSITIONS.labels(from_phase=t.old_phase or NEW, to_phase=t.new_phase).inc()
    if t.new_phase == "Failed":
        FAILURES.labels(reason=t.reason).inc()
    if started is not None and t.old_phase in STAGE_SECONDS:
        STAGE_SECONDS[t.old_phase].observe(now - started)
    if t.cache_outcome in ("hit", "miss"):  # not "-": undecided until a stage job exists
        CACHE_LOOKUPS.labels(result=t.cache_outcome).inc()


COMPILE_SECONDS = Counter(
    "trainium_operator_compile_seconds_total",
    "Neuron compile time: spent by precompile jobs, and saved by cache hits",
    ["kind"],
)
for _kind in ("spent", "saved"):
    COMPILE_SECONDS.labels(kind=_kind)


@never_raises
def count_compile(figures: tuple[tuple[str, float], ...]) -> None:
    """Add the compile seconds a job spent (compileSeconds) or a hit saved (savedSeconds)."""
    for name, seconds in figures:
        kind = "saved" if name == "savedSeconds" else "spent"
        COMPILE_SECONDS.labels(kind=kind).inc(max(0.0, seconds))


def cost_increments(cost: Cost) -> list[tuple[str, str, float, float | None]]:
    """(bucket, instance type, instance-hours, USD or None) to add for one finished job."""
    return [
        (b, cost.instance_type, float(cost.instance_hours[b]), _usd(cost, b))
        for b in cost.instance_hours
    ]


def _usd(cost: Cost, bucket: str) -> float | None:
    usd = cost.usd(bucket)
    return None if usd is None else float(usd)


@never_raises
def count_cost(cost: Cost) -> None:
    """Add a finished job's cost to the counters; call once per job (counters only grow)."""
    for bucket, itype, hours, usd in cost_increments(cost):
        INSTANCE_SECONDS.labels(bucket=bucket, instance_type=itype).inc(max(0.0, hours * 3600))
        if usd is not None:
            ESTIMATED_COST.labels(bucket=bucket, instance_type=itype).inc(max(0.0, usd))
