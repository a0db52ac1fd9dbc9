"""Before and after submitting: a missing PriorityClass, and pods Volcano cannot create."""

from __future__ import annotations

from typing import Any

import pytest

from trainium_operator.cluster import eventlooks, k8s, observe
from trainium_operator.cluster.reads import ApiReader

Json = dict[str, Any]
NOW = "2026-11-25T10:00:00Z"


def vcjob(phase: str = "Pending", created: str = "2026-11-25T09:59:00Z") -> Json:
    return {"metadata": {"name": "j-train", "uid": "u1", "creationTimestamp": created},
            "status": {"state": {"phase": phase}}}  # fmt: skip


def event(at: str, message: str = "pods is forbidden: no PriorityClass with name high was found",
          uid: str | None = "u1", kind: str = "Job") -> Json:  # fmt: skip
    ref = {"kind": kind, "apiVersion": "batch.volcano.sh/v1alpha1", "name": "j-train"}
    if uid:
        ref["uid"] = uid
    return {
        "reason": "FailedCreate",
        "message": message,
        "lastTimestamp": at,
        "involvedObject": ref,
    }


def pods_not_created(namespace: str, job: Json | None, now: str) -> Any:
    """The blocker a pass sees from its own look at the gang's Events."""
    return eventlooks.failed_create(eventlooks.look_at_events(namespace, job, now), now)


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[Json]:
    found: list[Json] = []

    def listed(namespace: str, involved: str, reason: str) -> list[Json]:
        assert (namespace, involved, reason) == ("team-a", "j-train", "FailedCreate")
        return found

    monkeypatch.setattr(k8s, "list_events", listed)
    return found


def test_the_newest_failed_create_is_the_reason(events: list[Json]) -> None:
    events += [event("2026-11-25T09:59:10Z", "old words"), event("2026-11-25T09:59:50Z")]
    blocker = pods_not_created("team-a", vcjob(), NOW)
    assert blocker is not None and blocker.reason == "FailedCreate"
    assert (
        "no PriorityClass with name high" in blocker.message and "old words" not in blocker.message
    )


def test_an_old_failed_create_no_longer_speaks(events: list[Json]) -> None:
    events.append(event("2026-11-25T09:40:00Z"))
    assert pods_not_created("team-a", vcjob(), NOW) is None


@pytest.mark.parametrize("other", [{"uid": "u0"}, {"kind": "PodGroup"}])
def test_events_of_another_object_do_not_count(events: list[Json], other: Json) -> None:
    events.append(event("2026-11-25T09:59:50Z", **other))
    assert pods_not_created("team-a", vcjob(), NOW) is None


def test_a_young_gang_costs_no_event_list(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before the first look, a pending gang is Volcano still at work: no list per pass."""
    monkeypatch.setattr(k8s, "list_events", lambda *a: pytest.fail("listed events"))
    young = vcjob(created="2026-11-25T09:59:50Z")
    assert pods_not_created("team-a", young, NOW) is None


def test_only_a_pending_gang_is_looked_at(
    events: list[Json], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(k8s, "list_events", lambda *a: pytest.fail("listed events"))
    assert pods_not_created("team-a", vcjob("Running"), NOW) is None
    assert pods_not_created("team-a", None, NOW) is None


@pytest.mark.parametrize(
    ("created", "expected"),
    [("2026-11-25T09:59:55Z", 10.0), ("2026-11-25T09:59:00Z", 240.0),
     ("2026-11-25T09:55:00Z", 600.0), ("2026-11-25T09:30:00Z", None)],
)  # fmt: skip
def test_a_pending_gang_is_looked_at_a_few_times_then_left(
    created: str, expected: float | None
) -> None:
    assert eventlooks.next_event_look(vcjob(created=created), NOW) == expected
    assert eventlooks.next_event_look(vcjob("Running", created), NOW) is None


@pytest.mark.parametrize(
    ("age", "number"),
    [(0, 0), (14.9, 0), (15, 1), (59, 1), (60, 2), (300, 3), (899, 3), (900, 4), (1799, 4),
     (1800, 5), (2700, 6)],
)  # fmt: skip
def test_looks_are_numbered_by_age(age: float, number: int) -> None:
    assert eventlooks.look_number(age) == number


def test_events_are_listed_once_per_look_not_per_pass(events: list[Json]) -> None:
    """Passes between two looks reuse the last look; its recency is judged at each pass."""
    events.append(event("2026-11-25T09:59:50Z"))
    first = eventlooks.look_at_events("team-a", vcjob(), NOW)
    assert first is not None and first.number == 2 and first.at == "2026-11-25T09:59:50Z"
    events.clear()  # a list now would find nothing
    again = eventlooks.look_at_events("team-a", vcjob(), "2026-11-25T10:00:30Z", first)
    assert again is first
    assert eventlooks.failed_create(again, "2026-11-25T10:00:30Z") is not None
    assert eventlooks.failed_create(again, "2026-11-25T10:11:00Z") is None  # no longer recent
    later = eventlooks.look_at_events("team-a", vcjob(), "2026-11-25T10:04:00Z", first)
    assert later is not None and later.number == 3 and not later.at  # the next look lists


def test_a_new_gang_instance_is_looked_at_anew(events: list[Json]) -> None:
    events.append(event("2026-11-25T09:59:50Z"))
    before = eventlooks.EventLook("u0", 2, "j-train", "2026-11-25T09:50:00Z", "old gang")
    looked = eventlooks.look_at_events("team-a", vcjob(), NOW, before)
    assert looked is not None and looked.gang == "u1" and looked.message != "old gang"


def test_a_missing_priority_class_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    classes = {"high": {"metadata": {"name": "high"}, "value": 1000}}
    monkeypatch.setattr(k8s, "get_priority_class", classes.get)
    read = ApiReader()
    assert observe.priority_blocker("high", read) is None
    assert observe.priority_blocker(None, read) is None
    blocker = observe.priority_blocker("urgent", read)
    assert blocker is not None and blocker.reason == "PriorityClassNotFound"
    assert "'urgent'" in blocker.message and "priorityClassName" in blocker.message
