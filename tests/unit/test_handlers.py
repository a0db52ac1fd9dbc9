"""The handler layer's failure policy: an API error or a reset connection is retried soon."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from trainium_operator import handlers, k8s
from trainium_operator.reconcile import Outcome
from trainium_operator.scheduler import BUSY


@pytest.mark.parametrize(
    "error",
    [
        urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError(104)),
        ConnectionResetError(104, "Connection reset by peer"),
        ApiException(status=503, reason="Service Unavailable"),
        ApiException(status=429, reason="Too Many Requests"),
    ],
    ids=["protocol-error", "reset", "503", "429"],
)
def test_a_failed_pass_is_retried_with_a_short_backoff(
    monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    def boom(*_: Any, **__: Any) -> Any:
        raise error

    monkeypatch.setattr(handlers, "reconcile", boom)
    key = ("ns", f"job-{id(error)}")
    assert k8s.transient(error)
    delays = [handlers.handle(key) for _ in range(4)]
    assert delays == [1.0, 2.0, 4.0, 8.0]  # not kopf's 60 s default for unknown errors


def test_a_programming_error_is_logged_and_retried_not_raised(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def boom(*_: Any, **__: Any) -> Any:
        raise KeyError("metadata")

    monkeypatch.setattr(handlers, "reconcile", boom)
    assert handlers.handle(("ns", "broken")) == 1.0
    assert "reconcile of ns/broken failed (Internal)" in caplog.text and "KeyError" in caplog.text


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


def test_triggers_during_a_pass_coalesce_into_one_more_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A trigger never holds a worker thread waiting for the job's running pass to end."""
    inside, release = threading.Event(), threading.Event()
    passes: list[int] = []

    def slow(*_: Any, **__: Any) -> Outcome:
        passes.append(len(passes))
        if len(passes) == 1:
            inside.set()
            assert release.wait(10)
        return Outcome(None)  # gone: no next look

    monkeypatch.setattr(handlers, "reconcile", slow)
    key = ("ns", "coalesced")
    results: list[object] = []
    first = threading.Thread(target=lambda: results.append(handlers.handle(key)))
    first.start()
    assert inside.wait(10)
    assert [handlers.handle(key) for _ in range(3)] == [BUSY] * 3  # at once, not blocked
    release.set()
    first.join(10)
    assert results == [None] and passes == [0, 1]  # three triggers, one more pass
    assert handlers.handle(key) is None and passes == [0, 1, 2]  # idle again: runs at once


def test_a_handler_queues_the_pass_and_returns_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """kopf's per-object worker is not held while a pass runs (its events would pile up)."""
    release, done = threading.Event(), threading.Event()

    def slow(*_: Any, **__: Any) -> Outcome:
        assert release.wait(10)
        done.set()
        return Outcome(None)

    monkeypatch.setattr(handlers, "reconcile", slow)
    handlers._wake(("ns", "queued"))  # returns although the pass is blocked
    assert not done.is_set()
    release.set()
    assert done.wait(10)
