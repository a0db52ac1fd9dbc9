"""Events as `kubectl describe` and `kubectl get events` show them: an action word, no repeats."""

from __future__ import annotations

import re
from typing import Any

import pytest

from trainium_operator.cluster import report
from trainium_operator.domain import events, lifecycle
from trainium_operator.domain.lifecycle import Blocker, Child, Observed

BODY = {
    "apiVersion": "trainium.dev/v1alpha1",
    "kind": "TrainiumJob",
    "metadata": {"name": "bert", "namespace": "ml", "uid": "uid-1", "resourceVersion": "7"},
}


def test_an_event_carries_an_action_word_and_names_its_job() -> None:
    ev = events.build(
        BODY,
        "Warning",
        "ClaimNotFound",
        "no claim",
        "Wait",
        now_micro="2026-01-01T00:00:00.000001Z",
    )
    assert ev["action"] == "Wait" and ev["type"] == "Warning" and ev["reason"] == "ClaimNotFound"
    assert ev["involvedObject"] == {
        "apiVersion": "trainium.dev/v1alpha1", "kind": "TrainiumJob", "name": "bert",
        "namespace": "ml", "uid": "uid-1", "resourceVersion": "7",
    }  # fmt: skip
    assert ev["metadata"]["namespace"] == "ml" and ev["metadata"]["name"].startswith("bert.")
    assert ev["reportingComponent"] == "trainium-operator" and ev["reportingInstance"]
    assert ev["eventTime"] == "2026-01-01T00:00:00.000001Z"


def test_a_long_message_fits_the_api_servers_note_limit() -> None:
    long = events.build(BODY, "Warning", "OOMKilled", "x" * 5000, "Fail", now_micro="t")
    assert len(long["message"]) == 1024 and long["message"].endswith("more characters)")
    named = events.build({**BODY, "metadata": {**BODY["metadata"], "name": "n" * 253}},
                         "Normal", "Pending", "m", "Wait", now_micro="t")  # fmt: skip
    assert len(named["metadata"]["name"]) <= 253


def test_every_action_is_one_word() -> None:
    for action in {*events.PHASE_ACTIONS.values(), events.WAIT, events.RESTART}:
        assert re.fullmatch(r"[A-Z][a-z]+", action), action
    assert set(events.PHASE_ACTIONS) == {p.value for p in lifecycle.Phase}


@pytest.mark.parametrize(
    "obs",
    [
        Observed(storage_blocker=Blocker("ClaimNotFound", "claim fsx-claim not found")),
        Observed(storage_ready=True, queue_blocker=Blocker("QueueNotFound", "queue q not found")),
    ],
    ids=["claim", "queue"],
)
def test_a_blocked_job_posts_each_text_once(obs: Observed) -> None:
    """Its first pass announces the blocker and the transition to Pending: not the same text."""
    posted: list[tuple[str, str, str, str]] = []

    def emit(_body: Any, kind: str, reason: str, message: str, action: str) -> None:
        posted.append((kind, reason, message, action))

    decision = lifecycle.decide(obs)
    new = {"phase": decision.phase.value, "conditions": []}
    report.announce(BODY, {}, new, decision, emit)
    messages = [m for _, _, m, _ in posted]
    assert len(posted) == 2 and len(set(messages)) == 2, posted
    assert [a for *_, a in posted] == ["Wait", "Wait"]


def test_a_gang_failure_before_a_restart_says_restart() -> None:
    posted: list[str] = []
    obs = Observed(storage_ready=True, cache_recorded=True, training=Child.RESTARTING)
    decision = lifecycle.decide(obs)
    failure = {"reason": "NeuronRuntimeError", "message": "nrt", "retry": True}
    new = {"phase": "Training", "lastFailure": failure}
    previous = {"phase": "Training"}
    report.announce(BODY, previous, new, decision, lambda *a: posted.append(a[-1]))
    assert posted == ["Restart"]
