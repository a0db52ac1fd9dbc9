"""status.history from consecutive statuses, and the cost estimate it gives (by hand)."""

from __future__ import annotations

from trainium_operator import cost, history
from trainium_operator.spec import parse


def st(phase: str, running: str = "NotStarted") -> dict[str, object]:
    return {"phase": phase, "conditions": [{"type": "Running", "reason": running}]}


def test_history_records_phases_and_restart_spans_then_prices_them() -> None:
    steps = [
        ("2026-11-22T10:00:00Z", st("Pending")),
        ("2026-11-22T10:05:00Z", st("Precompiling")),
        ("2026-11-22T10:35:00Z", st("Training", "GangPending")),
        ("2026-11-22T11:00:00Z", st("Training", "GangRunning")),
        ("2026-11-22T12:00:00Z", st("Training", "Restarting")),
        ("2026-11-22T12:15:00Z", st("Training", "GangRunning")),
        ("2026-11-22T13:35:00Z", st("Succeeded", "Completed")),
    ]
    previous: dict[str, object] = {}
    for now, new in steps:
        new = {**new, "history": history.advance(previous, new, now)}
        previous = new
    entries = previous["history"]
    assert [e["phase"] for e in entries] == [  # type: ignore[union-attr, index]
        "Pending", "Precompiling", "Training", "Restarting", "Succeeded",
    ]  # fmt: skip
    spec = parse({"spec": {"image": "i", "instanceType": "trn1.32xlarge", "nodes": 2,
                           "storage": {"claimName": "c"}}})  # fmt: skip
    got = history.job_cost(spec, entries, "2026-11-22T13:35:00Z")  # type: ignore[arg-type]
    # By hand, 2 nodes at $21.50/h: compiling 0.5 h, training 3 h of which 0.25 h restarting.
    assert float(got.instance_hours["compiling"]) == 2 * 0.5
    assert float(got.instance_hours["restarts"]) == 2 * 0.25
    assert float(got.instance_hours["training"]) == 2 * 2.75
    assert cost.display(got) == f"${2 * 3.5 * 21.50:,.2f}"  # $150.50
