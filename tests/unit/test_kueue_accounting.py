"""Issue 41: quota is released exactly when the job stops needing it, on every path.

(1) a finished job's Workloads are finished by every pass until they are (a refusal after
admission fails the job: the pass that fails it, or any later one, releases its quota);
(2) a compile Workload is released the moment the job no longer needs that compile;
(8) under Kueue, status.startTime (activeDeadlineSeconds' clock) is the job's admission.
"""

from __future__ import annotations

from typing import Any

import pytest

from trainium_operator.cluster import workloadwrites
from trainium_operator.cluster.reads import Kind
from trainium_operator.domain import lifecycle, quota, status
from trainium_operator.domain.kueuestate import Admission, Quota, Workload
from trainium_operator.domain.lifecycle import Action, Child, Observed, Phase, Rejection
from trainium_operator.manifests import workload
from trainium_operator.manifests.ownership import Owner

Json = dict[str, Any]
OWNER = Owner("bert", "team-a", "0c4a1f0e-1111-2222-3333-444455556666")


def kueue(pre: Admission = Admission.ABSENT, train: Admission = Admission.ABSENT,
          **kw: Any) -> Quota:  # fmt: skip
    return Quota("q", Workload("wl-compile", pre, **kw), Workload("wl-train", train))


# --- (1) every terminal path finishes the job's Workloads ----------------------------------


def test_a_gang_refused_after_admission_fails_the_job_and_finishes_its_workload() -> None:
    refusal = Rejection(Action.CREATE_TRAINING, 422, "the test refuses every gang")
    obs = Observed(storage_ready=True, policy="Never", quota=kueue(train=Admission.ADMITTED),
                   rejections=(refusal,))  # fmt: skip
    d = lifecycle.decide(obs)
    assert d.phase is Phase.FAILED
    assert d.actions == (Action.FINISH_TRAINING_WORKLOAD,)
    assert quota.finishes(d) == (Action.FINISH_TRAINING_WORKLOAD,)


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
@pytest.mark.parametrize("state", [Admission.PENDING, Admission.ADMITTED, Admission.EVICTED])
def test_a_finished_jobs_pass_finishes_what_is_left(phase: str, state: Admission) -> None:
    """A finished job decided again (a spec change after it finished): its live Workloads go."""
    obs = Observed(previous_phase=phase, quota=kueue(pre=state, train=Admission.FINISHED))
    d = lifecycle.decide(obs)
    assert d.phase.value == phase and d.actions == (Action.FINISH_PRECOMPILE_WORKLOAD,)


class Reader:
    """A pass's reader over fixed Workloads; what was written is kept."""

    def __init__(self, *bodies: Json) -> None:
        self.bodies = {b["metadata"]["name"]: b for b in bodies}
        self.written: list[str] = []

    def get(self, kind: Kind, namespace: str, name: str) -> Json | None:
        return self.bodies.get(name) if kind is Kind.WORKLOAD else None

    def wrote(self, kind: Kind, namespace: str, name: str, response: Json | None) -> None:
        self.written.append(name)

    def deleted(self, kind: Kind, namespace: str, name: str) -> None:
        raise AssertionError(name)

    def watched(self, kind: Kind) -> bool:
        return True


def job_body(phase: str, **spec: Any) -> Json:
    from support import job

    body = job(**spec)
    body["metadata"] = {"name": OWNER.name, "namespace": OWNER.namespace, "uid": OWNER.uid,
                        "labels": {workload.LABEL_QUEUE: "q"}, "generation": 1}  # fmt: skip
    body["status"] = {"phase": phase, "observedGeneration": 1}
    return body


def wl_body(name: str, *conds: tuple[str, str]) -> Json:
    return {
        "metadata": {"name": name, "namespace": OWNER.namespace, "resourceVersion": "3",
                     "ownerReferences": [OWNER.reference()]},
        "status": {"conditions": [{"type": t, "status": s} for t, s in conds]},
    }  # fmt: skip


def test_a_settled_job_finishes_its_workloads_until_they_are(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from trainium_operator.api import parsed

    body = job_body("Failed")
    spec = parsed.spec(body)
    names = {s: workload.workload_name(OWNER, spec, s) for s in ("precompile", "train")}
    admitted = wl_body(names["train"], ("QuotaReserved", "True"), ("Admitted", "True"))
    done = wl_body(names["precompile"], ("Admitted", "True"), ("Finished", "True"))
    finished: list[Json] = []

    def finish(found: Json, condition: Json) -> Json:
        finished.append(condition)
        return found

    monkeypatch.setattr(workloadwrites.kueueio, "finish_workload", finish)
    read = Reader(admitted, done)
    workloadwrites.settle(body, read)
    assert read.written == [names["train"]]
    assert [(c["type"], c["reason"]) for c in finished] == [("Finished", "Failed")]
    finished.clear()
    workloadwrites.settle(job_body("Succeeded"), Reader(done))  # nothing left: nothing written
    assert finished == []
    unlabelled = job_body("Failed")
    unlabelled["metadata"]["labels"] = {}
    unwatched = Reader(admitted, done)
    unwatched.watched = lambda kind: False  # type: ignore[method-assign]
    workloadwrites.settle(unlabelled, unwatched)  # no label, no index: no GET per settled job
    assert finished == []
    workloadwrites.settle(unlabelled, Reader(admitted, done))  # it lost the label: still finished
    assert [(c["type"], c["reason"]) for c in finished] == [("Finished", "Failed")]


# --- (2) a compile Workload outlives no compile ---------------------------------------------

HIT = Observed(storage_ready=True, policy="IfNotCached", cache_recorded=True)


@pytest.mark.parametrize("state", [Admission.PENDING, Admission.ADMITTED, Admission.EVICTED])
def test_a_cache_hit_releases_the_compile_workload_it_no_longer_needs(state: Admission) -> None:
    obs = Observed(**{**HIT.__dict__, "quota": kueue(pre=state, active=False)})
    d = lifecycle.decide(obs)
    assert Action.RELEASE_PRECOMPILE_WORKLOAD in d.actions
    assert Action.ACTIVATE_WORKLOADS not in d.actions  # never admitted again
    assert Action.CREATE_TRAINING_WORKLOAD in d.actions


def test_waiting_for_another_jobs_compile_holds_no_compile_workload() -> None:
    obs = Observed(storage_ready=True, policy="IfNotCached", cache_holder="other",
                   cache_holder_job="other", quota=kueue(pre=Admission.ADMITTED))  # fmt: skip
    d = lifecycle.decide(obs)
    assert d.phase is Phase.WAITING_FOR_CACHE
    assert d.actions == (Action.CREATE_TRAINING_WORKLOAD, Action.RELEASE_PRECOMPILE_WORKLOAD)


@pytest.mark.parametrize(
    "obs",
    [
        Observed(storage_ready=True, policy="IfNotCached"),  # a miss: it compiles
        Observed(storage_ready=True, policy="Always", cache_recorded=True),
        Observed(storage_ready=True, policy="IfNotCached", precompile=Child.RUNNING),
    ],
)
def test_a_compile_still_needed_keeps_its_workload(obs: Observed) -> None:
    d = lifecycle.decide(Observed(**{**obs.__dict__, "quota": kueue(pre=Admission.ADMITTED)}))
    assert Action.RELEASE_PRECOMPILE_WORKLOAD not in d.actions


def test_a_succeeded_compile_is_finished_not_released() -> None:
    obs = Observed(storage_ready=True, policy="IfNotCached", precompile=Child.SUCCEEDED,
                   cache_recorded=True, cache_holder="self",
                   quota=kueue(pre=Admission.ADMITTED))  # fmt: skip
    d = lifecycle.decide(obs)
    assert Action.FINISH_PRECOMPILE_WORKLOAD in d.actions
    assert Action.RELEASE_PRECOMPILE_WORKLOAD not in d.actions


# --- (8) the deadline's clock starts at admission --------------------------------------------


def composed(obs: Observed, previous: Json | None = None) -> Json:
    d = lifecycle.decide(obs)
    inputs = status.Inputs(previous or {}, d, None, obs, _accounted(), name="bert",
                           generation=1, digests={}, now="2026-11-29T00:00:00Z")  # fmt: skip
    return status.compose(inputs)


def _accounted() -> Any:
    from trainium_operator.domain import budget

    return budget.Accounted(budget.read({}))


def test_no_start_time_while_kueue_has_not_admitted_the_job() -> None:
    waiting = Observed(storage_ready=True, policy="Never", quota=kueue(train=Admission.PENDING))
    assert "startTime" not in composed(waiting)
    admitted = Observed(storage_ready=True, policy="Never", training=Child.RUNNING,
                        quota=kueue(train=Admission.ADMITTED))  # fmt: skip
    assert composed(admitted)["startTime"] == "2026-11-29T00:00:00Z"
    kept = composed(waiting, {"phase": "Pending", "startTime": "2026-11-28T00:00:00Z"})
    assert kept["startTime"] == "2026-11-28T00:00:00Z"  # a requeue keeps the first admission
    assert composed(Observed(storage_ready=True, policy="Never"))["startTime"]  # no Kueue
