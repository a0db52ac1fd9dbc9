"""`trainium logs`: the pods it reads and the node/rank label of each line."""

from __future__ import annotations

import pytest

from trainium_operator.domain import logs
from trainium_operator.domain.logs import Target


def pods(*names: str) -> list[dict]:
    return [{"metadata": {"name": n}} for n in names]


GANG = pods("j-train-node-1-0", "j-train-node-0-0", "j-train-node-2-0")


def test_every_node_in_order_or_the_one_asked_for() -> None:
    assert [n for n, _ in logs.select(GANG, Target())] == [0, 1, 2]
    assert logs.select(GANG, Target(node=2)) == [(2, "j-train-node-2-0")]


def test_a_rank_picks_its_node() -> None:
    assert logs.select(GANG, Target(rank=37, nprocs=32)) == [(1, "j-train-node-1-0")]


@pytest.mark.parametrize(
    ("line", "node", "target", "out"),
    [
        ("[default3]:step 10 loss 2.0", 1, Target(nprocs=32), "node 1 rank 35 | step 10 loss 2.0"),
        ("[default0]:x", 0, Target(rank=0, nprocs=2), "node 0 rank 0 | x"),
        ("[default1]:x", 0, Target(rank=0, nprocs=2), None),
        ("INFO torchrun started", 2, Target(), "node 2 | INFO torchrun started"),
        ("INFO torchrun started", 2, Target(rank=4), None),
    ],
)
def test_each_line_names_its_node_and_global_rank(
    line: str, node: int, target: Target, out: str | None
) -> None:
    assert logs.label(line, node, target) == out


def test_a_failed_job_says_where_its_last_failure_tail_is() -> None:
    status = {
        "phase": "Failed",
        "lastFailure": {
            "reason": "OOMKilled",
            "message": "pod j-train-node-0-0 container node: OOMKilled (exit 137)\nlast log...",
        },
    }
    note = logs.ended_note("j", status, "team-a")
    assert note is not None
    assert note.startswith("job j is Failed; last failure OOMKilled: pod j-train-node-0-0")
    assert f"kubectl get tj j -n team-a -o jsonpath='{logs.TAIL_PATH}'" in note
    assert logs.ended_note("j", {"phase": "Training"}, "team-a") is None
    assert "is Succeeded" in (logs.ended_note("j", {"phase": "Succeeded"}, "team-a") or "")


@pytest.mark.parametrize(
    ("target", "nodes", "says"),
    [
        (
            Target(rank=99, nprocs=32),
            1,
            "--rank 99: job j has 32 ranks (0-31: 1 node x 32 processes)",
        ),
        (Target(rank=-1, nprocs=1), 1, "--rank -1: job j has 1 rank (0: 1 node x 1 process)"),
        (Target(node=2), 2, "--node 2: job j has 2 nodes (0-1)"),
        (Target(rank=63, nprocs=32), 2, None),
        (Target(rank=99, nprocs=32), None, None),  # the spec did not parse: nothing to check
    ],
)
def test_a_rank_or_node_outside_the_job_names_its_size(
    target: Target, nodes: int | None, says: str | None
) -> None:
    assert logs.out_of_range("j", target, nodes) == says
