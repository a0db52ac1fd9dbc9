"""One request's transient failures are retried in place; answers and lost races are not."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from trainium_operator.cluster import k8s


def api_error(status: int, reason: str = "", retry_after: str | None = None) -> ApiException:
    exc = ApiException(status=status, reason=reason or f"HTTP {status}")
    exc.body = json.dumps({"kind": "Status", "code": status, "reason": reason})
    exc.headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return exc


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    waits: list[float] = []
    monkeypatch.setattr(k8s, "sleep", waits.append)
    yield waits


def flaky(*failures: BaseException) -> tuple[list[dict[str, object]], object]:
    """A call failing with each of `failures` in turn, then answering "ok"; records its kwargs."""
    calls: list[dict[str, object]] = []
    pending = list(failures)

    def call(*_args: object, **kwargs: object) -> str:
        calls.append(kwargs)
        if pending:
            raise pending.pop(0)
        return "ok"

    return calls, call


@pytest.mark.parametrize(
    "failure",
    [
        api_error(500, "InternalError"),
        api_error(503, "ServiceUnavailable"),
        api_error(429, "TooManyRequests", "1"),
        api_error(409, "Conflict"),
        urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError(104)),
        ConnectionResetError(104, "reset"),
    ],
    ids=["500", "503", "429", "409-conflict", "urllib3-reset", "reset"],
)
def test_a_transient_failure_is_retried_and_the_answer_returned(
    failure: BaseException, slept: list[float]
) -> None:
    calls, call = flaky(failure, failure)
    assert k8s.request(call, "a", _content_type="x") == "ok"
    assert len(calls) == 3 and len(slept) == 2
    assert all(c["_request_timeout"] == k8s.TIMEOUT and c["_content_type"] == "x" for c in calls)


@pytest.mark.parametrize(
    "failure",
    [
        api_error(400, "BadRequest"),
        api_error(403, "Forbidden"),
        api_error(404, "NotFound"),
        api_error(422, "Invalid"),
        api_error(409, "AlreadyExists"),
        ValueError("a bug, not the network"),
    ],
    ids=["400", "403", "404", "422", "409-exists", "bug"],
)
def test_an_answer_is_not_retried(failure: BaseException, slept: list[float]) -> None:
    calls, call = flaky(failure)
    with pytest.raises(type(failure)):
        k8s.request(call)
    assert len(calls) == 1 and slept == []


def test_a_guarded_write_losing_its_race_is_not_resent(slept: list[float]) -> None:
    """409 on a resourceVersion/uid precondition: sending it again cannot win; read again."""
    calls, call = flaky(api_error(409, "Conflict"))
    with pytest.raises(ApiException):
        k8s.request(call, guarded=True)
    assert len(calls) == 1 and "guarded" not in calls[0]


def test_a_guarded_write_still_survives_a_5xx(slept: list[float]) -> None:
    calls, call = flaky(api_error(500))
    assert k8s.request(call, guarded=True) == "ok" and len(calls) == 2


def test_tries_are_bounded_and_the_last_error_raised(slept: list[float]) -> None:
    errors = [api_error(500, f"try {i}") for i in range(k8s.ATTEMPTS + 2)]
    calls, call = flaky(*errors)
    with pytest.raises(ApiException) as raised:
        k8s.request(call)
    assert len(calls) == k8s.ATTEMPTS and raised.value is errors[k8s.ATTEMPTS - 1]
    assert len(slept) == k8s.ATTEMPTS - 1


def test_retry_after_is_honoured_up_to_the_cap() -> None:
    assert k8s.retry_delay(api_error(429, retry_after="1"), 0) == 1.0
    assert k8s.retry_delay(api_error(429, retry_after="120"), 0) == k8s.DELAY_CAP
    assert k8s.retry_delay(api_error(429, retry_after="soon"), 0) <= k8s.FIRST_DELAY


def test_backoff_doubles_with_jitter_below_the_cap() -> None:
    for attempt in range(8):
        ceiling = min(k8s.DELAY_CAP, k8s.FIRST_DELAY * 2**attempt)
        delays = [k8s.retry_delay(api_error(500), attempt) for _ in range(50)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays), (attempt, delays)


def test_a_create_resent_after_a_lost_answer_is_already_there(slept: list[float]) -> None:
    """The first POST went through but its answer was lost: the retry meets AlreadyExists."""
    calls, call = flaky(ConnectionResetError(104, "reset"), api_error(409, "AlreadyExists"))
    assert k8s.exists_is_ok(call, {"metadata": {}}) is None  # already there: nothing created now
    assert len(calls) == 2


class _Raw:
    """An unread answer (`_preload_content=False`): the body as the API server sent it."""

    def __init__(self, body: object) -> None:
        self.data = json.dumps(body).encode()


def test_lists_are_read_as_sent_not_through_typed_objects(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, object]] = []
    node = {"metadata": {"name": "n-1", "labels": {"a": "b"}}, "status": {"allocatable": {}}}

    class Core:
        def list_node(self, **kw: object) -> _Raw:
            calls.append(kw)
            return _Raw({"kind": "NodeList", "items": [node, "not an object"]})

        def list_namespaced_pod(self, namespace: str, **kw: object) -> _Raw:
            calls.append(kw)
            return _Raw({"kind": "PodList", "items": None})

    monkeypatch.setattr(k8s, "core", Core)
    assert k8s.list_nodes("a=b") == [node]
    assert k8s.list_pods("ns", "a=b") == []
    assert all(kw["_preload_content"] is False for kw in calls)
