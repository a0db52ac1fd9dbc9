"""Two --standalone operators by mistake: a presence Lease each, an ERROR line and a gauge."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from trainium_operator.runtime import standalone
from trainium_operator.runtime.standalone import Presence, live_others

NOW = datetime.datetime(2026, 11, 25, 5, 0, tzinfo=datetime.timezone.utc)


class Leases:
    """One namespace's Leases, shared by the processes under test."""

    def __init__(self) -> None:
        self.by_name: dict[str, dict[str, Any]] = {}

    def put(self, body: dict[str, Any]) -> None:
        self.by_name[body["metadata"]["name"]] = body

    def list(self, namespace: str) -> list[dict[str, Any]]:
        return list(self.by_name.values())

    def delete(self, namespace: str, name: str) -> None:
        self.by_name.pop(name, None)


def lease(holder: str, renewed: datetime.datetime, duration: int = 45) -> dict[str, Any]:
    spec = {"holderIdentity": holder, "renewTime": standalone.micro(renewed),
            "leaseDurationSeconds": duration}  # fmt: skip
    return {"spec": spec}


def test_only_other_live_holders_count() -> None:
    leases = [
        lease("me", NOW),
        lease("b", NOW - datetime.timedelta(seconds=10)),
        lease("gone", NOW - datetime.timedelta(seconds=100)),
        {"spec": {}},
    ]
    assert live_others(leases, "me", NOW) == ["b"]


def test_a_second_standalone_is_said_loudly_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    shared, clock = Leases(), [0.0]
    a = Presence(shared, identity="op-a", namespace="ops", clock=lambda: clock[0])
    b = Presence(shared, identity="op-b", namespace="ops", clock=lambda: clock[0])
    assert a.check(NOW) == [] and standalone.PEERS._value.get() == 0
    assert b.check(NOW) == ["op-a"]
    assert a.check(NOW) == ["op-b"] and standalone.PEERS._value.get() == 1
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 2 and "another --standalone trainium operator" in errors[0].message
    a.check(NOW)  # the same peer, soon after: not said again
    assert len([r for r in caplog.records if r.levelname == "ERROR"]) == 2
    clock[0] += standalone.REPEAT
    a.check(NOW)  # still there ten minutes on: said again
    assert len([r for r in caplog.records if r.levelname == "ERROR"]) == 3
    b.stop()
    assert a.check(NOW) == [] and standalone.PEERS._value.get() == 0
