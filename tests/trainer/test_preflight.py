"""The preflight passes a fit node and fails an unfit one with its own exit code and one line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainium_trainer import __main__ as entry
from trainium_trainer import contract, preflight


def node(root: Path, neuron: int = 2, sys_ib: int = 1, uverbs: int = 0) -> Path:
    """A fake node root: Neuron devices, RDMA devices (sys and dev), /dev/shm."""
    (root / "dev" / "shm").mkdir(parents=True)
    for i in range(neuron):
        (root / "dev" / f"neuron{i}").write_text("")
    (root / "dev" / "neuron_extra").write_text("")  # not a device node name: ignored
    for i in range(sys_ib):
        (root / "sys" / "class" / "infiniband" / f"rdmap{i}s0").mkdir(parents=True)
    for i in range(uverbs):
        (root / "dev" / "infiniband").mkdir(parents=True, exist_ok=True)
        (root / "dev" / "infiniband" / f"uverbs{i}").write_text("")
    return root


def run(root: Path, *flags: str) -> int:
    return entry.main([contract.PREFLIGHT_COMMAND, "--root", str(root), "--shm-mb", "1", *flags])


def test_a_fit_node_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(node(tmp_path), "--neuron-devices", "2", "--efa", "1") == 0
    assert capsys.readouterr().out.startswith("preflight ok:")


def test_efa_counts_from_dev_infiniband_too(tmp_path: Path) -> None:
    assert run(node(tmp_path, sys_ib=0, uverbs=2), "--efa", "2") == 0


@pytest.mark.parametrize(
    ("layout", "flags", "says"),
    [
        ({"neuron": 1}, ["--neuron-devices", "2"], "1 Neuron devices in /dev (want 2)"),
        ({"sys_ib": 0}, ["--efa", "1"], "0 EFA devices"),
        ({}, ["--shm-mb", str(2**40)], "/dev/shm is"),
    ],
)
def test_an_unfit_node_fails_with_the_preflight_exit_code_and_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    layout: dict[str, int],
    flags: list[str],
    says: str,
) -> None:
    assert run(node(tmp_path, **layout), *flags) == contract.EXIT_PREFLIGHT
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(contract.PREFLIGHT_FAILED) and says in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root opens any file")
def test_a_device_that_cannot_be_opened_fails(tmp_path: Path) -> None:
    root = node(tmp_path)
    (root / "dev" / "neuron1").chmod(0)
    assert preflight.neuron_problems(root, 2) == [
        "/dev/neuron1 cannot be opened (Permission denied)"
    ]


def test_the_line_goes_to_the_termination_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "termination-log"
    log.write_text("")
    monkeypatch.setattr(contract, "TERMINATION_LOG", str(log))
    monkeypatch.setenv("NODE_NAME", "ip-10-0-0-7")
    assert run(node(tmp_path / "root", neuron=0), "--neuron-devices", "1") == 4
    (line,) = log.read_text().splitlines()
    assert (
        line == f"{contract.PREFLIGHT_FAILED} 0 Neuron devices in /dev (want 1) (node ip-10-0-0-7)"
    )


def test_nothing_asked_nothing_checked(tmp_path: Path) -> None:
    assert preflight.check(tmp_path, 0, 0, 0) == []
