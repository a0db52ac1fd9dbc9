"""The operator's restart budget: attribution of Volcano's restarts, idempotence, limits."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from trainium_operator.api import crd
from trainium_operator.domain import budget
from trainium_operator.domain.budget import Accounted, Cursor, Gang, Tally, account
from trainium_operator.domain.failures import Failure, make_failure
from trainium_operator.domain.lifecycle import Action, Child, Observed, Phase, decide

EFA = make_failure("EfaInitFailed", "pod w-1 container node (Error, exit 1): fi_getinfo failed")
EVICTED = make_failure("Evicted", "pod w-0: Evicted (Evicted): node low on memory")
OOM = make_failure("OOMKilled", "pod w-0 container node: OOMKilled (exit 137)")


def step(
    tally: Tally, uid: str, retries: int, failure: Failure | None = None,
    restarting: bool = False, max_retries: int = 3,
) -> Accounted:  # fmt: skip
    return account(tally, Gang(uid, retries, restarting), failure, max_retries)


def test_nothing_live_keeps_the_totals_and_cursor() -> None:
    before = Tally(2, 1, Cursor("u1", 3))
    assert account(before, None, EFA, 3) == Accounted(before)


def test_a_new_volcano_job_starts_a_cursor_at_zero() -> None:
    got = step(Tally(), "u1", 0)
    assert got == Accounted(Tally(0, 0, Cursor("u1", 0)))


@pytest.mark.parametrize(
    ("failure", "restarts", "disruptions", "counted"),
    [
        (EFA, 1, 0, ("EfaInitFailed",)),
        (EVICTED, 0, 1, ("Evicted",)),
        (make_failure("Preempted", "pod w-0 preempted"), 0, 1, ("Preempted",)),
        (None, 1, 0, ("Unknown",)),  # no evidence: conservative, it spends the budget
    ],
)
def test_each_increment_goes_to_its_failure_class(
    failure: Failure | None, restarts: int, disruptions: int, counted: tuple[str, ...]
) -> None:
    got = step(Tally(cursor=Cursor("u1", 0)), "u1", 1, failure, restarting=failure is not None)
    assert (got.tally.restarts, got.tally.disruptions) == (restarts, disruptions)
    assert got.restarted + got.disrupted == counted
    assert got.tally.cursor == Cursor("u1", 1) and got.exhausted is None


def test_a_cursor_that_counted_nothing_costs_no_status_write() -> None:
    """A new gang's empty cursor is not written; the older one left on status reads the same."""
    older = Tally(1, 0, Cursor("pre", 1))
    got = step(older, "train", 0)
    assert "restartCursor" not in budget.fragment(got.tally)
    on_status = budget.fragment(older) | budget.fragment(got.tally)  # a merge patch
    assert step(budget.read(on_status), "train", 0) == got
    later = step(budget.read(on_status), "train", 1, EFA, restarting=True)
    assert later.tally.restarts == 2 and later.restarted == ("EfaInitFailed",)
    pending = step(budget.read(on_status), "train", 0, EFA)
    assert budget.fragment(pending.tally)["restartCursor"]["pendingFailure"] == "EfaInitFailed"


def test_a_repeated_pass_counts_nothing_twice() -> None:
    first = step(Tally(cursor=Cursor("u1", 0)), "u1", 1, EFA, restarting=True)
    again = step(first.tally, "u1", 1, EFA, restarting=True)
    assert again == Accounted(first.tally)
    assert budget.read(budget.fragment(again.tally) | {"restarts": 1}) == again.tally


def test_a_failure_seen_before_volcano_restarts_is_counted_when_it_does() -> None:
    """The eviction is seen while the gang runs; by the increment its pods are gone."""
    seen = step(Tally(cursor=Cursor("u1", 0)), "u1", 0, EVICTED)
    assert seen.tally == Tally(0, 0, Cursor("u1", 0, "Evicted")) and seen.exhausted is None
    restarted = step(seen.tally, "u1", 1, None)
    assert restarted.tally == Tally(0, 1, Cursor("u1", 1))
    assert restarted.disrupted == ("Evicted",)


def test_failed_pods_of_a_counted_restart_are_not_pending() -> None:
    """Restarting: the pods Volcano is killing belong to the restart already counted."""
    counted = step(Tally(cursor=Cursor("u1", 0)), "u1", 1, EFA, restarting=True)
    lingering = step(counted.tally, "u1", 1, EFA, restarting=True)
    assert lingering.tally.cursor == Cursor("u1", 1)


def test_a_fast_new_failure_after_a_restart_waits_for_its_own_increment() -> None:
    """Increment of an eviction seen earlier, and the restarted gang already failing again."""
    before = Tally(cursor=Cursor("u1", 0, "Evicted"))
    got = step(before, "u1", 1, EFA)
    assert got.tally == Tally(0, 1, Cursor("u1", 1, "EfaInitFailed"))
    assert step(got.tally, "u1", 2, None).restarted == ("EfaInitFailed",)


def test_restarts_no_pass_saw_are_unknown() -> None:
    got = step(Tally(cursor=Cursor("u1", 1)), "u1", 4, EVICTED, restarting=True)
    assert got.disrupted == ("Evicted",) and got.restarted == ("Unknown", "Unknown")
    assert (got.tally.restarts, got.tally.disruptions) == (2, 1)


def test_a_recreated_volcano_job_keeps_the_totals_growing() -> None:
    """Suspend/resume deletes the Volcano job; the new one starts at retryCount 0."""
    before = Tally(2, 1, Cursor("old", 3, "Evicted"))
    resumed = step(before, "new", 0)
    assert resumed.tally == Tally(2, 1, Cursor("new", 0))
    again = step(resumed.tally, "new", 1, EFA, restarting=True)
    assert (again.tally.restarts, again.tally.disruptions) == (3, 1)


def test_a_status_of_an_older_operator_mirrored_retry_count() -> None:
    legacy = {"phase": "Training", "restarts": 2}
    assert budget.legacy(legacy) and not budget.legacy({**legacy, "disruptions": 0})
    got = account(budget.read(legacy), Gang("u1", 2), None, 3, mirrored=True)
    assert got.tally == Tally(2, 0, Cursor("u1", 2)) and got.restarted == ()
    assert not budget.legacy({})


@pytest.mark.parametrize("retries", [0, 1, 2])
def test_a_failure_with_the_budget_spent_exhausts_it(retries: int) -> None:
    """maxRetries restarts are allowed; the failure after them fails the job."""
    spent = Tally(retries, 0, Cursor("u1", retries))
    seen = step(spent, "u1", retries, EFA, max_retries=retries)
    assert seen.exhausted is not None and seen.exhausted.reason == "MaxRetriesExceeded"
    assert seen.exhausted.failure == "EfaInitFailed"
    assert f"runPolicy.maxRetries ({retries})" in seen.exhausted.message
    # Volcano got there first: its increment is the failure that spends it, not a restart.
    raced = step(spent, "u1", retries + 1, EFA, restarting=True, max_retries=retries)
    assert raced.tally.restarts == retries and raced.restarted == ()
    assert raced.exhausted == seen.exhausted


def test_evictions_never_spend_the_budget() -> None:
    spent = Tally(2, 7, Cursor("u1", 9))
    got = step(spent, "u1", 10, EVICTED, restarting=True, max_retries=2)
    assert got.exhausted is None and got.tally.disruptions == 8
    assert step(spent, "u1", 9, EVICTED, max_retries=2).exhausted is None


def test_disruptions_have_their_own_fixed_limit() -> None:
    at_cap = Tally(0, budget.MAX_DISRUPTIONS, Cursor("u1", budget.MAX_DISRUPTIONS))
    got = step(at_cap, "u1", budget.MAX_DISRUPTIONS + 1, EVICTED, restarting=True)
    assert got.exhausted is not None and got.exhausted.reason == "TooManyDisruptions"
    assert got.tally.disruptions == budget.MAX_DISRUPTIONS


def test_a_restart_storm_stops_at_the_budget() -> None:
    """Volcano's cycle, observed at each step: Running (pods fail), Restarting, Pending."""
    tally, events = Tally(), []
    for n in range(1, 10):
        seen = step(tally, "u1", n - 1, EFA, max_retries=2)  # pods failed, gang Running
        if seen.exhausted:
            break
        tally = seen.tally
        for failure, restarting in ((EFA, True), (None, False)):  # Restarting, then Pending
            got = step(tally, "u1", n, failure, restarting=restarting, max_retries=2)
            events += budget.events(got, 2)
            tally = got.tally
    assert seen.exhausted is not None and seen.exhausted.reason == "MaxRetriesExceeded"
    assert tally.restarts == 2 and n == 3
    assert events == [
        ("GangRestarted", "whole-gang restart 1 of 2 (EfaInitFailed)"),
        ("GangRestarted", "whole-gang restart 2 of 2 (EfaInitFailed)"),
    ]


def test_disruption_events_say_they_do_not_count() -> None:
    got = step(Tally(1, 0, Cursor("u1", 1)), "u1", 2, EVICTED, restarting=True)
    [(reason, message)] = budget.events(got, 3)
    assert reason == "GangDisrupted"
    assert "does not count against runPolicy.maxRetries (3)" in message
    assert f"disruption 1 of at most {budget.MAX_DISRUPTIONS}" in message


def test_malformed_status_counts_as_nothing() -> None:
    assert budget.read({"restarts": "x", "disruptions": -1, "restartCursor": []}) == Tally()
    assert budget.read({"restartCursor": {"uid": "u", "retryCount": 2}}) == Tally(
        0, 0, Cursor("u", 2)
    )


def test_the_readme_states_the_numbers_the_code_uses() -> None:
    readme = " ".join((Path(__file__).parents[2] / "README.md").read_text().split())
    assert f"ceiling of {budget.VOLCANO_MAX_RETRY} it never reaches" in readme
    assert f"{budget.MAX_DISRUPTIONS} disruptions fail a job too" in readme


def test_the_ceiling_outlasts_every_budget_and_fits_the_crd() -> None:
    limit = crd.version_schema()["properties"]["spec"]["properties"]["runPolicy"]
    assert limit["properties"]["maxRetries"]["maximum"] == budget.MAX_RETRIES_LIMIT
    # Volcano fails a job at retryCount >= maxRetry; one job sees at most every allowed
    # restart and disruption plus the increment that spends a limit.
    assert budget.VOLCANO_MAX_RETRY > budget.MAX_RETRIES_LIMIT + budget.MAX_DISRUPTIONS + 1
    assert budget.VOLCANO_MAX_RETRY < 2**31  # int32, and not 0 (Volcano's webhook defaults 0)
    status = crd.version_schema()["properties"]["status"]["properties"]
    assert f"after {budget.MAX_DISRUPTIONS}" in status["disruptions"]["description"]
    assert (
        f"after {budget.MAX_DISRUPTIONS} of them"
        in limit["properties"]["maxRetries"]["description"]
    )


# --- the lifecycle's decision -------------------------------------------------------------

SPENT = budget.Exhausted("MaxRetriesExceeded", "EfaInitFailed", "runPolicy.maxRetries (2) spent")


@pytest.mark.parametrize("child", [Child.RUNNING, Child.PENDING, Child.RESTARTING])
def test_a_spent_budget_stops_the_live_training_gang(child: Child) -> None:
    obs = Observed(storage_ready=True, cache_recorded=True, training=child, restarts=2,
                   exhausted=SPENT, failure=EFA)  # fmt: skip
    d = decide(obs)
    assert d.phase is Phase.FAILED and d.actions == (Action.STOP_TRAINING,)
    failed = next(c for c in d.conditions if c.type == "Failed")
    assert failed.reason == "MaxRetriesExceeded" and "maxRetries (2)" in failed.message
    assert "fi_getinfo" in failed.message and d.restarts == 2


def test_a_spent_budget_stops_the_precompile_gang_and_releases_the_entry() -> None:
    obs = Observed(storage_ready=True, precompile=Child.RUNNING, cache_holder="self",
                   exhausted=SPENT)  # fmt: skip
    d = decide(obs)
    assert d.phase is Phase.FAILED
    assert d.actions == (Action.STOP_PRECOMPILE, Action.RECORD_CACHE_FAILED)
    assert "the precompile gang was stopped" in d.message


def test_a_failure_no_restart_can_fix_keeps_its_own_reason() -> None:
    obs = Observed(storage_ready=True, cache_recorded=True, training=Child.RUNNING,
                   exhausted=SPENT, failure=OOM)  # fmt: skip
    failed = next(c for c in decide(obs).conditions if c.type == "Failed")
    assert failed.reason == "OOMKilled"


@pytest.mark.parametrize("child", [Child.SUCCEEDED, Child.ABSENT])
def test_a_spent_budget_without_a_live_gang_changes_nothing(child: Child) -> None:
    obs = Observed(storage_ready=True, cache_recorded=True, training=child)
    assert decide(replace(obs, exhausted=SPENT)) == decide(obs)


def test_17_a_failure_no_restart_fixes_spends_no_restart_for_volcanos_own() -> None:
    """Volcano restarted for an OOM before a pass saw it: the job fails, nothing is spent."""
    got = step(Tally(cursor=Cursor("u1", 0)), "u1", 1, OOM, restarting=True, max_retries=0)
    assert (got.tally.restarts, got.tally.disruptions, got.exhausted) == (0, 0, None)
    pending = step(Tally(cursor=Cursor("u1", 0, "OOMKilled")), "u1", 1, None, max_retries=0)
    assert (pending.tally.restarts, pending.exhausted) == (0, None)


def test_17_a_gang_replaced_for_a_bad_node_after_volcano_restarted_for_it_counts_once() -> None:
    """One pass counted Volcano's restart for the EFA failure; the next replaces the gang."""
    counted = step(Tally(cursor=Cursor("u1", 0)), "u1", 1, EFA, restarting=True)
    assert counted.restarted == ("EfaInitFailed",)
    later = budget.replaced(Accounted(counted.tally), "EfaInitFailed", max_retries=3)
    assert later.tally.restarts == 1 and later.restarted == ()
    pending = step(Tally(cursor=Cursor("u1", 0)), "u1", 0, EFA)  # seen before Volcano restarts
    first = budget.replaced(pending, "EfaInitFailed", max_retries=3)
    assert first.tally.restarts == 1 and first.restarted == ("EfaInitFailed",)


def test_an_increment_with_no_cause_waits_while_the_gang_restarts() -> None:
    """The pod watch carrying the cause can trail the Volcano job's; OOMKilled then costs none."""
    held = step(Tally(cursor=Cursor("u1", 0)), "u1", 1, None, restarting=True)
    assert held == Accounted(Tally(cursor=Cursor("u1", 0)))
    late = step(held.tally, "u1", 1, OOM, restarting=True)
    assert (late.tally.restarts, late.restarted) == (0, ())
    assert late.tally.cursor is not None and late.tally.cursor.retry_count == 1


def test_an_increment_whose_cause_never_comes_counts_once_the_gang_is_pending() -> None:
    held = step(Tally(cursor=Cursor("u1", 0)), "u1", 1, None, restarting=True)
    pending = step(held.tally, "u1", 1, None, restarting=False)
    assert (pending.tally.restarts, pending.restarted) == (1, ("Unknown",))
