"""The operator SIGKILLed at each point of a lifecycle: a restart converges, nothing is duplicated.

The emulator's kill switch fires at one request of the operator: right after it was answered
(a crash after a write went through) or as it arrives (a crash during the request).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest
from reliability_kit import StartOperator, sigkill

from faults import KillSwitch
from fleet import Cluster, good_spec
from harness import OperatorProcess
from k8s_semantics import ApiRequest

FSX = {"fileSystemId": "fs-0123456789abcdef0", "mountName": "abcdefgh",
       "dnsName": "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com"}  # fmt: skip
CONVERGE_SECONDS = 90
VOLUME_SECONDS = 30  # the operator's resync (20 s) plus slack


def creates(resource: str) -> Callable[[ApiRequest], bool]:
    return lambda r: r.verb == "create" and r.resource == resource


def status_patch(r: ApiRequest) -> bool:
    return r.verb == "patch" and r.resource == "trainiumjobs" and r.subresource == "status"


def deletes(resource: str) -> Callable[[ApiRequest], bool]:
    return lambda r: r.verb == "delete" and r.resource == resource


# name: (which request, which occurrence, kill after it was answered?)
POINTS: dict[str, tuple[Callable[[ApiRequest], bool], int, bool]] = {
    "after-storage": (creates("persistentvolumeclaims"), 1, True),
    "after-precompile-create": (creates("jobs"), 1, True),
    "after-cache-record": (creates("configmaps"), 1, True),
    "after-training-create": (creates("jobs"), 2, True),
    "during-status-patch": (status_patch, 2, False),
    "during-ttl-delete": (deletes("trainiumjobs"), 1, False),
    "during-volume-delete": (deletes("persistentvolumes"), 1, False),
}


def added(cluster: Cluster) -> Counter[str]:
    """How many times each object of the job was created (ADDED), by resource/name."""

    def read() -> Counter[str]:
        return Counter(
            f"{res.plural}/{e['object']['metadata']['name']}"
            for _, res, e in cluster.emulator._log
            if e["type"] == "ADDED" and res.plural not in ("events", "namespaces", "queues")
        )

    return cluster.server.call(read)


@pytest.mark.parametrize("point", list(POINTS))
def test_killed_operator_restarts_and_converges(
    point: str, cluster: Cluster, start_operator: StartOperator
) -> None:
    match, nth, after = POINTS[point]
    op: OperatorProcess = start_operator(cluster)
    switch = KillSwitch(match, sigkill(op), after=after, nth=nth)
    cluster.emulator.faults = switch
    cluster.start_volcano()
    spec = good_spec(cluster.queue, "kill", storage={"fsx": FSX},
                     runPolicy={"ttlSecondsAfterFinished": 1})  # fmt: skip
    cluster.create_job("victim", spec)
    cluster.wait(lambda: switch.fired, CONVERGE_SECONDS, f"the operator to reach {point}")
    assert op.process is not None and op.process.wait(10) == -9
    op.start(timeout=60)
    # ttlSecondsAfterFinished: 1, so converged means Succeeded, then deleted with its volume.
    cluster.wait(lambda: "victim" not in cluster.jobs(), CONVERGE_SECONDS, "victim Succeeded+gone")
    assert "Succeeded" in cluster.phase_history("victim")
    twice = {k: n for k, n in added(cluster).items() if n > 1}
    assert twice == {}, f"created more than once: {twice}"
    assert cluster.backwards(["victim"]) == {}, cluster.phase_history("victim")
    # The static FSx volume is cluster-scoped: ownerReferences cannot take it along.
    volumes = "v1/persistentvolumes"
    ours = lambda: [  # noqa: E731  (the user's provisioned volume stays)
        v for v in cluster.server.list(volumes)
        if (v["metadata"].get("labels") or {}).get("app.kubernetes.io/managed-by")
    ]  # fmt: skip
    cluster.wait(lambda: not ours(), VOLUME_SECONDS, "the volume deleted")
