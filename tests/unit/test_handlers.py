"""The handler layer's failure policy: an API error or a reset connection is retried soon."""

from __future__ import annotations

from typing import Any

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from trainium_operator import handlers, k8s


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
