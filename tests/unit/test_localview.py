"""`trainium run`'s display: a bar with elapsed time and ETA, a precompile line, TensorBoard."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import spec_of

from trainium_operator.local import view as localview


def test_tqdm_comes_with_the_trainers_dependencies() -> None:
    from importlib.metadata import requires

    needs = " ".join(requires("transformers") or []) + " ".join(requires("huggingface_hub") or [])
    assert "tqdm" in needs


def test_the_bar_shows_step_of_total_elapsed_eta_loss_and_rate(
    capsys: pytest.CaptureFixture[str],
) -> None:
    view = localview.TrainView(40)
    view.show({"step": 10, "loss": 7.25, "samples_per_second": 12.5})
    view.show({"step": 20, "loss": 6.5, "samples_per_second": 13.0})
    view.close()
    err = capsys.readouterr().err
    last = err.replace("\r", "\n").strip().splitlines()[-1]
    assert last.startswith("[train]") and "20/40" in last
    assert "<" in last  # tqdm's [elapsed<remaining]
    assert "loss 6.5000, 13.0 samples/s" in last


def test_a_resumed_run_starts_the_bar_where_it_resumed(capsys: pytest.CaptureFixture[str]) -> None:
    view = localview.TrainView(40)
    view.show({"step": 31, "loss": 1.0, "samples_per_second": 1.0})
    view.close()
    assert "31/40" in capsys.readouterr().err


def test_without_tqdm_one_line_per_record(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "tqdm", None)
    localview.TrainView(None).show({"step": 3, "loss": 2.0, "samples_per_second": 4.0})
    assert capsys.readouterr().out == "[train] step 3/? loss 2.0000 4.0 samples/s\n"


def test_the_precompile_line_and_the_tensorboard_note(tmp_path: Path) -> None:
    spec = spec_of(nodes=2, instanceType="trn1.2xlarge")
    line = localview.precompile_line(spec, tmp_path / "logs")
    assert (
        line == f"[precompile] extracting graphs: 10 steps on 4 processes; logs in {tmp_path}/logs"
    )
    assert localview.tensorboard_note(tmp_path) == ""
    (tmp_path / "tensorboard").mkdir()
    assert localview.tensorboard_note(tmp_path) == (
        f"; TensorBoard: tensorboard --logdir {tmp_path}/tensorboard"
    )
