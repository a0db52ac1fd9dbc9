"""A node marked bad (health signal, node-fault verdict, straggler replaced) goes to a spare.

The pure decisions of domain/spares.py pass by pass, in the orders a cluster can show them: the
pass that stops the gang for the node, the pass that swaps (the next gang waiting), the passes
that see the spare's node train; and judge.spares_status's wiring of them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from support import spec_of

from trainium_operator.cluster import judge, sparesio
from trainium_operator.cluster.observe import Seen, Views
from trainium_operator.domain import spares
from trainium_operator.domain.failures import make_failure
from trainium_operator.domain.model import Observed
from trainium_operator.manifests.ownership import Owner

Json = dict[str, Any]
NOW = "2026-11-29T04:00:00Z"
OWNER = Owner("bert", "team-a", "0c4a1f0e-1111-2222-3333-444455556666")
SPEC = spec_of(nodes=2, spares=1)
#: The new gang after the bad node was taken out: every spare asked for, waiting on the nodes.
NEXT = spares.Gang(1, waiting=True, restarted=True, replicas=1)
EXCLUDED = {"bad": "NodeUnhealthy"}


def test_a_node_taken_out_joins_the_lost_only_with_spares_and_a_replacement() -> None:
    assert spares.taken_out(SPEC, "bad", True) == ("bad",)
    assert spares.taken_out(SPEC, "bad", False) == ()  # the gang is not being replaced
    assert spares.taken_out(SPEC, None, True) == ()  # a hang names no node
    assert spares.taken_out(spec_of(nodes=2), "bad", True) == ()  # no spares: elastic/restart


@pytest.mark.parametrize("reason", ["NodeUnhealthy", "Straggler", "NeuronRuntimeError"])
def test_the_swap_names_the_bad_node_and_the_class_that_marked_it(reason: str) -> None:
    lost = spares.lost_node(None, None, ["bad"], {"bad": reason})
    assert lost == ("bad", reason)
    swap = spares.decide(SPEC, NEXT, 2, lost, ["spare-node"])
    assert swap == spares.Swap(1, 0, "bad", reason, ("spare-node",))
    said = spares.message(SPEC, swap)
    assert f"training node bad was taken out ({reason})" in said
    assert "same world size, 2 nodes (no compile, no runPolicy.maxRetries spent)" in said


def test_a_deleted_node_keeps_node_gone_beside_an_excluded_one() -> None:
    assert spares.lost_node(None, None, ["bad", "gone"], EXCLUDED) == ("gone", "NodeGone")
    assert spares.lost_node(None, None, ["gone", "bad"], EXCLUDED) == ("bad", "NodeUnhealthy")
    assert spares.lost_node("x", "NeuronRuntimeError", [], EXCLUDED) == ("x", "NeuronRuntimeError")


def test_no_spare_left_leaves_the_bad_node_to_the_elastic_shrink_or_the_restart() -> None:
    lost = ("bad", "NodeUnhealthy")
    assert spares.decide(SPEC, spares.Gang(0, True, True, replicas=0), 2, lost) is None
    assert spares.decide(SPEC, NEXT, 1, lost) is None  # fewer nodes than the world


def passes() -> tuple[Json, Json, Json]:
    """status.spares after the stop pass, the swap pass and a pass that sees it train."""
    standing = spares.status(SPEC, {}, spares.Seen(1, ["spare-node"], (), ["a", "bad"]), None, NOW)
    stopped = spares.status(SPEC, {"spares": standing}, spares.Seen(1, None, ("bad",)), None, NOW)
    assert stopped is not None and stopped["lost"] == ["bad"] and stopped["swaps"] == 0
    lost = spares.lost_node(None, None, spares.lost_since({"spares": stopped}), EXCLUDED)
    swap = spares.decide(SPEC, NEXT, 2, lost, stopped["standby"])
    assert swap is not None
    swapped = spares.status(SPEC, {"spares": stopped}, spares.Seen(1), swap, NOW)
    assert swapped is not None
    return stopped, swapped, {"spares": swapped}


def test_stop_then_swap_then_the_spares_node_is_named_once_it_trains() -> None:
    _, swapped, previous = passes()
    assert swapped["lastSwap"]["node"] == "bad" and swapped["lastSwap"]["spares"] == ["spare-node"]
    assert (
        swapped["lastSwap"]["reason"] == "NodeUnhealthy"
        and "replacement" not in swapped["lastSwap"]
    )
    assert (swapped["swaps"], swapped["reserved"], swapped["lost"]) == (1, 0, [])
    # The next gang's pods are not bound yet: nothing to name.
    pending = spares.status(SPEC, previous, spares.Seen(0, None, (), []), None, NOW)
    assert pending is not None and "replacement" not in pending["lastSwap"]
    assert spares.joined(previous, pending) is None
    # Bound: the spare's node holds a training pod now.
    seen = spares.Seen(0, [], (), ["a", "spare-node"])
    named = spares.status(SPEC, previous, seen, None, NOW)
    assert named is not None and named["lastSwap"]["replacement"] == "spare-node"
    said = spares.joined(previous, named)
    assert said is not None
    assert "spare on node spare-node took the place of training node bad (NodeUnhealthy)" in said
    # Told once; a later pass that sees other nodes (a restart) does not rename it.
    later = spares.status(SPEC, {"spares": named}, spares.Seen(0, [], (), ["a", "z"]), None, NOW)
    assert later is not None and later["lastSwap"]["replacement"] == "spare-node"
    assert spares.joined({"spares": named}, later) is None


def test_a_pass_that_does_not_see_the_pods_names_nothing() -> None:
    _, _, previous = passes()
    unseen = spares.status(SPEC, previous, spares.Seen(0), None, NOW)
    assert unseen is not None and "replacement" not in unseen["lastSwap"]


def test_spares_nodes_not_known_then_name_no_replacement() -> None:
    last = {"node": "bad", "spares": [], "reason": "NodeUnhealthy"}
    assert spares.replacement(last, ["a", "b"]) is None
    two = {"node": "bad", "spares": ["s2", "s1"]}
    assert spares.replacement(two, ["s2", "s1", "a"]) == "s1"  # both joined: the first by name


def test_a_second_bad_node_after_the_swap_needs_a_standing_replacement() -> None:
    _, _, previous = passes()
    # The replacement spare has no node yet: the next bad node finds no spare to take.
    again = spares.status(SPEC, previous, spares.Seen(0, [], ("bad2",)), None, NOW)
    assert again is not None and again["lost"] == ["bad2"]
    lost = spares.lost_node(None, None, spares.lost_since({"spares": again}), {"bad2": "Straggler"})
    assert spares.decide(SPEC, NEXT, 1, lost, []) is None  # two nodes left of three: 1 usable
    # A node came back and the replacement stood by on it: this one is swapped too.
    swap = spares.decide(SPEC, NEXT, 2, lost, ["back"])
    assert swap == spares.Swap(1, 0, "bad2", "Straggler", ("back",))


# --- judge.spares_status's wiring ---------------------------------------------------------------


@pytest.mark.parametrize("reason", ["NodeUnhealthy", "Straggler", "PreflightFailed"])
def test_the_stop_pass_records_the_bad_node_as_lost(
    monkeypatch: pytest.MonkeyPatch, reason: str
) -> None:
    """The pass that replaces the gang for a node fault (a health signal, a straggler replaced
    under spec.stragglers.replace, a verdict) puts the node on status.spares.lost, looks at no
    Node (no gang waits), and tells nothing yet."""
    monkeypatch.setattr(sparesio, "standby", lambda *a: None)
    failure = replace(make_failure(reason, f"node bad: {reason}"), node="bad")
    observed = Observed(failure=failure, replace_gang=True)
    body = {"metadata": {"name": "bert", "namespace": "team-a", "uid": OWNER.uid},
            "status": {"spares": {"wanted": 1, "reserved": 1, "swaps": 0,
                                  "standby": ["spare-node"]}}}  # fmt: skip
    said: list[tuple[Any, ...]] = []
    out = judge.spares_status(
        body, SPEC, OWNER, Seen(observed), Views(now=NOW), lambda *a: said.append(a), (),
        observed,
    )  # fmt: skip
    assert out is not None and out["lost"] == ["bad"] and out["standby"] == ["spare-node"]
    assert said == []
    # A hang's replacement names no node; a node fault not replacing the gang adds nothing.
    for obs in (Observed(replace_gang=True), Observed(failure=failure)):
        out = judge.spares_status(body, SPEC, OWNER, Seen(obs), Views(now=NOW), print, (), obs)
        assert out is not None and "lost" not in out


# --- the spare swap before the elastic shrink ---------------------------------------------------


@pytest.mark.parametrize("schedulable", range(0, 6))
def test_the_spare_swap_and_the_elastic_shrink_never_both_take_a_count(schedulable: int) -> None:
    """An elastic job with spares, its next gang waiting past shrinkAfterSeconds: a count that
    holds the world size goes to a spare (the shrink waits, the nodes hold it); one that does
    not goes to the shrink (no spare can fill it); never both, whatever the count."""
    from trainium_operator.domain import elastic
    from trainium_operator.domain.model import Child

    spec = spec_of(nodes=3, spares=1, elastic={"minNodes": 2, "globalBatchSize": 192,
                                                "batchSizePerProcess": 1})  # fmt: skip
    state = {"currentNodes": 3, "notFormedSince": "2026-11-29T03:00:00Z"}
    look = elastic.Look(Child.PENDING, NOW, schedulable)
    _, resize = elastic.step(spec, state, look)
    swap = spares.decide(spec, spares.Gang(1, True, True, replicas=1), schedulable,
                         ("bad", "NodeUnhealthy"), ["s"])  # fmt: skip
    assert not (resize is not None and swap is not None)
    if schedulable == 3:  # 4 nodes less the bad one: a spare's node takes its place
        assert swap is not None and resize is None
    if schedulable == 2:  # no spare's node left: the shrink to 2
        assert swap is None and resize is not None and resize.new == 2
