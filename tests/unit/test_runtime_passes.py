"""The pass runtime: every trigger through one queue, one record per job, kopf's pause followed.

Each of issue 18's bugs that lived outside the queue itself is forced here (2, 4, 5, 6; 1, 3 and
7 are in test_runtime_queue.py), driving the runtime one step at a time: no sleeps, no workers
unless the interleaving needs a second thread.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from typing import Any

import kopf
import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from trainium_operator.api import naming
from trainium_operator.cluster import k8s, reconcile
from trainium_operator.cluster.eventlooks import EventLook
from trainium_operator.cluster.memory import Memory
from trainium_operator.cluster.observe import Views, queue_blocker
from trainium_operator.cluster.reads import Kind
from trainium_operator.cluster.reconcile import Outcome, Transition
from trainium_operator.domain.lifecycle import Action
from trainium_operator.domain.model import Rejection
from trainium_operator.manifests import ownership
from trainium_operator.manifests.ownership import ANNOTATION_OWNER_UID
from trainium_operator.runtime import handlers
from trainium_operator.runtime.leadership import NotLeader
from trainium_operator.runtime.passes import RESYNC, VOLUME_KEY, Passes, backoff, next_look
from trainium_operator.runtime.queue import FIRST, Item

KEY = "uid-1"
WHERE = ("ns", "job")


class Script:
    """A fake reconcile: records each pass's views, answers with the next outcome or error."""

    def __init__(self, *answers: Outcome | Exception) -> None:
        self.answers = list(answers)
        self.views: list[Views] = []

    def __call__(self, namespace: str, name: str, emit: Any, views: Views) -> Outcome:
        self.views.append(views)
        answer = self.answers.pop(0) if self.answers else Outcome("Training")
        if isinstance(answer, Exception):
            raise answer
        return answer


def runtime(script: Any) -> Passes:
    """A runtime without workers, on a clock that stands still, that has seen the job."""
    passes = Passes(script, lambda *_: None, workers=0, clock=lambda: 1000.0)
    passes.records.named(KEY, *WHERE)
    return passes


def step(passes: Passes) -> bool:
    """Run the next queued pass here; whether there was one."""
    item = passes.queue.get(timeout=0)
    if item is None:
        return False
    try:
        passes.run(item)
    finally:
        passes.queue.done(item.key)
    return True


# ---- failure policy --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError(104)),
        ConnectionResetError(104, "Connection reset by peer"),
        ApiException(status=503, reason="Service Unavailable"),
        ApiException(status=429, reason="Too Many Requests"),
        KeyError("metadata"),
    ],
    ids=["protocol-error", "reset", "503", "429", "bug"],
)
def test_a_failed_pass_backs_off_briefly_and_a_success_forgets(error: Exception) -> None:
    passes = runtime(Script(error, error, error, error, Outcome("Training")))
    passes.wake(KEY)
    delays = []
    for _ in range(4):
        assert step(passes)
        delays.append(passes.queue.pending_after(KEY))
        passes.queue.add(KEY)  # the next pass now, not after the backoff
    assert delays == [1.0, 2.0, 4.0, 8.0]  # not kopf's 60 s default for unknown errors
    assert step(passes) and passes.queue.num_requeues(KEY) == 0


def test_a_programming_error_is_logged_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    passes = runtime(Script(KeyError("metadata")))
    passes.wake(KEY)
    assert step(passes)
    assert "reconcile of ns/job failed (Internal)" in caplog.text and "KeyError" in caplog.text


def test_a_lost_race_is_one_debug_line_without_the_http_headers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A 409 on a guarded write is routine (another writer came first): read again, quietly."""
    message = (
        'Operation cannot be fulfilled on trainiumjobs.trainium.dev "job": the object has been '
        "modified; please apply your changes to the latest version and try again"
    )
    lost = ApiException(status=409, reason="Conflict")
    lost.headers = {"Audit-Id": "1c2d", "Content-Type": "application/json"}
    lost.body = json.dumps({"kind": "Status", "reason": "Conflict", "message": message})
    assert "\n" in str(lost)  # what was logged: status, reason, headers and body, a line each
    caplog.set_level(logging.DEBUG, logger="trainium_operator.runtime.passes")
    passes = runtime(Script(lost))
    passes.wake(KEY)
    assert step(passes)
    [record] = [r for r in caplog.records if "read again" in r.getMessage()]
    assert record.levelno == logging.DEBUG
    assert record.getMessage() == f"pass of ns/job read again: 409 {message}"


@pytest.mark.parametrize(
    ("status", "transient"), [(400, False), (403, False), (404, False), (409, True), (500, True)]
)
def test_which_api_errors_are_transient(status: int, transient: bool) -> None:
    assert k8s.transient(ApiException(status=status)) is transient


def test_the_servers_message_is_kept() -> None:
    exc = ApiException(status=400, reason="Bad Request")
    exc.body = '{"kind":"Status","message":"admission webhook denied the request: queue closed"}'
    assert k8s.api_message(exc) == "admission webhook denied the request: queue closed"
    assert k8s.api_message(ApiException(status=500, reason="Internal")) == "Internal"


@pytest.mark.parametrize(
    ("attempt", "expected"), [(0, 1.0), (1, 2.0), (5, 32.0), (6, 60.0), (400, 60.0)]
)
def test_backoff_doubles_up_to_the_cap(attempt: int, expected: float) -> None:
    assert backoff(attempt, 1.0, 60.0) == expected


def test_next_look_policy() -> None:
    assert next_look(None) is None  # gone
    assert next_look("Succeeded", terminal=True) is None  # finished, no TTL: events only
    assert next_look("Failed", terminal=True, ttl_remaining=30.5) == 30.5
    assert next_look("Failed", terminal=True, ttl_remaining=-3) == 1.0
    assert next_look("Training") == RESYNC  # progress comes from events; this is the backstop
    assert next_look("Pending", waiting=True, attempt=0) == 10.0
    assert next_look("Pending", waiting=True, attempt=20, resync=300) == 60  # capped


def test_a_pass_sets_its_next_look_and_a_deadline_comes_first() -> None:
    passes = runtime(Script(Outcome("Training", deadline_in=5.0), Outcome("Pending", waiting=True)))
    passes.wake(KEY)
    assert step(passes) and passes.queue.pending_after(KEY) == 5.5
    passes.wake(KEY)
    assert step(passes) and passes.queue.pending_after(KEY) == 10.0


def test_timed_looks_read_fresh_and_event_passes_do_not() -> None:
    script = Script()
    passes = runtime(script)
    passes.reads.indices.update({kind: {} for kind in Kind})
    passes.wake(KEY)
    passes.queue.add_after(KEY, 0)
    assert step(passes)
    passes.wake(KEY)
    assert step(passes)
    assert [v.reader.fresh for v in script.views] == [True, False]  # type: ignore[attr-defined]


def test_a_look_the_job_set_reads_the_watches_and_the_backstop_reads_fresh() -> None:
    """A deadline, Event look or metrics read is a time the job chose: no GETs for it."""
    passes = runtime(Script(Outcome("Training", deadline_in=5.0), Outcome("Training")))
    passes.wake(KEY)
    assert step(passes)
    assert passes.queue.pending_after(KEY) == 5.5 and passes.queue.pending_fresh(KEY) is False
    passes.wake(KEY)
    assert step(passes)
    assert passes.queue.pending_after(KEY) == RESYNC and passes.queue.pending_fresh(KEY) is True


# ---- events ------------------------------------------------------------------------------------


def test_bug7_events_while_the_job_is_queued_make_one_pass() -> None:
    script = Script()
    passes = runtime(script)
    for version in ("1", "2", "3"):
        passes.job_event(KEY, WHERE, version, first=False)
    passes.pod_event(KEY)
    assert step(passes) and not step(passes)
    assert len(script.views) == 1


def test_the_echo_of_our_own_status_patch_needs_no_pass() -> None:
    script = Script(Outcome("Training", memory=Memory(written_version="7")))
    passes = runtime(script)
    passes.job_event(KEY, WHERE, "6", first=True)
    assert step(passes)
    passes.job_event(KEY, WHERE, "7", first=False)
    assert not step(passes)
    passes.job_event(KEY, WHERE, "8", first=False)
    assert step(passes)


def test_a_new_jobs_first_pass_goes_first() -> None:
    seen: list[str] = []
    passes = runtime(lambda ns, name, *_: seen.append(name) or Outcome("Training"))
    passes.job_event("u1", ("ns", "old"), "5", first=False)
    passes.job_event("u2", ("ns", "new"), "1", first=True)
    while step(passes):
        pass
    assert seen[:2] == ["new", "old"] and FIRST == 0


def test_a_name_reused_by_a_new_object_starts_a_new_record() -> None:
    passes = runtime(Script())
    passes.pod_event(KEY)
    passes.job_event("uid-2", WHERE, "9", first=True)
    first, second = passes.records.get(KEY), passes.records.get("uid-2")
    assert first is not None and second is not None and first is not second
    assert second.uid == "uid-2" and not second.pods_changed
    assert passes.records.resolve(*WHERE) == "uid-2"


def test_the_old_objects_delete_after_the_new_ones_create_forgets_only_the_old() -> None:
    """kopf serializes by uid: the old object's DELETED may come after the new one's ADDED."""
    script = Script()
    passes = runtime(script)
    passes.job_event(KEY, WHERE, "1", first=False)
    passes.job_event("uid-2", WHERE, "9", first=True)  # re-applied under the same name
    passes.gone(KEY)  # the old object's DELETED, processed late
    assert passes.records.get(KEY) is None and passes.records.resolve(*WHERE) == "uid-2"
    assert step(passes) and not step(passes)  # the new job's first pass is still queued
    assert [v.uid for v in script.views] == ["uid-2"]
    passes.pod_event(KEY)  # the old object's late pod: no record comes back
    assert passes.records.get(KEY) is None and not step(passes)


def test_a_pass_for_the_old_object_sees_the_new_one_and_ends_the_old() -> None:
    """A body of another uid under the name: the old job is gone, the new untouched."""

    class Reader:
        def get(self, kind: Kind, ns: str, name: str) -> dict[str, Any]:
            return {"metadata": {"name": name, "namespace": ns, "uid": "uid-2"}}

    views = Views(uid=KEY, reader=Reader())  # type: ignore[arg-type]
    assert reconcile.reconcile("ns", "job", lambda *_: None, views).phase is None


# ---- bug 6: what a pass remembers survives its failure; a pass ending after the job went ------


def test_bug6_a_pod_event_is_read_by_the_first_pass_that_succeeds() -> None:
    script = Script(ApiException(status=503), Outcome("Training"), Outcome("Training"))
    passes = runtime(script)
    passes.pod_event(KEY)
    assert step(passes)  # fails: the pod event is not consumed
    passes.wake(KEY)
    assert step(passes)
    passes.wake(KEY)
    assert step(passes)
    assert [v.pods_changed for v in script.views] == [True, True, False]


def test_bug6_a_pod_event_during_a_pass_is_read_by_the_next() -> None:
    passes: Passes

    def reconcile_(ns: str, name: str, emit: Any, views: Views) -> Outcome:
        if len(seen) == 0:
            passes.pod_event(KEY)  # arrives while this pass reads the pods
        seen.append(views.pods_changed)
        return Outcome("Training")

    seen: list[bool] = []
    passes = runtime(reconcile_)
    passes.pod_event(KEY)
    assert step(passes) and step(passes) and not step(passes)
    assert seen == [True, True]


def test_bug6_a_pass_in_flight_when_the_job_goes_leaves_nothing_behind() -> None:
    inside, release = threading.Event(), threading.Event()

    def slow(ns: str, name: str, emit: Any, views: Views) -> Outcome:
        inside.set()
        assert release.wait(10)
        moved = Transition(ns, name, "Pending", "Training", "Started", "")
        return Outcome("Training", transition=moved)

    passes = runtime(slow)
    passes.job_event(KEY, WHERE, "1", first=True)
    worker = threading.Thread(target=step, args=(passes,))
    worker.start()
    assert inside.wait(10)
    passes.gone(KEY)  # the DELETED event
    release.set()
    worker.join(10)
    assert passes.records.get(KEY) is None
    assert passes.queue.pending_after(KEY) is None and not step(passes)


# ---- bug 2, issue 32 item 4: the FSx PV of a deleted job goes by a sweep, in a term ---------


def sweeping(sweep: Any) -> Passes:
    """A runtime without workers whose PV sweep is `sweep`."""
    passes = Passes(Script(), lambda *_: None, workers=0, clock=lambda: 1000.0, sweep=sweep)
    passes.records.named(KEY, *WHERE)
    return passes


def fsx_job(type: str) -> dict[str, Any]:
    """A watch event's keyword arguments for an FSx job of KEY."""
    body = kopf.Body({"metadata": {"name": "job", "namespace": "ns", "uid": KEY},
                      "spec": {"storage": {"fsx": {"fileSystemId": "fs-1"}}}})  # fmt: skip
    return {"type": type, "body": body, "namespace": "ns", "name": "job"}


def test_a_deleted_fsx_job_sweeps_its_volume_in_a_term_only() -> None:
    """No finalizer: the DELETED event queues the sweep, and a paused (standby) queue keeps it."""
    swept: list[str] = []
    passes = sweeping(lambda name: swept.append(name) or True)
    passes.queue.pause()  # a standby: outside a term nothing runs, nothing is lost
    memo = type("Memo", (), {"passes": passes})()
    asyncio.run(handlers.on_job(memo=memo, tj_wakers={}, **fsx_job("DELETED")))
    assert passes.records.get(KEY) is None and not step(passes) and swept == []
    passes.start_term()
    while step(passes):
        pass
    assert swept == [naming.volume_name("ns", "job")]


def test_a_sweep_outside_the_term_is_retried_not_lost() -> None:
    calls: list[str] = []

    def refused(name: str) -> bool:
        calls.append(name)
        raise NotLeader("term over")

    passes = sweeping(refused)
    passes.sweep_volume("pv-1")
    assert step(passes) and calls == ["pv-1"]
    assert passes.queue.pending_after(VOLUME_KEY + "pv-1:") is not None  # backed off, kept


def test_a_sweep_of_a_pv_whose_job_is_known_by_then_sends_nothing() -> None:
    """A PV listed before its job: by its sweep, the job's record exists (it lives)."""
    passes = sweeping(lambda name: pytest.fail("a request for a live job's PV"))
    passes.sweep_volume("pv-1", KEY)
    assert step(passes) and len(passes.queue) == 0


def test_a_volume_of_an_unknown_job_is_swept_a_known_jobs_wakes_it() -> None:
    """A PV a pass made while its job was being deleted (bug 2) outlives the job's record."""
    swept: list[str] = []
    passes = sweeping(lambda name: swept.append(name) or True)
    memo = type("Memo", (), {"passes": passes})()
    ours = {"annotations": {ANNOTATION_OWNER_UID: KEY}}
    asyncio.run(handlers.on_volume(type="MODIFIED", name="pv-a", meta=ours, memo=memo))
    assert passes.queue.get(timeout=0) == Item(KEY)  # a wake of the job, no sweep
    passes.queue.done(KEY)
    passes.gone(KEY)
    asyncio.run(handlers.on_volume(type="ADDED", name="pv-a", meta=ours, memo=memo))
    asyncio.run(handlers.on_volume(type="DELETED", name="pv-b", meta=ours, memo=memo))
    while step(passes):
        pass
    assert swept == ["pv-a"]


def test_no_changing_handler_so_kopf_writes_nothing_of_its_own() -> None:
    """An on.create/update/delete/resume handler makes kopf, in every replica, patch a diff-base
    annotation (and a finalizer, progress) on every job it matches: a standby would write."""
    registry = kopf.get_default_registry()
    changing = [h for h in registry._changing._handlers if h.fn.__module__ == handlers.__name__]
    assert changing == []


# ---- bug 4: the parse caches under other workers -----------------------------------------------


class ClearedByAnotherWorker(dict):  # type: ignore[type-arg]
    """A cache another worker clears between any two of this worker's operations."""

    def __contains__(self, key: object) -> bool:
        found = super().__contains__(key)
        self.clear()
        return found

    def __getitem__(self, key: Any) -> Any:
        self.clear()
        return super().__getitem__(key)

    def get(self, key: Any, default: Any = None) -> Any:
        value = super().get(key, default)
        self.clear()
        return value


def test_bug4_a_cache_cleared_by_another_worker_never_fails_a_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from support import job

    body = job("cached")
    body["metadata"].update(uid="u-1", generation=1)
    from trainium_operator.api import parsed

    monkeypatch.setattr(parsed, "_specs", ClearedByAnotherWorker())
    monkeypatch.setattr(parsed, "_digests", ClearedByAnotherWorker())
    assert parsed.spec(body).nodes >= 1
    assert parsed.digests(body)


# ---- bug 5 / issue 17 bug 2: the queue hierarchy as listed; a queue refusal waits --------------


class Queues:
    def get(self, kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
        return {"metadata": {"name": name}, "status": {"state": "Open"}}


def test_bug5_the_leaf_check_reads_the_queue_index() -> None:
    views = Views(queue_children={"parent": ["child"]}, reader=Queues())  # type: ignore[arg-type]
    blocker = queue_blocker("parent", views)
    assert blocker is not None and blocker.reason == "QueueNotLeaf"
    assert queue_blocker("child", views) is None


def test_bug5_handlers_keep_no_queue_hierarchy_of_their_own() -> None:
    assert not hasattr(handlers, "_queue_parents")
    from trainium_operator.cluster import watches

    body = {"metadata": {"name": "child"}, "spec": {"parent": "team"}}
    assert asyncio.run(watches.queue_children(name="child", body=body)) == {"team": "child"}
    assert asyncio.run(watches.queue_children(name="root", body={"spec": {}})) == {}


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ("admission webhook denied the request: can only submit job to leaf queue", "QueueNotLeaf"),
        (" can only submit job to queue with state `Open`, queue `q` status is `Closed`;",
         "QueueNotOpen"),
        (' unable to find job queue: queues "q" not found;', "QueueNotFound"),
    ],
)  # fmt: skip
def test_a_queue_refusal_waits_instead_of_failing_the_job(message: str, reason: str) -> None:
    refusal = Rejection(Action.CREATE_TRAINING, 400, message)
    assert not refusal.permanent and refusal.reason == reason
    other = Rejection(Action.CREATE_TRAINING, 400, "spec.tasks[0]: invalid")
    assert other.permanent and other.reason == "TrainingRejected"


def test_handlers_hold_no_module_level_mutable_state() -> None:
    """handlers.py is registrations only: what passes remember lives in the runtime's records."""
    import re
    from pathlib import Path

    source = Path(handlers.__file__).read_text()
    assert not re.findall(r"^_[a-z_]+: (dict|set|defaultdict|list)", source, re.MULTILINE)
    assert not re.findall(r"^[A-Za-z_]+ = (Scheduler|RankedPool|Passes)\(", source, re.MULTILINE)


def test_the_operator_command_elects_through_a_lease_and_kopf_runs_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import os

    import kopf.cli

    from trainium_operator.cli import operator
    from trainium_operator.runtime import leadership

    ran: list[list[str]] = []
    # setenv first, so the teardown restores the variable cmd_operator sets (a bare delenv of an
    # absent one records nothing: the Lease env leaked into every later operator process of the
    # xdist worker, which then elected on the session's Lease).
    monkeypatch.setenv(leadership.LEASE_ENV, "")
    monkeypatch.delenv(leadership.LEASE_ENV)
    monkeypatch.setattr(kopf.cli, "main", lambda args, **_: ran.append(args))
    assert operator.cmd_operator(["--leader-elect=trainium", "-A"]) == 0
    assert os.environ[leadership.LEASE_ENV] == "trainium"
    assert "--standalone" in ran[0] and not any("peering" in a for a in ran[0])


# ---- issue 17 bug 5: the failure's cause from the pod watch event, at once --------------------


def test_17_bug5_the_cause_is_the_pod_event_even_when_volcano_deleted_the_pod(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Volcano deletes a failed pod ~60 ms after it fails: the list then shows only its peer."""
    from test_failures import T0, T1, ended, pod

    from trainium_operator.cluster import observe
    from trainium_operator.manifests.ownership import Owner

    stage = {ownership.LABEL_STAGE: "train"}
    oom, peer = pod("w-0", ended(137, "OOMKilled", at=T0)), pod("w-1", ended(137, at=T1))
    for body in (oom, peer):
        body["metadata"]["labels"] = stage
    monkeypatch.setattr(k8s, "pod_log_tail", lambda *_: [])  # the logs are gone too (404)
    owner = Owner("job", "ns", "u")
    before = observe.gang_failure(owner, [peer])
    assert before is not None and before.reason != "OOMKilled"  # the peer Volcano SIGKILLed
    shown = observe.with_shown([peer], Views(failed_pods=(oom,)), "train")
    cause = observe.gang_failure(owner, shown)
    assert cause is not None and cause.reason == "OOMKilled" and "w-0" in cause.message
    assert observe.with_shown([peer], Views(failed_pods=(oom,)), "precompile") == [peer]


def test_17_bug5_the_pod_watch_keeps_the_failed_pod_until_a_pass_reads_it() -> None:
    from test_failures import ended, pod

    script = Script(ApiException(status=503), Outcome("Training"), Outcome("Training"))
    passes = runtime(script)
    memo = type("Memo", (), {"passes": passes})()
    failed = pod("w-0", ended(1))
    meta = {"name": "w-0", "annotations": {ownership.ANNOTATION_OWNER: "ns/job"}}
    labels = {ownership.LABEL_STAGE: "train"}
    body = kopf.Body({"metadata": meta, "spec": {"nodeName": "n-3"}, "status": failed["status"]})
    event = handlers.on_pod(
        type="MODIFIED",
        meta=body.meta,
        spec=body.spec,
        status=body.status,
        labels=labels,
        memo=memo,
    )
    asyncio.run(event)
    for _ in range(3):
        assert step(passes)
        passes.wake(KEY)
    shown = [[p["metadata"]["name"] for p in v.failed_pods] for v in script.views]
    assert shown == [["w-0"], ["w-0"], []]  # kept through the failed pass, read by the next
    # The node it ran on comes along (a node fault keeps that node out of the next gang).
    assert script.views[0].failed_pods[0]["spec"] == {"nodeName": "n-3"}


# ---- status is composed by one pure function ---------------------------------------------------


def test_status_is_composed_purely_and_a_settled_status_is_returned_as_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dataclasses import replace

    from support import spec_of

    from trainium_operator.domain import budget, lifecycle, specdigest, status
    from trainium_operator.domain.model import Observed

    def no_io(*_: Any, **__: Any) -> Any:
        raise AssertionError("compose made a request")

    monkeypatch.setattr(k8s, "patch_trainiumjob_status", no_io)
    obs = Observed(storage_ready=True)
    decision = lifecycle.decide(obs)
    counted = budget.Accounted(budget.read({}))
    inputs = status.Inputs({}, decision, spec_of(), obs, counted, name="job", generation=1,
                           digests={"nodes": "d"}, now="2026-11-22T06:40:00Z")  # fmt: skip
    first, again = status.compose(inputs), status.compose(inputs)
    assert first == again and first["phase"] == decision.phase.value
    assert first["specDigest"] == specdigest.combined({"nodes": "d"}) and "specDigests" not in first
    same = status.compose(replace(inputs, previous=first))
    assert same is first  # nothing changed: no patch


def test_the_record_keeps_what_a_job_remembers_between_passes() -> None:
    """A pass's memory goes to the job's record whole and comes back to the next pass."""
    moved = Transition("ns", "job", "Pending", "Training", "Started", "m", None)
    read = Memory(metrics_read_at=5.0, events_looked=EventLook("uid-1", 1, "job-train"))
    script = Script(
        Outcome("Training", transition=moved, memory=read),
        Outcome("Training", memory=Memory()),  # that pass read nothing: no gang trains
        Outcome("Training"),
    )
    passes = runtime(script)
    passes.wake(KEY)
    assert step(passes)
    record = passes.records.get(KEY)
    assert record is not None and record.phase_entered_at is not None
    assert record.memory is read
    passes.wake(KEY)
    assert step(passes) and script.views[-1].memory is read
    assert record.memory == Memory()
    passes.wake(KEY)
    assert step(passes) and record.memory == Memory()  # a pass that left nothing keeps it


def test_a_new_term_forgets_our_writes_echo_and_event_looks_but_not_that_a_job_finished() -> None:
    passes = runtime(Script())
    record = passes.records.get(KEY)
    assert record is not None
    looked = EventLook("uid-1", 1, "job-train")
    passes.records.remember(record, Memory(1.0, looked, written_version="7", finished=True))
    passes.start_term()
    assert record.memory == Memory(metrics_read_at=1.0, finished=True)


def test_watched_passes_read_precompiles_from_the_index_and_fresh_ones_check_it() -> None:
    """Rank 0 and other jobs' precompiles come from the watches; a healing pass checks what
    the index shows (observe.compiling_elsewhere lists only then)."""
    script = Script(Outcome("Precompiling"), Outcome("Precompiling"))
    passes = runtime(script)
    passes.reads.indices.update({kind: {} for kind in Kind})
    index: dict[tuple[str, str], list[Any]] = {}
    passes.reads.precompiles = index
    passes.wake(KEY)
    assert step(passes)
    watched = script.views[-1]
    assert watched.pods_watched and watched.precompiles is index
    passes.queue.add_after(KEY, 0, fresh=True)
    assert step(passes)
    healing = script.views[-1]
    assert healing.pods_watched and healing.precompiles is index and healing.fresh


def _pod_event(passes: Passes, type_: str, name: str, status: dict[str, Any]) -> None:
    """Deliver one pod watch event of the job's training gang to on_pod."""
    from trainium_trainer import contract

    memo = type("Memo", (), {"passes": passes})()
    meta = {"name": name, "annotations": {ownership.ANNOTATION_OWNER: "ns/job",
                                          ownership.ANNOTATION_OWNER_UID: KEY}}  # fmt: skip
    ports = [{"name": contract.METRICS_PORT_NAME, "containerPort": 9400}]
    spec = {"containers": [{"name": "node", "ports": ports, "image": "trainer"}]}
    body = kopf.Body({"metadata": meta, "spec": spec, "status": status})
    labels = {ownership.LABEL_STAGE: "train"}
    event = handlers.on_pod(
        type=type_, meta=body.meta, spec=body.spec, status=body.status, labels=labels, memo=memo
    )
    asyncio.run(event)


def test_rank0_is_known_from_the_pod_watch_so_a_metrics_read_lists_no_pods() -> None:
    """Every progress read listed the gang's pods; the watch already shows where rank 0 is."""
    from trainium_operator.api import naming

    script = Script(Outcome("Training"))
    passes = runtime(script)
    rank0 = naming.pod_name(naming.vcjob_name("job", "train"), 0)
    peer = naming.pod_name(naming.vcjob_name("job", "train"), 1)
    _pod_event(passes, "MODIFIED", peer, {"podIP": "10.0.0.8"})
    _pod_event(passes, "MODIFIED", rank0, {"phase": "Pending"})
    record = passes.records.get(KEY)
    assert record is not None and record.rank0_pod is None  # no IP yet; a peer is not rank 0
    _pod_event(passes, "MODIFIED", rank0, {"phase": "Running", "podIP": "10.0.0.7"})
    assert step(passes)  # rank 0 got an address: that woke the job (its passes waited for one)
    shown = script.views[-1].rank0_pod
    assert shown is not None and shown["status"] == {"podIP": "10.0.0.7"}
    assert shown["spec"]["containers"][0]["ports"][0]["containerPort"] == 9400
    _pod_event(passes, "MODIFIED", rank0, {"phase": "Running", "podIP": "10.0.0.7"})
    assert not step(passes)  # the same address again wakes nothing
    _pod_event(passes, "DELETED", rank0, {"phase": "Running", "podIP": "10.0.0.7"})
    assert record.rank0_pod is None and not step(passes)


def test_a_deleted_jobs_late_pod_events_leave_no_record_behind() -> None:
    """Pods go after their job's record did: their deletion events must not start a new one."""
    import json

    from trainium_trainer import contract

    passes = runtime(Script())
    report = json.dumps(
        {contract.CHECKPOINT_REPORT_KEY: {"step": 40, "time": "2026-11-26T10:00:00Z"}}
    )
    term = {"terminated": {"exitCode": 0, "message": report}}
    ended = {"phase": "Succeeded", "podIP": "10.0.0.7", "containerStatuses": [{"state": term}]}
    _pod_event(passes, "MODIFIED", "job-train-node-0-0", ended)  # a live job's pod: remembered
    record = passes.records.get(KEY)
    assert record is not None and record.checkpoint is not None
    passes.gone(KEY)
    _pod_event(passes, "DELETED", "job-train-node-0-0", ended)
    _pod_event(passes, "MODIFIED", "job-train-node-0-0", ended)  # late: the job is gone
    assert passes.records.get(KEY) is None


# ---- issue 25: a term, a stale write, an error outside reconcile -------------------------------


def test_a_pass_whose_term_ended_mid_way_writes_nothing_and_is_looked_at_again() -> None:
    """The fence refuses the write (NotLeader); the job is not lost, nothing is counted."""
    from trainium_operator.runtime.leadership import NotLeader

    passes = runtime(Script(NotLeader("term over"), Outcome("Training")))
    passes.wake(KEY)
    assert step(passes)
    assert passes.queue.pending_after(KEY) is not None and passes.queue.pending_fresh(KEY)


def test_a_write_that_lost_a_race_reads_again_with_gets() -> None:
    """409 Conflict on the resourceVersion the pass read: the next pass reads fresh, decides
    again, never overwrites."""
    passes = runtime(Script(ApiException(status=409, reason="Conflict"), Outcome("Training")))
    passes.wake(KEY)
    assert step(passes) and passes.queue.pending_fresh(KEY)


def test_an_error_after_reconcile_still_sets_the_next_look(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    passes = runtime(Script(Outcome("Training")))

    def broken(*_: Any) -> None:
        raise RuntimeError("metrics broke")

    monkeypatch.setattr(passes, "_count", broken)
    passes.wake(KEY)
    assert step(passes) and passes.queue.pending_after(KEY) is not None


def paced(script: Script, now: list[float], jobs: int) -> Passes:
    """A runtime on a clock the test moves, that has seen `jobs` jobs, outside a term."""
    passes = Passes(script, lambda *_: None, workers=0, clock=lambda: now[0],
                    term_reads_per_second=10)  # fmt: skip
    passes.reads.indices.update({kind: {} for kind in Kind})  # the watches run
    for i in range(jobs):
        passes.job_event(f"uid-{i}", ("ns", f"job-{i}"), "1", first=False)
    while step(passes):  # their first passes, in an earlier term
        pass
    script.views.clear()
    passes.end_term()
    passes.wake("uid-0")
    assert not step(passes)  # paused: nothing runs outside a term
    return passes


def test_a_new_term_looks_at_every_job_with_gets_paced() -> None:
    """A takeover re-reads every job (2 GETs each), spread at the pace, not all at once."""
    script, now = Script(), [1000.0]
    passes = paced(script, now, 30)
    passes.start_term()
    while step(passes):
        pass
    assert len(script.views) == 1  # the first at once, the others at 10 a second
    now[0] += 1.0
    while step(passes):
        pass
    assert len(script.views) == 11 and all(v.fresh for v in script.views)
    now[0] += 2.0
    while step(passes):
        pass
    assert sorted(v.uid for v in script.views) == sorted(f"uid-{i}" for i in range(30))


def test_a_job_with_an_event_reads_with_gets_at_once_in_a_new_term_and_once_only() -> None:
    script, now = Script(), [1000.0]
    passes = paced(script, now, 30)
    passes.start_term()
    passes.wake("uid-29")  # its paced look is 2.9 s away: the event's pass reads with GETs
    while step(passes):
        pass
    assert [(v.uid, v.fresh) for v in script.views] == [("uid-0", True), ("uid-29", True)]
    passes.wake("uid-29")
    assert step(passes) and not script.views[-1].fresh  # read once this term: the watches do


def test_a_continued_term_re_reads_nothing() -> None:
    """Our own Lease back, held by no one since: no one else wrote, queued work goes on."""
    script, now = Script(), [1000.0]
    passes = paced(script, now, 30)
    passes.start_term(continued=True)
    while step(passes):
        pass
    assert [(v.uid, v.fresh) for v in script.views] == [("uid-0", False)]  # the lapse's event


def test_a_finished_objects_stale_read_creates_nothing() -> None:
    """Our pass wrote Failed; a later read still shows Training: read again, never act."""

    class Reader:
        def get(self, kind: Kind, ns: str, name: str) -> dict[str, Any]:
            md = {"name": name, "namespace": ns, "uid": KEY, "generation": 1}
            return {"metadata": md, "status": {"phase": "Training"}}

    views = Views(uid=KEY, memory=Memory(finished=True), reader=Reader())  # type: ignore[arg-type]
    with pytest.raises(reconcile.StaleRead):
        reconcile.reconcile("ns", "job", lambda *_: None, views)


def test_a_failed_pods_first_log_read_is_kept_and_a_later_404_never_replaces_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 25 bug 5: read (200), Volcano deletes the pod, read again (404): keep the first."""
    from test_failures import ended, pod

    from trainium_operator.runtime import pods

    answers: list[list[str] | Exception] = [
        ["RuntimeError: boom"],
        ApiException(status=404, reason="NotFound"),
    ]
    reads: list[str] = []

    def read_log(ns: str, name: str, container: str, lines: int) -> list[str]:
        reads.append(name)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(k8s, "pod_log_tail", read_log)
    script = Script()
    passes = runtime(script)
    failed = pod("w-0", ended(1))
    meta = {"name": "w-0", "namespace": "ns", "uid": "pod-1",
            "annotations": {ownership.ANNOTATION_OWNER_UID: KEY}}  # fmt: skip
    shown = {"metadata": meta, "spec": {}, "status": failed["status"]}
    labels = {ownership.LABEL_STAGE: "train"}
    asyncio.run(pods.changed(passes, "MODIFIED", shown, labels, None))
    assert step(passes)
    asyncio.run(pods.changed(passes, "DELETED", shown, labels, None))  # Volcano deleted it
    assert step(passes)
    assert reads == ["w-0"]  # read once: the deletion's event reads nothing again
    assert all(v.pod_logs.get("pod-1") == ("RuntimeError: boom",) for v in script.views)


def test_the_pods_of_a_job_being_deleted_are_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    from test_failures import ended, pod

    from trainium_operator.runtime import pods

    monkeypatch.setattr(k8s, "pod_log_tail", lambda *_: pytest.fail("read a dying job's pod"))
    passes = runtime(Script())
    passes.gone(KEY)  # the user deleted the job: its pods are killed
    meta = {"name": "w-0", "namespace": "ns", "uid": "pod-1",
            "annotations": {ownership.ANNOTATION_OWNER_UID: KEY}}  # fmt: skip
    shown = {"metadata": meta, "spec": {}, "status": pod("w-0", ended(137))["status"]}
    asyncio.run(pods.changed(passes, "MODIFIED", shown, {ownership.LABEL_STAGE: "train"}, None))
    assert passes.records.get(KEY) is None and not step(passes)


def test_a_gangs_killed_peers_get_a_few_log_reads_not_one_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 35: a 1,024-node gang's restart kills 1,023 peers (exit 137 on their deletion):
    the operator read every one's log (944 reads in 4 minutes on the tier, each through the
    API server to a kubelet). A few peers of one gang instance say what all would; a pod that
    failed on its own is always read, and so are the peers of the gang's next instance."""
    from test_failures import ended, pod

    from trainium_operator.runtime import pods, records

    reads: list[str] = []
    monkeypatch.setattr(k8s, "pod_log_tail", lambda ns, name, *_: reads.append(name) or [])
    passes = runtime(Script())
    owner = [{"kind": "Job", "name": "j-train", "uid": "vc-1", "controller": True}]

    def event(
        name: str,
        version: str,
        state: Any,
        deleted: bool = True,
        kind: str = "MODIFIED",
        grace: int = 30,
    ) -> None:
        meta: dict[str, Any] = {
            "name": name, "namespace": "ns", "uid": f"uid-{name}-{version}",
            "annotations": {ownership.ANNOTATION_OWNER_UID: KEY, pods.JOB_VERSION: version},
            "ownerReferences": owner,
        }  # fmt: skip
        if deleted:
            when = "2026-01-01T00:00:00Z" if grace else "2026-01-01T00:00:09Z"
            meta.update(deletionTimestamp=when, deletionGracePeriodSeconds=grace)
        shown = {"metadata": meta, "spec": {}, "status": pod(name, state)["status"]}
        asyncio.run(pods.changed(passes, kind, shown, {ownership.LABEL_STAGE: "train"}, None))

    killed = ended(137, at="2026-01-01T00:00:05Z")
    for i in range(100):
        event(f"j-train-node-{i}", "1", killed)
        # The kubelet's last delete (grace 0) 4 s after the kill: still a peer, not read again.
        event(f"j-train-node-{i}", "1", killed, grace=0)
    assert len(reads) == records.PEER_LOGS
    event("j-train-node-100", "1", ended(1), deleted=False)  # failed on its own: read
    assert reads[-1] == "j-train-node-100"
    for i in range(20):  # the restarted gang's peers are another instance
        event(f"j-train-node-{i}", "2", killed)
    assert len(reads) == 2 * records.PEER_LOGS + 1
    # A pod's deletion event: its log went with it. The kubelet's last delete (grace 0) makes
    # a peer look as if it ended before its deletion: it was read once each on the tier.
    for i in range(20):
        event(f"j-train-node-{i}", "3", ended(1), deleted=False, kind="DELETED")
    assert len(reads) == 2 * records.PEER_LOGS + 1
