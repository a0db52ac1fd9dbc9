"""Fault injection for the reliability suite, over real HTTP: kinds, shares, seeds, watch drops."""

from __future__ import annotations

import json
import urllib.request
from collections import Counter
from collections.abc import Iterator

import kubernetes
import pytest
import urllib3

from faults import FaultInjector, FaultPlan
from harness import EmulatorServer, make_emulator, wait_for
from k8s_semantics import ApiRequest

OPERATOR_AGENT = "trainium-operator/test"


@pytest.fixture
def private() -> Iterator[EmulatorServer]:
    server = EmulatorServer(make_emulator())
    server.start()
    yield server
    server.stop()


def core(server: EmulatorServer, agent: str = OPERATOR_AGENT) -> kubernetes.client.CoreV1Api:
    """A client that looks like the operator (faulted) or like anyone else (not faulted)."""
    config = kubernetes.client.Configuration(host=server.url)
    config.retries = False  # see every fault, no urllib3 retry on a reset
    api = kubernetes.client.ApiClient(config)
    api.user_agent = agent
    return kubernetes.client.CoreV1Api(api)


def cm(name: str) -> dict[str, object]:
    return {"metadata": {"name": name}, "data": {"a": "1"}}


def records(n: int, verb: str = "get") -> list[ApiRequest]:
    return [
        ApiRequest(verb, "", "configmaps", None, "ns", f"c{i % 7}", OPERATOR_AGENT)
        for i in range(n)
    ]


def picks(plan: FaultPlan, recs: list[ApiRequest]) -> list[str | None]:
    injector = FaultInjector(plan)
    return [injector.pick(r) for r in recs]


def test_plan_rejects_bad_input_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"^rate: 1\.5 is not within"):
        FaultPlan(rate=1.5)
    with pytest.raises(ValueError, match=r"^kinds: unknown \['503'\]"):
        FaultPlan(rate=0.1, kinds=("503",))


def test_share_kinds_and_seed_are_deterministic() -> None:
    recs = records(3000, "patch")
    got = picks(FaultPlan(rate=0.3, seed=7), recs)
    share = sum(p is not None for p in got) / len(got)
    assert 0.27 < share < 0.33, share
    assert set(Counter(got)) == {None, "500", "429", "409", "reset"}
    assert picks(FaultPlan(rate=0.3, seed=7), recs) == got  # same seed, same faults
    assert picks(FaultPlan(rate=0.3, seed=8), recs) != got


def test_reads_never_get_409_and_other_clients_never_get_faults() -> None:
    assert "409" not in picks(FaultPlan(rate=1.0), records(200, "get"))
    kubectl = [ApiRequest("get", "", "configmaps", user_agent="kubectl/v1.37") for _ in range(50)]
    assert picks(FaultPlan(rate=1.0), kubectl) == [None] * 50


def test_500_and_429_with_retry_after_change_nothing(private: EmulatorServer) -> None:
    for kind, code in (("500", 500), ("429", 429)):
        private.emulator.faults = FaultInjector(FaultPlan(rate=1.0, kinds=(kind,), retry_after=3))
        with pytest.raises(kubernetes.client.ApiException) as e:
            core(private).create_namespaced_config_map("default", cm(f"c{kind}"))
        assert e.value.status == code
        if kind == "429":
            assert e.value.headers["Retry-After"] == "3"
    private.emulator.faults = None
    assert core(private).list_namespaced_config_map("default").items == []


def test_409_conflicts_a_patch_and_commits_a_create(private: EmulatorServer) -> None:
    api = core(private)
    private.emulator.faults = FaultInjector(FaultPlan(rate=1.0, kinds=("409",)))
    with pytest.raises(kubernetes.client.ApiException) as e:
        api.create_namespaced_config_map("default", cm("c1"))
    assert (e.value.status, json.loads(e.value.body)["reason"]) == (409, "AlreadyExists")
    with pytest.raises(kubernetes.client.ApiException) as e:
        api.patch_namespaced_config_map("c1", "default", {"data": {"a": "2"}})
    assert (e.value.status, json.loads(e.value.body)["reason"]) == (409, "Conflict")
    private.emulator.faults = None
    assert api.read_namespaced_config_map("c1", "default").data == {"a": "1"}


def test_reset_closes_the_connection_and_kubectl_like_clients_pass(
    private: EmulatorServer,
) -> None:
    private.emulator.faults = injector = FaultInjector(FaultPlan(rate=1.0, kinds=("reset",)))
    with pytest.raises(urllib3.exceptions.ProtocolError):
        core(private).list_namespaced_config_map("default")
    assert core(private, agent="kubectl/v1.37").list_namespaced_config_map("default").items == []
    assert injector.injected == Counter({"reset": 1})
    assert [r.fault for r in private.emulator.api_requests] == ["reset", ""]


def test_watches_of_the_operator_are_dropped_every_few_seconds(private: EmulatorServer) -> None:
    injector = FaultInjector(FaultPlan(watch_drop_seconds=0.4))
    private.emulator.faults = injector
    url = f"{private.url}/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=30"
    request = urllib.request.Request(url, headers={"User-Agent": "kopf/1.45.2"})
    # A drop is a reset or an incomplete chunked read; a socket timeout would mean no drop.
    with pytest.raises(Exception) as e, urllib.request.urlopen(request, timeout=10) as response:
        response.read()
    assert not isinstance(e.value, TimeoutError), "the watch was not dropped"
    wait_for(lambda: injector.injected["watch-drop"] == 1, timeout=5, what="drop counted")
