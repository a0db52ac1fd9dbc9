"""The client's connection pool fits every thread that calls the API at once (issue 21)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client, config

from trainium_operator.cluster import k8s
from trainium_operator.runtime import handlers


@pytest.fixture
def fresh_client(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """api_client() built anew against a made-up server, and forgotten afterwards."""

    def load(*_: object, **__: object) -> None:
        cfg = client.Configuration()
        cfg.host = "https://127.0.0.1:1"
        client.Configuration.set_default(cfg)

    monkeypatch.setattr(config, "load_incluster_config", load)
    before = client.Configuration.get_default_copy()
    k8s.api_client.cache_clear()
    yield
    k8s.api_client.cache_clear()
    client.Configuration.set_default(before)


def test_pool_holds_a_connection_per_pass_worker_and_handler_thread(fresh_client: None) -> None:
    """urllib3's default of 10 made 16 pass threads log "Connection pool is full" warnings."""
    api = k8s.api_client()
    pool = api.rest_client.pool_manager.connection_pool_kw["maxsize"]
    assert pool == k8s.POOL_SIZE >= handlers.WORKERS + handlers.WORKERS  # passes + kopf's threads
    assert api.configuration.host == "https://127.0.0.1:1"  # the loaded config, not a blank one
