"""The operator recreates a gang itself for a failure on a new node, or a hang; never twice."""

from __future__ import annotations

from dataclasses import replace

import pytest

from trainium_operator.domain.failures import make_failure
from trainium_operator.domain.model import Child
from trainium_operator.domain.supervise import gang_to_replace

BAD = replace(make_failure("EfaInitFailed", "pod p: fi_getinfo failed"), node="ip-2")
HUNG = make_failure("Hung", "no progress")
KNOWN = {"excludedNodes": [{"node": "ip-1", "reason": "PreflightFailed"}]}


@pytest.mark.parametrize("training", [Child.PENDING, Child.RUNNING, Child.RESTARTING])
def test_a_failure_on_a_new_node_replaces_the_gang_and_adds_the_node(training: Child) -> None:
    assert gang_to_replace(BAD, training, KNOWN, None) == (("ip-1", "ip-2"), BAD)


def test_a_node_already_excluded_is_left_to_volcano() -> None:
    again = replace(BAD, node="ip-1")
    assert gang_to_replace(again, Child.RUNNING, KNOWN, None) == (("ip-1",), None)


@pytest.mark.parametrize("training", [Child.ABSENT, Child.FAILED, Child.SUCCEEDED])
def test_no_live_gang_nothing_to_replace(training: Child) -> None:
    assert gang_to_replace(BAD, training, {}, HUNG) == ((), None)


def test_a_hang_replaces_a_running_gang_unless_a_pod_failed_already() -> None:
    assert gang_to_replace(None, Child.RUNNING, {}, HUNG) == ((), HUNG)
    assert gang_to_replace(None, Child.PENDING, {}, HUNG) == ((), None)
    user = make_failure("UserCodeError", "boom")
    assert gang_to_replace(user, Child.RUNNING, {}, HUNG) == ((), None)


def test_an_unschedulable_gang_names_the_nodes_the_job_keeps_out() -> None:
    from trainium_operator.domain.supervise import explain_unschedulable

    stuck = make_failure("Unschedulable", "pod p cannot be scheduled: 0/2 nodes are available")
    got = explain_unschedulable(stuck, KNOWN)
    assert got is not None and got.message == (
        "pod p cannot be scheduled: 0/2 nodes are available; this job keeps 1 node(s) out after "
        "failures there (status.excludedNodes: ip-1), so too few nodes may be left for the gang"
    )
    assert explain_unschedulable(stuck, {}) is stuck
    assert explain_unschedulable(BAD, KNOWN) is BAD
