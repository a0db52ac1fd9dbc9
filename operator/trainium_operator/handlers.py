"""kopf registrations only: every trigger runs the same level-based reconcile of one job.

No finalizers on TrainiumJobs (children are owned through ownerReferences; timers would force a
finalizer, so the periodic backstop is kopf's own retry of the job handler until it settles).
"""

from __future__ import annotations

import logging
import os
import threading
from collections import defaultdict
from collections.abc import Mapping
from typing import Any, cast

import kopf
from kubernetes.client.exceptions import ApiException

from trainium_operator import k8s, metrics, naming
from trainium_operator.builders import LABEL_JOB, LABEL_MANAGED_BY, MANAGED_BY
from trainium_operator.crd import GROUP, PLURAL, VERSION
from trainium_operator.lifecycle import TERMINAL
from trainium_operator.reconcile import Outcome, reconcile

#: kopf's annotation prefix and finalizer name, decided on day one.
PREFIX = GROUP
Json = dict[str, Any]
RESYNC_MARK = "re-checking until it settles"
_locks: defaultdict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)


def resync_seconds() -> float:
    """How often an unsettled job is re-checked when no child event arrives."""
    return float(os.environ.get("TRAINIUM_RESYNC_SECONDS", "20"))


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    """Keep kopf's bookkeeping in our own annotations and out of the schema-pruned status."""
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=PREFIX, key="last-handled-configuration"
    )
    settings.persistence.finalizer = f"{PREFIX}/finalizer"
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    logging.getLogger("kopf.objects").addFilter(_quiet_resync)
    metrics.start_from_env()


def _quiet_resync(record: logging.LogRecord) -> bool:
    """Our periodic re-check rides on kopf's retry; it is routine, not an ERROR line."""
    if RESYNC_MARK in record.getMessage():
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger("kopf.objects").isEnabledFor(logging.DEBUG)
    return True


def _emit(body: Json, kind: str, reason: str, message: str) -> None:
    kopf.event(cast(kopf.Body, body), type=kind, reason=reason, message=message[:1024])


def run(namespace: str, name: str) -> Outcome:
    """Reconcile one job, one pass at a time per job within this process."""
    with _locks[(namespace, name)], metrics.reconcile_timer():
        try:
            outcome = reconcile(namespace, name, _emit)
        except ApiException as exc:
            metrics.count_error(f"Api{exc.status}")
            raise kopf.TemporaryError(f"API error {exc.status}: {exc.reason}", delay=5) from exc
    if outcome.transition:
        metrics.count_transition(outcome.transition)
    metrics.track(namespace, name, outcome.phase)
    return outcome


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
def on_job(namespace: str | None, name: str, **_: Any) -> None:
    """Reconcile; stay in kopf's retry loop (our resync backstop) until the job settles."""
    if namespace is None:
        return
    outcome = run(namespace, name)
    if outcome.phase is None:  # deleted meanwhile
        return
    if outcome.phase not in {p.value for p in TERMINAL}:
        delay = resync_seconds()
    elif outcome.ttl_remaining is not None:
        delay = max(1.0, outcome.ttl_remaining)  # then the pass that deletes it
    else:
        return
    raise kopf.TemporaryError(f"job is {outcome.phase}; {RESYNC_MARK}", delay=delay)


@kopf.on.event(
    "batch.volcano.sh",
    "v1alpha1",
    "jobs",
    labels={LABEL_MANAGED_BY: MANAGED_BY, LABEL_JOB: kopf.PRESENT},
)
def on_child(namespace: str | None, labels: Mapping[str, str], type: str, **_: Any) -> None:
    """A Volcano job of ours changed: re-derive its owner's status right away."""
    if type is None or namespace is None:  # initial listing: resume handlers cover it
        return
    run(namespace, labels[LABEL_JOB])


@kopf.on.delete(GROUP, VERSION, PLURAL, optional=True)
def on_delete(spec: kopf.Spec, namespace: str | None, name: str, **_: Any) -> None:
    """Best effort: drop the cluster-scoped static PV (ownerReferences cannot reach it)."""
    if namespace is None:
        return
    metrics.forget(namespace, name)
    if (spec.get("storage") or {}).get("fsx"):
        k8s.delete_volume(naming.volume_name(namespace, name))


# ---- Per-job state metrics (issue 11): a kopf index of statuses, read at scrape time ----------


@kopf.index(GROUP, VERSION, PLURAL)
def trainiumjob_statuses(
    namespace: str | None, name: str, status: kopf.Status, **_: Any
) -> dict[tuple[str, str], Json]:
    """Each job's status by (namespace, name); kopf drops the entry when the job is deleted."""
    return {(namespace or "", name): metrics.indexed_status(status)}


@kopf.on.startup()
def serve_job_states(**kwargs: Any) -> None:
    """Metrics read the live index at each scrape (kopf hands indices to startup handlers)."""
    metrics.watch_jobs(kwargs["trainiumjob_statuses"])
