"""status.history from consecutive statuses, and the cost estimate it gives (by hand)."""

from __future__ import annotations

from trainium_operator.api.spec import parse
from trainium_operator.domain import cost, history


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


def test_gang_pending_spans_fill_the_waiting_bucket_and_keep_the_total() -> None:
    """The same job, now with what the gangs spent unscheduled: a split, not a new cost."""
    steps = [  # (time, status, gang pending in this pass)
        ("2026-11-22T10:00:00Z", st("Pending"), False),
        ("2026-11-22T10:05:00Z", st("Precompiling"), True),  # precompile gang created
        ("2026-11-22T10:10:00Z", st("Precompiling"), False),  # ... and running
        ("2026-11-22T10:35:00Z", st("Training", "GangPending"), True),  # training gang created
        ("2026-11-22T11:00:00Z", st("Training", "GangRunning"), False),
        ("2026-11-22T12:00:00Z", st("Training", "Restarting"), False),
        ("2026-11-22T12:05:00Z", st("Training", "Restarting"), True),  # Volcano: Pending again
        ("2026-11-22T12:15:00Z", st("Training", "GangRunning"), False),
        ("2026-11-22T13:35:00Z", st("Succeeded", "Completed"), False),
    ]
    previous: dict[str, object] = {}
    for now, new, pending in steps:
        new = {**new, "history": history.advance(previous, new, now, gang_pending=pending)}
        previous = new
    entries = previous["history"]
    # describe shows the transitions; each phase carries its gang's unscheduled spans.
    assert [(e["phase"], e.get("waitedForGang")) for e in entries] == [  # type: ignore[union-attr, index]
        ("Pending", None),
        ("Precompiling", ["2026-11-22T10:05:00Z/2026-11-22T10:10:00Z"]),
        ("Training", ["2026-11-22T10:35:00Z/2026-11-22T11:00:00Z",
                      "2026-11-22T12:05:00Z/2026-11-22T12:15:00Z"]),
        ("Restarting", None),
        ("Succeeded", None),
    ]  # fmt: skip
    spec = parse({"spec": {"image": "i", "instanceType": "trn1.32xlarge", "nodes": 2,
                           "storage": {"claimName": "c"}}})  # fmt: skip
    got = history.job_cost(spec, entries, "2026-11-22T13:35:00Z")  # type: ignore[arg-type]
    hours = {k: round(float(v), 6) for k, v in got.instance_hours.items()}
    # By hand, 2 nodes: waiting 5 + 25 min (the restart's pending 10 min count as restart);
    # compiling 30 - 5 min; restarts 15 min; training 180 - 25 - 15 min.
    assert hours == {
        "waiting": round(2 * 30 / 60, 6), "compiling": round(2 * 25 / 60, 6),
        "restarts": round(2 * 15 / 60, 6), "training": round(2 * 140 / 60, 6),
    }  # fmt: skip
    assert cost.display(got) == "$150.50"  # the same total: only the split moved


def test_a_phase_change_closes_the_stages_pending_span() -> None:
    """A precompile seen only pending then done: its span ends with the phase, not later."""
    pre = {"phase": "Precompiling", "history": history.advance({}, st("Precompiling"), "t1",
                                                               gang_pending=True)}  # fmt: skip
    train = st("Training", "GangPending")
    entries = history.advance(pre, train, "t2", gang_pending=True)
    assert entries == [
        {"phase": "Precompiling", "since": "t1", "waitedForGang": ["t1/t2"]},
        {"phase": "Training", "since": "t2", "waitedForGang": ["t2/"]},
    ]


OLD_HISTORY = [  # as an operator before issue 34 wrote it: GangPending entries of their own
    {"phase": "Precompiling", "since": "2026-11-22T10:05:00Z"},
    {"phase": "GangPending", "since": "2026-11-22T10:05:00Z", "until": "2026-11-22T10:10:00Z"},
    {"phase": "Training", "since": "2026-11-22T10:35:00Z"},
    {"phase": "GangPending", "since": "2026-11-22T10:35:00Z", "until": "2026-11-22T11:00:00Z"},
    {"phase": "Restarting", "since": "2026-11-22T12:00:00Z", "until": "2026-11-22T12:15:00Z"},
    {"phase": "GangPending", "since": "2026-11-22T12:05:00Z"},
]


def test_an_older_operators_history_is_read_and_rewritten_in_place() -> None:
    """An upgrade: the open GangPending span closes when the gang runs, in its phase's entry."""
    previous = {"phase": "Training", "history": OLD_HISTORY,
                "conditions": [{"type": "Running", "reason": "GangPending"}]}  # fmt: skip
    entries = history.advance(previous, st("Training", "GangRunning"), "2026-11-22T12:15:00Z")
    assert [(e["phase"], e.get("waitedForGang")) for e in entries] == [
        ("Precompiling", ["2026-11-22T10:05:00Z/2026-11-22T10:10:00Z"]),
        ("Training", ["2026-11-22T10:35:00Z/2026-11-22T11:00:00Z",
                      "2026-11-22T12:05:00Z/2026-11-22T12:15:00Z"]),
        ("Restarting", None),
    ]  # fmt: skip
    assert OLD_HISTORY[-1] == {"phase": "GangPending", "since": "2026-11-22T12:05:00Z"}  # a copy


def test_an_older_history_costs_the_same_read_as_is_or_upgraded() -> None:
    spec = parse({"spec": {"image": "i", "instanceType": "trn1.32xlarge", "nodes": 2,
                           "storage": {"claimName": "c"}}})  # fmt: skip
    closed = [*OLD_HISTORY[:-1], {**OLD_HISTORY[-1], "until": "2026-11-22T12:15:00Z"}]
    now = "2026-11-22T13:00:00Z"
    as_is = history.job_cost(spec, closed, now)
    upgraded = history.job_cost(spec, history.upgraded(closed), now)
    assert as_is == upgraded and float(as_is.instance_hours["waiting"]) == 2 * 30 / 60


def test_a_clock_that_stepped_back_costs_zero_not_a_stuck_pass() -> None:
    """Two operators' clocks (a restart on another node) may date a phase before the last one."""
    entries = [
        {"phase": "Training", "since": "2026-11-22T12:00:00Z"},
        {"phase": "Restarting", "since": "2026-11-22T12:10:00Z", "until": "2026-11-22T12:05:00Z"},
        {"phase": "Succeeded", "since": "2026-11-22T11:59:00Z"},
    ]
    spec = parse({"spec": {"image": "i", "instanceType": "trn1.32xlarge", "nodes": 2,
                           "storage": {"claimName": "c"}}})  # fmt: skip
    got = history.job_cost(spec, entries, "2026-11-22T11:58:00Z")
    assert got.total_hours == 0


def test_gang_pending_lists_are_renamed_so_describe_starts_each_entry_at_phase() -> None:
    """Issue 43: `kubectl describe` sorts an entry's keys and puts nothing between entries, so
    `gangPending` printed above its entry's Phase, as if it belonged to the entry before."""
    previous = {"phase": "Training", "history": [
        {"phase": "Precompiling", "since": "t1", "gangPending": ["t1/t2"]},
        {"phase": "Training", "since": "t3", "gangPending": ["t3/"]},
    ]}  # fmt: skip
    entries = history.advance(previous, st("Training", "GangRunning"), "t4")
    assert entries == [
        {"phase": "Precompiling", "since": "t1", "waitedForGang": ["t1/t2"]},
        {"phase": "Training", "since": "t3", "waitedForGang": ["t3/t4"]},
    ]
    for entry in entries:
        assert sorted(entry)[0] == "phase"  # describe's first line of each entry
