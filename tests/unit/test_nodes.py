"""Nodes a failure pointed at: recorded on status (bounded) and kept out of the next gang."""

from __future__ import annotations

import pytest
from support import job

from trainium_operator.api.spec import parse
from trainium_operator.domain import budget, nodes
from trainium_operator.domain.failures import make_failure
from trainium_operator.manifests import builders
from trainium_operator.manifests.ownership import Owner

OWNER = Owner("bert", "team-a", "uid-1")
NOW = "2026-11-22T06:40:00Z"


def fault(reason: str = "PreflightFailed", node: str = "ip-1") -> object:
    from dataclasses import replace

    return replace(make_failure(reason, f"pod p: {reason}"), node=node)


def test_a_node_fault_on_a_new_node_is_found_once() -> None:
    status: dict = {}
    assert nodes.newly_faulty(fault(), status) == "ip-1"
    status["excludedNodes"] = nodes.record(status, "ip-1", "PreflightFailed", NOW)
    assert nodes.newly_faulty(fault(), status) is None
    assert status["excludedNodes"] == [{"node": "ip-1", "reason": "PreflightFailed", "time": NOW}]


@pytest.mark.parametrize("reason", ["UserCodeError", "OOMKilled", "Evicted", "Hung"])
def test_other_failures_exclude_no_node(reason: str) -> None:
    assert nodes.newly_faulty(fault(reason), {}) is None


def test_the_list_is_bounded_newest_last() -> None:
    status: dict = {}
    for i in range(nodes.MAX_EXCLUDED + 3):
        status["excludedNodes"] = nodes.record(status, f"n{i}", "EfaInitFailed", NOW)
    got = nodes.names(status)
    assert (
        len(got) == nodes.MAX_EXCLUDED
        and got[0] == "n3"
        and got[-1] == f"n{nodes.MAX_EXCLUDED + 2}"
    )


def test_malformed_entries_are_ignored() -> None:
    assert nodes.names({"excludedNodes": [{"node": "a"}, "b", {"x": 1}]}) == ("a",)
    assert nodes.names({"excludedNodes": "a"}) == ()


def test_every_pod_of_the_next_gang_keeps_out_of_excluded_nodes() -> None:
    spec = parse(job(nodes=2))
    vcjob = builders.build_vcjob(spec, OWNER, "train", ("ip-1", "ip-2"))
    for task in vcjob["spec"]["tasks"]:
        pod = task["template"]["spec"]
        required = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        (term,) = required["nodeSelectorTerms"]
        assert term == {  # one value per field requirement: the API server allows no more
            "matchFields": [
                {"key": "metadata.name", "operator": "NotIn", "values": ["ip-1"]},
                {"key": "metadata.name", "operator": "NotIn", "values": ["ip-2"]},
            ]
        }
        assert pod["nodeSelector"]["node.kubernetes.io/instance-type"] == spec.instanceType


def test_no_exclusions_no_affinity() -> None:
    vcjob = builders.build_vcjob(parse(job()), OWNER, "train")
    assert "affinity" not in vcjob["spec"]["tasks"][0]["template"]["spec"]


def test_an_operator_restart_for_a_bad_node_spends_no_retry_and_counts_once() -> None:
    before = budget.Accounted(budget.Tally(restarts=1, disruptions=0))
    once = budget.replaced(before, "PreflightFailed", max_retries=3)
    assert (once.tally.restarts, once.tally.disruptions) == (1, 1)
    assert once.disrupted == ("PreflightFailed",) and once.exhausted is None
    assert budget.replaced(once, "PreflightFailed", max_retries=3) == once


def test_an_operator_restart_for_a_hang_spends_a_retry_until_none_is_left() -> None:
    got = budget.replaced(budget.Accounted(budget.Tally(restarts=2)), "Hung", max_retries=3)
    assert got.tally.restarts == 3 and got.restarted == ("Hung",) and got.exhausted is None
    spent = budget.replaced(budget.Accounted(got.tally), "Hung", max_retries=3)
    assert spent.exhausted is not None and spent.exhausted.reason == "MaxRetriesExceeded"
    assert spent.tally.restarts == 3


def test_any_number_of_excluded_nodes_meets_the_api_servers_one_value_rule() -> None:
    """kube-apiserver: 'must be only one value when operator is In or NotIn for node field
    selector' (issue 25, bug 4: the second bad node made every replacement gang refused)."""
    many = tuple(f"ip-{i}" for i in range(nodes.MAX_EXCLUDED))
    (term,) = nodes.affinity(many)["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert all(len(r["values"]) == 1 for r in term["matchFields"])
    assert [r["values"][0] for r in term["matchFields"]] == list(many)
