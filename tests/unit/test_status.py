"""Status rendering keeps timestamps stable unless something really changed."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from trainium_operator.domain import status
from trainium_operator.domain.lifecycle import Blocker, Child, Decision, Observed, decide

T0 = "2026-01-01T00:00:00Z"
T1 = "2026-01-01T00:05:00Z"
T2 = "2026-01-01T01:00:00Z"

PRECOMPILING = decide(Observed(storage_ready=True, precompile=Child.RUNNING))
TRAINING = decide(Observed(storage_ready=True, precompile=Child.SUCCEEDED, training=Child.RUNNING))
SUCCEEDED = decide(Observed(storage_ready=True, cache_recorded=True, training=Child.SUCCEEDED))
FAILED = decide(Observed(storage_ready=True, training=Child.FAILED, cache_recorded=True))


def render(decision: Decision, previous: dict[str, Any], now: str, gen: int = 1) -> dict[str, Any]:
    return status.render(
        status.Frame(
            decision, previous, gen, now, cache_key="k" * 32, cache_name="bert-large",
            precompile_job="bert-compile", training_job="bert-train",
        )
    )  # fmt: skip


def by_type(st: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in st["conditions"]}


def test_first_status_stamps_now() -> None:
    st = render(PRECOMPILING, {}, T0)
    assert st["phase"] == "Precompiling"
    assert st["startTime"] == T0
    assert "completionTime" not in st
    assert {c["lastTransitionTime"] for c in st["conditions"]} == {T0}
    assert st["observedGeneration"] == 1
    assert st["precompileJob"] == "bert-compile"
    assert st["trainingJob"] == "bert-train"


def test_unchanged_status_keeps_every_transition_time() -> None:
    first = render(PRECOMPILING, {}, T0)
    again = render(PRECOMPILING, first, T1)
    assert again["conditions"] == first["conditions"]
    assert again["startTime"] == T0
    assert not status.changed(first, again)


def test_only_conditions_whose_status_changed_move() -> None:
    first = render(PRECOMPILING, {}, T0)
    later = render(TRAINING, first, T1)
    before, after = by_type(first), by_type(later)
    assert before["Precompiled"]["status"] == "False" and after["Precompiled"]["status"] == "True"
    assert after["Precompiled"]["lastTransitionTime"] == T1
    assert after["Running"]["lastTransitionTime"] == T1
    # Same status, other reason: the transition time stays.
    assert after["Validated"]["lastTransitionTime"] == T0
    assert after["StorageReady"]["lastTransitionTime"] == T0
    assert after["Succeeded"]["lastTransitionTime"] == T0
    assert later["startTime"] == T0
    assert status.changed(first, later)


def test_completion_time_is_set_once() -> None:
    running = render(TRAINING, {}, T0)
    done = render(SUCCEEDED, running, T1)
    assert done["phase"] == "Succeeded"
    assert done["completionTime"] == T1
    assert done["startTime"] == T0
    again = render(SUCCEEDED, done, T2)
    assert again["completionTime"] == T1
    assert again["startTime"] == T0
    assert not status.changed(done, again)


def test_failed_is_terminal_too() -> None:
    assert render(FAILED, {}, T0)["completionTime"] == T0


@pytest.mark.parametrize(
    ("decision", "hit", "outcome"), [(SUCCEEDED, True, "hit"), (TRAINING, False, "miss")]
)
def test_cache_outcome(decision: Decision, hit: bool, outcome: str) -> None:
    cache = render(decision, {}, T0)["cache"]
    assert cache == {"key": "k" * 32, "name": "bert-large", "hit": hit, "outcome": outcome}


def test_no_outcome_when_precompile_is_never_used() -> None:
    never = decide(Observed(storage_ready=True, policy="Never", training=Child.RUNNING))
    cache = render(never, {}, T0)["cache"]
    assert "hit" not in cache and "outcome" not in cache


def test_generation_is_recorded_everywhere() -> None:
    st = render(TRAINING, render(TRAINING, {}, T0), T1, gen=4)
    assert st["observedGeneration"] == 4
    assert {c["observedGeneration"] for c in st["conditions"]} == {4}


def test_restarts_are_reported() -> None:
    restarting = decide(
        Observed(storage_ready=True, cache_recorded=True, training=Child.RESTARTING, restarts=2)
    )
    assert render(restarting, {}, T0)["restarts"] == 2


def test_huge_messages_are_clipped_on_status() -> None:
    from trainium_operator.domain.lifecycle import invalid
    from trainium_operator.domain.status import MAX_MESSAGE, Frame, render

    problems = [f"spec.env[{i}].value: {'x' * 40000} is too long" for i in range(30)]
    new = render(Frame(invalid(problems), {}, 1, "2026-11-22T00:00:00Z"))
    assert len(new["message"]) == MAX_MESSAGE and new["message"].endswith("more characters)")
    assert all(len(c["message"]) <= MAX_MESSAGE for c in new["conditions"])
    assert len(str(new)) < 4 * MAX_MESSAGE


@pytest.mark.parametrize(
    "obs",
    [
        Observed(storage_blocker=Blocker("ClaimNotFound", "no claim")),  # before any look-up
        Observed(storage_ready=True, cache_holder="other"),  # WaitingForCache: may yet hit
        Observed(storage_ready=True, queue_blocker=Blocker("QueueNotFound", "no queue")),
    ],
    ids=["claim-missing", "waiting-for-cache", "queue-missing"],
)
def test_the_cache_column_says_dash_until_a_stage_decides(obs: Observed) -> None:
    """`kubectl get tj` must not say `miss` for a job that may still hit."""
    st = status.render(status.Frame(decide(obs), {}, 1, T0, cache_key="k" * 32, cache_name="c"))
    assert st["cache"]["outcome"] == "-" and "hit" not in st["cache"]


def test_conditions_have_metav1_conditions_shape() -> None:
    """Every condition the lifecycle produces validates against the CRD's condition schema."""
    import jsonschema
    import yaml
    from support import CRD_FILE
    from test_lifecycle import CASES

    crd = yaml.safe_load(CRD_FILE.read_text(encoding="utf-8"))
    status_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    item = status_schema["properties"]["conditions"]["items"]
    assert item["required"] == ["type", "status", "lastTransitionTime", "reason", "message"]
    assert set(item["properties"]) == {
        "type", "status", "lastTransitionTime", "reason", "message", "observedGeneration",
    }  # fmt: skip
    assert item["properties"]["reason"]["pattern"] == "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
    assert item["properties"]["observedGeneration"]["minimum"] == 0
    for case in CASES:
        for cond in status.conditions(decide(case.obs), [], 3, T0):
            jsonschema.validate(cond, item)
            assert cond["observedGeneration"] == 3


def test_a_refused_edit_keeps_the_cache_of_what_runs() -> None:
    """After ImmutableFieldChanged the edited spec's key was never compiled (issue 21)."""
    first = render(PRECOMPILING, {}, T0)
    first["cache"]["entry"] = "entry-of-what-runs"
    edited = status.render(status.Frame(
        PRECOMPILING, first, generation=2, now=T1, cache_key="e" * 32, cache_name="edited",
        precompile_job="bert-compile", cache_extra={"entry": "edited-entry"}, held=True,
    ))  # fmt: skip
    assert edited["cache"] == first["cache"]
    followed = status.render(status.Frame(
        PRECOMPILING, first, generation=2, now=T1, cache_key="e" * 32, cache_name="edited",
        precompile_job="bert-compile",
    ))  # fmt: skip
    assert followed["cache"]["key"] == "e" * 32


def merged(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386 merge patch, as the API server applies a status patch."""
    out = dict(target)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def test_a_finished_job_drops_the_live_gangs_bookkeeping() -> None:
    """describe showed `Restart Cursor` and `Progress.Gang` uids on every failed job (issue 34)."""
    from trainium_operator.domain import budget

    live = render(TRAINING, {}, T0)
    live["restartCursor"] = {"uid": "u-1", "retryCount": 1, "pendingFailure": ""}
    live["progress"] = {"gang": "u-1", "step": 10, "totalSteps": 100, "display": "10/100 (10%)"}
    inputs = status.Inputs(
        live, FAILED, None, Observed(), budget.Accounted(budget.read(live)), name="bert",
        generation=1, digests={}, now=T1,
    )  # fmt: skip
    new = status.compose(inputs)
    stored = merged(live, status.patch_body(live, new))
    assert "restartCursor" not in stored
    assert stored["progress"] == {"step": 10, "totalSteps": 100, "display": "10/100 (10%)"}
    assert stored["phase"] == "Failed" and stored["restarts"] == 0  # the count stays
    again = status.compose(replace(inputs, previous=stored))
    assert again is stored  # settled: no write each pass after


def test_a_finished_job_drops_its_spec_digest_and_a_live_one_keeps_it() -> None:
    """describe showed `Spec Digest` on every job (issue 43, item 6): it guards a live job
    against an edit of a graph-defining field; a finished job never runs again."""
    from support import spec_of

    from trainium_operator.domain import budget, specdigest

    digests = {"nodes": "d1", "image": "d2"}
    started = specdigest.combined(digests)
    spec = spec_of(nodes=2)
    live = render(TRAINING, {}, T0)
    live["specDigest"] = started
    training = status.Inputs(
        live, TRAINING, spec, Observed(), budget.Accounted(budget.read(live)), name="bert",
        generation=1, digests=digests, now=T1,
    )  # fmt: skip
    assert status.compose(training).get("specDigest", started) == started  # kept while live
    finished = replace(training, decision=FAILED)
    new = status.compose(finished)
    assert new["specDigest"] is None  # a merge-patch null removes it
    stored = merged(live, status.patch_body(live, new))
    assert "specDigest" not in stored and stored["phase"] == "Failed"
    assert status.compose(replace(finished, previous=stored)) is stored  # never written again
    legacy = {**live, "specDigests": dict(digests)}
    legacy.pop("specDigest")
    ended = status.compose(replace(finished, previous=legacy))
    gone = merged(legacy, status.patch_body(legacy, ended))
    assert "specDigests" not in gone and "specDigest" not in gone
