"""The emulator forgets answered requests (kmock 0.8 scanned them all on each new one: O(n^2))
and never drops an object over a generateName collision."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import kubernetes
import pytest

import k8s_semantics
from harness import EmulatorServer, make_emulator


@pytest.fixture
def private() -> Iterator[EmulatorServer]:
    """An emulator of its own, so no other test's watches are in flight."""
    server = EmulatorServer(make_emulator())
    server.start()
    yield server
    server.stop()


def _get_many(server: EmulatorServer, n: int) -> None:
    for _ in range(n):
        url = f"{server.url}/api/v1/namespaces/default/configmaps"
        with urllib.request.urlopen(url, timeout=5) as response:
            assert response.status == 200


def retained(server: EmulatorServer) -> int:
    """How many requests kmock still holds (each new request is routed by scanning them)."""
    return server.call(server.emulator.retained_requests)


def test_answered_requests_are_forgotten(private: EmulatorServer) -> None:
    _get_many(private, 200)
    assert retained(private) == 0
    assert len(private.emulator.api_requests) == 200  # our own record (no scans) keeps them


def test_a_test_can_ask_to_keep_requests(private: EmulatorServer) -> None:
    private.emulator.keep_requests = True
    _get_many(private, 20)
    assert retained(private) == 20
    assert len(list(private.emulator)) == 20  # kmock's own request views work again


def test_generate_name_retries_a_taken_suffix(
    private: EmulatorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    suffixes = iter(["bbbbb", "bbbbb", "bbbbb", "ccccc"])
    monkeypatch.setattr(k8s_semantics, "_suffix", lambda: next(suffixes))
    config = kubernetes.client.Configuration(host=private.url)
    core = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(config))
    event = {"metadata": {"generateName": "kopf-event-"}, "involvedObject": {}, "message": "m"}
    names = [core.create_namespaced_event("default", event).metadata.name for _ in range(2)]
    assert names == ["kopf-event-bbbbb", "kopf-event-ccccc"]


def test_generated_names_fit_and_use_the_api_server_alphabet() -> None:
    name = k8s_semantics.generated_name("x" * 70)
    assert len(name) == 63 and name.startswith("x" * 58)
    assert set(name[58:]) <= set(k8s_semantics.NAME_ALPHABET)
