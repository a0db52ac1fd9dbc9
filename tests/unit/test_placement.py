"""spec.scheduling.placement: parsed, refused where it cannot hold, and set on both Volcano jobs."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest
from support import job, spec_of

from trainium_operator.api import crd
from trainium_operator.api.instances import INSTANCE_TYPES, NETWORK_TOPOLOGY_TYPES
from trainium_operator.api.spec import Placement, parse
from trainium_operator.domain import verdicts
from trainium_operator.domain.lifecycle import Child, Observed, decide
from trainium_operator.manifests import builders, placement
from trainium_operator.manifests.ownership import Owner

Json = dict[str, Any]
OWNER = Owner("bert", "team-a", "uid-1")
STAGES = ("precompile", "train")


def test_the_placement_parses_with_its_default_mode() -> None:
    spec = spec_of(scheduling={"placement": {"networkNodeLayer": 3}})
    assert spec.scheduling.placement == Placement(mode="Required", networkNodeLayer=3)
    assert spec_of(scheduling={"placement": {"mode": "Preferred"}}).scheduling.placement == (
        Placement(mode="Preferred")
    )
    assert spec_of().scheduling.placement is None


@pytest.mark.parametrize(("layer", "tier"), [(3, 1), (2, 2), (1, 3)])
def test_a_layer_is_the_tier_volcanos_label_discovery_gives_it(layer: int, tier: int) -> None:
    """Discovery numbers tiers from the label above the hostname: layer 3 is tier 1 (the tier
    test shows real Volcano doing it: tests/cluster/test_tier_placement.py)."""
    assert placement.volcano_tier(layer) == tier
    assert placement.DISCOVERY_LABELS[-1] == placement.HOSTNAME_LABEL
    # the label `tier` places above the hostname, counting from the bottom of the list
    assert placement.DISCOVERY_LABELS[-1 - tier] == placement.layer_label(layer)


@pytest.mark.parametrize("layer", [0, 4])
def test_no_tier_for_a_layer_eks_does_not_label(layer: int) -> None:
    with pytest.raises(ValueError, match="EKS labels layers 1-3"):
        placement.volcano_tier(layer)


@pytest.mark.parametrize("stage", STAGES)
def test_required_sets_a_hard_topology_on_both_gangs(stage: str) -> None:
    spec = spec_of(nodes=2, scheduling={"placement": {"networkNodeLayer": 3}})
    vcjob = builders.build_vcjob(spec, OWNER, stage)
    assert vcjob["spec"]["networkTopology"] == {"mode": "hard", "highestTierAllowed": 1}
    assert vcjob["spec"]["minAvailable"] == 2


@pytest.mark.parametrize("stage", STAGES)
def test_preferred_sets_a_soft_topology_without_a_bound(stage: str) -> None:
    spec = spec_of(nodes=2, scheduling={"placement": {"mode": "Preferred"}})
    vcjob = builders.build_vcjob(spec, OWNER, stage)
    assert vcjob["spec"]["networkTopology"] == {"mode": "soft"}


def test_no_placement_no_topology() -> None:
    assert "networkTopology" not in builders.build_vcjob(spec_of(nodes=2), OWNER, "train")["spec"]


def test_the_crds_required_rule_lists_the_types_with_ec2_topology() -> None:
    """The CEL list repeats instances.NETWORK_TOPOLOGY_TYPES (CEL cannot import Python)."""
    rules = crd.version_schema()["properties"]["spec"]["x-kubernetes-validations"]
    [rule] = [r for r in rules if "placement" in r["rule"]]
    assert set(re.findall(r"'(trn[^']+)'", rule["rule"])) == NETWORK_TOPOLOGY_TYPES
    assert set(re.findall(r"trn[0-9a-z]+\.[0-9]+xlarge", rule["message"])) == NETWORK_TOPOLOGY_TYPES
    assert set(INSTANCE_TYPES) >= NETWORK_TOPOLOGY_TYPES


@pytest.mark.parametrize("instance", sorted(INSTANCE_TYPES))
def test_required_is_accepted_exactly_where_eks_labels_the_layers(instance: str) -> None:
    body = job(instanceType=instance, scheduling={"placement": {"networkNodeLayer": 2}})
    errors = crd.validate(body)[1]
    assert (errors == []) == (instance in NETWORK_TOPOLOGY_TYPES), errors
    preferred = job(instanceType=instance, scheduling={"placement": {"mode": "Preferred"}})
    assert crd.validate(preferred)[1] == []


def test_a_refused_placement_names_the_field_in_parse() -> None:
    with pytest.raises(ValueError, match=r"spec\.scheduling\.placement\.networkNodeLayer"):
        parse(job(scheduling={"placement": {"mode": "Required"}}))


def test_the_placement_may_change_on_a_live_job() -> None:
    """Not graph-defining: a change applies to the next gang (no transition rule holds it)."""
    old = job(scheduling={"placement": {"networkNodeLayer": 3}})
    new = job(scheduling={"placement": {"networkNodeLayer": 2}})
    assert crd.validate(new, old=old)[1] == []
    assert crd.validate(job(), old=old)[1] == []


NOTE = verdicts.placement_note(Placement(networkNodeLayer=3), 2)


def conditions(obs: Observed) -> dict[str, tuple[str, str]]:
    return {c.type: (c.reason, c.message) for c in decide(obs).conditions}


def test_a_pending_training_gang_says_what_its_placement_waits_for() -> None:
    obs = Observed(storage_ready=True, cache_recorded=True, training=Child.PENDING)
    reason, message = conditions(replace(obs, placement=NOTE))["Running"]
    assert reason == "GangPending"
    assert message.startswith("training job waiting for the gang to be scheduled; ")
    assert "all 2 node(s) under one network-node-layer-3 network node" in message
    assert "never split" in message
    assert conditions(obs)["Running"][1] == "training job waiting for the gang to be scheduled"
    running = replace(obs, training=Child.RUNNING, placement=NOTE)
    assert conditions(running)["Running"][0] == "GangRunning"


def test_a_pending_precompile_gang_says_it_too() -> None:
    obs = Observed(storage_ready=True, precompile=Child.PENDING, cache_holder="self")
    assert conditions(obs)["Precompiled"][0] == "Compiling"  # unchanged without a placement
    reason, message = conditions(replace(obs, placement=NOTE))["Precompiled"]
    assert (reason, message) == ("GangPending", f"precompile job waiting for the gang to be "
                                                f"scheduled; {NOTE}")  # fmt: skip
    assert decide(replace(obs, placement=NOTE)).message == message


def test_only_a_required_placement_holds_a_gang() -> None:
    assert verdicts.placement_note(None, 2) == ""
    assert verdicts.placement_note(Placement(mode="Preferred"), 2) == ""
