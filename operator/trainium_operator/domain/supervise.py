"""Pure: when the operator recreates a training gang itself instead of letting Volcano restart it.

Volcano restarts a gang from the same template, so onto the same nodes, and only for a failed
pod. Two cases need a new Volcano job instead: a failure that points at a node not yet excluded
(the new job's affinity keeps it out, nodes.py), a node that says it is failing before any pod
did (health.py) or that steps slower than the gang (stragglers.py), and a hang (progress.py: no
pod failed at all).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from trainium_operator.domain import nodes
from trainium_operator.domain.failures import Failure
from trainium_operator.domain.model import Child

#: Training gangs the operator may stop and create again (they exist and have not ended).
LIVE = frozenset({Child.PENDING, Child.RUNNING, Child.RESTARTING})


def gang_to_replace(
    failure: Failure | None,
    training: Child,
    status: Mapping[str, Any],
    hung: Failure | None,
    sick: Failure | None = None,
) -> tuple[tuple[str, ...], Failure | None]:
    """(nodes the next Volcano job keeps out of, the failure to recreate the gang for, if any).

    `sick`: a gang node's own signal (health.py, stragglers.py), a node-fault failure too.
    """
    excluded = nodes.names(status)
    for found in (failure, sick):
        node = nodes.newly_faulty(found, status)
        if node is not None and training in LIVE:
            return (*excluded, node), found
    if hung is not None and failure is None and training is Child.RUNNING:
        return excluded, hung
    return excluded, None


def explain_unschedulable(failure: Failure | None, status: Mapping[str, Any]) -> Failure | None:
    """An unschedulable gang of a job that keeps nodes out says so: they may be why."""
    excluded = nodes.names(status)
    if failure is None or failure.reason != "Unschedulable" or not excluded:
        return failure
    shown = ", ".join(excluded[-5:]) + (
        f" and {len(excluded) - 5} more" if len(excluded) > 5 else ""
    )
    note = (
        f"; this job keeps {len(excluded)} node(s) out after failures there "
        f"(status.excludedNodes: {shown}), so too few nodes may be left for the gang"
    )
    return replace(failure, message=failure.message + note)
