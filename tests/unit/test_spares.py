"""spec.spares: refused at apply naming the field; the gang's reservation; the swap decision."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from support import job, spec_of

from trainium_operator.api import crd
from trainium_operator.api import spec as api_spec
from trainium_operator.domain import spares
from trainium_operator.manifests import builders, workload
from trainium_operator.manifests import spares as spare_pods
from trainium_operator.manifests.ownership import Owner
from trainium_trainer import __main__ as trainer_main
from trainium_trainer import contract, standby

Json = dict[str, Any]
OWNER = Owner("bert", "team-a", "0c4a1f0e-1111-2222-3333-444455556666")
NOW = "2026-11-29T04:00:00Z"


def problems(body: Json) -> str:
    with pytest.raises(api_spec.SpecError) as err:
        api_spec.parse(body)
    return str(err.value)


# --- the spec -----------------------------------------------------------------------------------


def test_spares_default_to_none_and_parse() -> None:
    assert spec_of().spares == 0
    assert spec_of(nodes=4, spares=2).spares == 2


@pytest.mark.parametrize(
    ("spec", "wanted"),
    [
        ({"spares": -1}, "spec.spares: -1 is less than the minimum of 0"),
        ({"spares": 65}, "spec.spares: 65 is greater than the maximum of 64"),
        ({"nodes": 1000, "spares": 25}, "spec.nodes + spec.spares may not exceed 1,024"),
    ],
)
def test_bad_spares_are_refused_naming_the_field(spec: Json, wanted: str) -> None:
    assert wanted in problems(job(**spec))


def test_spares_are_immutable() -> None:
    old, new = job(nodes=2, spares=1), job(nodes=2, spares=2)
    assert crd.validate(old)[1] == []
    _, errors = crd.validate(new, old=old)
    assert any("spec.spares is immutable" in e for e in errors), errors


# --- the gang: a spare task, its reservation, Kueue's count -------------------------------------


def gang(nodes: int = 2, spares_: int = 1, **more: Any) -> Json:
    return builders.build_vcjob(spec_of(nodes=nodes, spares=spares_, **more), OWNER, "train")


def test_a_gang_without_spares_is_unchanged() -> None:
    spec = spec_of(nodes=2)
    job_ = builders.build_vcjob(spec, OWNER, "train")
    assert spare_pods.with_spares(job_, spec) is job_
    assert [t["name"] for t in job_["spec"]["tasks"]] == ["node"]


def test_a_precompile_gang_has_no_spares() -> None:
    compile_ = builders.build_vcjob(spec_of(nodes=2, spares=1), OWNER, "precompile")
    assert [t["name"] for t in compile_["spec"]["tasks"]] == ["node"]
    assert compile_["spec"]["minAvailable"] == 2


def test_the_gang_reserves_its_spares_beside_the_world() -> None:
    spec = spec_of(nodes=4, spares=2)
    vcjob = builders.build_vcjob(spec, OWNER, "train")
    training, spare = vcjob["spec"]["tasks"]
    assert vcjob["spec"]["minAvailable"] == 6
    assert (training["name"], training["replicas"], training["minAvailable"]) == ("node", 4, 4)
    assert (spare["name"], spare["replicas"], spare["minAvailable"]) == ("spare", 2, 2)
    assert spare_pods.COMPLETE_ON_TRAINING in training["policies"]
    assert "policies" not in spare  # a spare lost restarts nothing
    (container,) = spare["template"]["spec"]["containers"]
    assert container["command"] == ["python3", "-m", "trainium_trainer", "standby"]
    assert "args" not in container and "ports" not in container
    assert contract.ENV_NODE_INDEX not in {e["name"] for e in container["env"]}
    assert spare_pods.is_spare(spare["template"])
    assert not spare_pods.is_spare(training["template"])
    # the same node a training pod needs: selector, resources, preflight
    (trainer,) = training["template"]["spec"]["containers"]
    assert container["resources"] == trainer["resources"]
    assert spare["template"]["spec"]["nodeSelector"] == training["template"]["spec"]["nodeSelector"]
    assert spare["template"]["spec"].get("initContainers") == training["template"]["spec"].get(
        "initContainers"
    )


def test_a_lowered_reservation_keeps_asking_for_every_spare() -> None:
    spec = spec_of(nodes=4, spares=2)
    plain = builders.build_vcjob(spec_of(nodes=4), OWNER, "train")
    vcjob = spare_pods.with_spares(plain, spec, reserved=1)
    assert vcjob["spec"]["minAvailable"] == 5
    assert vcjob["spec"]["tasks"][1]["replicas"] == 2  # the replacement spare's pod
    assert vcjob["spec"]["tasks"][1]["minAvailable"] == 1


def test_the_kueue_workload_counts_the_spares() -> None:
    """HyperPod's rule: 4 replicas + 2 spares ask Kueue for 6 pods."""
    spec = spec_of(nodes=4, spares=2)
    vcjob = builders.build_vcjob(spec, OWNER, "train")
    kueue = workload.Kueue(queue="team-a")
    body = workload.build_workload(spec, OWNER, "train", kueue, vcjob)
    (pod_set,) = body["spec"]["podSets"]
    assert pod_set["count"] == 6


# --- the swap decision --------------------------------------------------------------------------


def waiting(reserved: int = 1, restarted: bool = True) -> spares.Gang:
    return spares.Gang(reserved, waiting=True, restarted=restarted, replicas=reserved)


def test_reserved_reads_the_gangs_min_available() -> None:
    spec = spec_of(nodes=4, spares=2)
    assert spares.reserved_of(spec, {"spec": {"minAvailable": 6}}) == 2
    assert spares.reserved_of(spec, {"spec": {"minAvailable": 5}}) == 1
    assert spares.reserved_of(spec, {"spec": {"minAvailable": 3}}) == 0
    assert spares.reserved_of(spec, {"spec": {}}) == 2
    assert spares.gang_min(spec) == 6 and spares.gang_min(spec, 0) == 4


def test_a_lost_training_node_is_replaced_by_a_spare_at_the_same_size() -> None:
    spec = spec_of(nodes=2, spares=1)
    swap = spares.decide(spec, waiting(1), 2, ("n-2", "NodeGone"), ["n-3"])
    assert swap == spares.Swap(1, 0, "n-2", "NodeGone", ("n-3",))
    message = spares.message(spec, swap)
    assert "training node n-2 was lost (NodeGone)" in message
    assert "spares stood on n-3" in message and "same world size, 2 nodes" in message
    assert "asks for 1 replacement(s) once it trains again" in message


@pytest.mark.parametrize(
    ("gang_", "schedulable", "why"),
    [
        (waiting(1), 3, "every reserved spare still has a node"),
        (waiting(0), 2, "no spare left: the elastic shrink or the gang restart"),
        (waiting(1), 1, "fewer nodes than the world: no spare can fill it"),
        (waiting(1, restarted=False), 2, "a first start waits for its whole reservation"),
        (spares.Gang(1, waiting=False, restarted=True), 2, "a formed gang needs nothing"),
        (None, 2, "no live gang"),
        (waiting(1), None, "not counted"),
    ],
)
def test_no_swap(gang_: spares.Gang | None, schedulable: int | None, why: str) -> None:
    spec = spec_of(nodes=2, spares=1)
    assert spares.decide(spec, gang_, schedulable, ("", "NodeGone")) is None, why


def test_two_spares_two_losses_one_at_a_time_then_both() -> None:
    spec = spec_of(nodes=4, spares=2)
    lost = ("a", "NodeGone")
    assert spares.decide(spec, waiting(2), 5, lost) == spares.Swap(2, 1, "a", "NodeGone")
    assert spares.decide(spec, waiting(2), 4, lost) == spares.Swap(2, 0, "a", "NodeGone")


def test_only_a_due_swap_counts_nodes() -> None:
    spec = spec_of(nodes=2, spares=1)
    assert spares.needs_count(spec, waiting(1))
    assert not spares.needs_count(spec, waiting(0))
    assert not spares.needs_count(spec_of(nodes=2), waiting(1))
    assert not spares.needs_count(spec, None)


def test_lost_node_names_the_node_gone_else_a_node_fault() -> None:
    assert spares.lost_node("n-1", "Evicted", ["n-4", "n-5"]) == ("n-5", "NodeGone")
    assert spares.lost_node("n-1", "NeuronRuntimeError") == ("n-1", "NeuronRuntimeError")
    # an eviction's node may be any pod's the restart stopped: no evidence
    assert spares.lost_node("n-1", "Evicted") == ("", "NodeGone")
    assert spares.lost_node(None, None) == ("", "NodeGone")


def test_status_counts_swaps_and_keeps_the_last() -> None:
    spec = spec_of(nodes=2, spares=1)
    assert spares.status(spec_of(), {}, spares.Seen(), None, NOW) is None
    first = spares.status(spec, {}, spares.Seen(1, ["n-3"]), None, NOW)
    assert first == {"wanted": 1, "reserved": 1, "swaps": 0, "standby": ["n-3"]}
    lost = spares.status(spec, {"spares": first}, spares.Seen(1, None, ("n-2",)), None, NOW)
    assert lost is not None and lost["lost"] == ["n-2"] and lost["standby"] == ["n-3"]
    assert spares.lost_since({"spares": lost}) == ["n-2"]
    swap = spares.Swap(1, 0, "n-2", "NodeGone", ("n-3",))
    after = spares.status(spec, {"spares": lost}, spares.Seen(1), swap, NOW)
    assert after is not None
    assert (after["reserved"], after["swaps"], after["standby"]) == (0, 1, [])
    assert after["lost"] == []
    assert after["lastSwap"]["node"] == "n-2" and after["lastSwap"]["spares"] == ["n-3"]
    assert after["lastSwap"]["time"] == NOW and after["lastSwap"]["reason"] == "NodeGone"
    again = spares.status(spec, {"spares": after}, spares.Seen(0, []), None, NOW)
    assert again is not None and again["swaps"] == 1 and again["standby"] == []


def test_a_gang_running_again_asks_for_its_replacement_spares_and_reserves_them() -> None:
    spec = spec_of(nodes=2, spares=2)
    running = spares.Gang(0, waiting=False, restarted=True, running=True, replicas=0)
    assert spares.replenish(spec, running, None) == (0, 2)  # the replacements' pods
    asked = spares.Gang(0, False, True, running=True, replicas=2)
    assert spares.replenish(spec, asked, 0) is None
    assert spares.replenish(spec, asked, 1) == (1, 2)  # one stands by: reserved again
    assert spares.replenish(spec, spares.Gang(2, False, True, True, 2), 2) is None
    assert spares.replenish(spec, spares.Gang(0, True, True, running=False), 2) is None
    assert spares.replenish(spec_of(nodes=2), running, 2) is None
    vcjob = {"spec": {"tasks": [{"name": "node", "replicas": 2}, {"name": "spare", "replicas": 1}]}}
    assert spares.spare_replicas(spec, vcjob) == 1
    assert spares.spare_replicas(spec, {"spec": {}}) == 2


def test_spare_pods_beyond_the_nodes_left_are_dropped_even_unreserved() -> None:
    """A replacement asked for but not yet reserved could take a training pod's node."""
    spec = spec_of(nodes=2, spares=1)
    gang_ = spares.Gang(0, waiting=True, restarted=True, replicas=1)
    assert spares.decide(spec, gang_, 2, ("n-2", "NodeGone")) == spares.Swap(
        0, 0, "n-2", "NodeGone"
    )
    assert spares.decide(spec, gang_, 3, ("n-2", "NodeGone")) is None


# --- the trainer's standby ----------------------------------------------------------------------


def test_standby_waits_until_stopped_and_exits_0() -> None:
    stop = threading.Event()
    done: list[int] = []
    waiter = threading.Thread(target=lambda: done.append(standby.main([], stop)))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive() and not done
    stop.set()
    waiter.join(10)
    assert done == [0]


def test_the_trainer_dispatches_standby(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    monkeypatch.setattr(standby, "main", lambda argv: seen.append(list(argv)) or 0)
    assert trainer_main.main(["standby"]) == 0 and seen == [[]]


# --- the swap's one write -----------------------------------------------------------------------


def test_the_swap_patches_the_gangs_reservation_guarded_by_uid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from trainium_operator.cluster import k8s, sparesio

    spec = spec_of(nodes=4, spares=2)
    vcjob = builders.build_vcjob(spec, OWNER, "train")
    vcjob["metadata"]["uid"] = "gang-uid"
    sent: list[tuple[Any, ...]] = []
    monkeypatch.setattr(k8s, "custom", lambda: type("C", (), {"patch_namespaced_custom_object": 0}))
    monkeypatch.setattr(k8s, "request", lambda *a, **kw: sent.append((a, kw)) or {"ok": 1})
    assert sparesio.patch(vcjob, spec, 1, 1) == {"ok": 1}
    [(args, kwargs)] = sent
    assert args[1:6] == ("batch.volcano.sh", "v1alpha1", "team-a", "jobs", "bert-train")
    assert args[6] == [
        {"op": "test", "path": "/metadata/uid", "value": "gang-uid"},
        {"op": "test", "path": "/spec/tasks/1/name", "value": "spare"},
        {"op": "replace", "path": "/spec/minAvailable", "value": 5},
        {"op": "replace", "path": "/spec/tasks/1/minAvailable", "value": 1},
        {"op": "replace", "path": "/spec/tasks/1/replicas", "value": 1},
    ]
    assert kwargs == {"_content_type": "application/json-patch+json", "guarded": True}


def test_standby_nodes_are_the_running_spares() -> None:
    from trainium_operator.cluster import sparesio

    def pod(name: str, node: str, phase: str, spare: bool) -> Json:
        labels = {spare_pods.LABEL_ROLE: spare_pods.ROLE_SPARE} if spare else {}
        return {"metadata": {"name": name, "labels": labels}, "spec": {"nodeName": node},
                "status": {"phase": phase}}  # fmt: skip

    pods = [
        pod("g-node-0", "a", "Running", False),
        pod("g-spare-0", "c", "Running", True),
        pod("g-spare-1", "b", "Running", True),
        pod("g-spare-2", "d", "Pending", True),
    ]
    assert sparesio.standby_nodes(pods) == ["b", "c"]
