"""Mistakes a user can make give one `error:` line on stderr and exit code 2, no traceback."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
from trainer_utils import run_trainer

from trainium_trainer import device
from trainium_trainer.__main__ import main


class TwoRanks(device.Runtime):
    """Rank 0 of a pretend 2-process world (no process group needed to hit the batch check)."""

    def __init__(self) -> None:
        super().__init__()
        self.world_size = 2


def _one_error_line(capsys: pytest.CaptureFixture[str], code: int, needle: str) -> None:
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert needle in err[0], err
    assert "Traceback" not in err[0]


def _bad_keys(tmp: Path) -> Path:
    data = tmp / "badkeys"
    data.mkdir()
    with h5py.File(data / "x_training_0.hdf5", "w") as f:
        f.create_dataset("input_ids", data=np.zeros((4, 64), dtype="i4"))
        f.create_dataset("tokens", data=np.zeros((4, 64), dtype="i4"))
    return data


def _bad_config(tmp: Path) -> Path:
    path = tmp / "bad.json"
    path.write_text(json.dumps({"size": "tiny", "hidden_size": 65}), encoding="utf-8")
    return path


CASES = {
    "missing-data-dir": (lambda tmp, data: ["--data-dir", str(tmp / "nope")], "does not exist"),
    "wrong-hdf5-keys": (
        lambda tmp, data: ["--data-dir", str(_bad_keys(tmp))],
        "missing HDF5 keys segment_ids",
    ),
    "bad-model-config-file": (
        lambda tmp, data: ["--data-dir", str(data), "--model-config", str(_bad_config(tmp))],
        "not a multiple",
    ),
    "unknown-model-size": (
        lambda tmp, data: ["--data-dir", str(data), "--model-config", "huge"],
        "neither",
    ),
    "seq-len-mismatch": (lambda tmp, data: ["--data-dir", str(data), "--seq-len", "128"], "128"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_exits_2_with_one_line(
    case: str, bert_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_args, needle = CASES[case]
    args = ["bert-pretrain", "--output-dir", str(tmp_path / "o"), *make_args(tmp_path, bert_data)]
    code = main(args)
    _one_error_line(capsys, code, needle)


def test_a_world_size_that_cannot_keep_the_global_batch(
    bert_data: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(device, "make_runtime", lambda prefer="auto": TwoRanks())
    args = ["bert-pretrain", "--data-dir", str(bert_data), "--output-dir", str(tmp_path)]
    code = main([*args, "--global-batch-size", "12", "--batch-size", "4"])
    _one_error_line(capsys, code, "--global-batch-size 12 is not a multiple of --batch-size 4")


def test_unknown_task(capsys: pytest.CaptureFixture[str]) -> None:
    _one_error_line(capsys, main(["gpt-finetune"]), "unknown task 'gpt-finetune'")


def test_bad_flag_value(capsys: pytest.CaptureFixture[str]) -> None:
    _one_error_line(capsys, main(["causal-lm", "--batch-size", "0"]), "--batch-size")


def test_missing_local_tokenizer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.txt").write_text("hello world " * 50)
    args = ["causal-lm", "--data-dir", str(tmp_path), "--tokenizer", str(tmp_path / "no-tok")]
    _one_error_line(capsys, main(args), "not found locally")


def test_cli_process_prints_no_traceback(tmp_path: Path) -> None:
    proc = run_trainer(["bert-pretrain", "--data-dir", str(tmp_path / "missing")])
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: data dir {tmp_path / 'missing'} does not exist or is not a directory"
    ]


def test_pretrained_dir_without_tokenizer_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A saved model alone: transformers raised a TypeError traceback (exit 1, issue 21)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    model = tmp_path / "model"
    GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64)).save_pretrained(
        str(model)
    )
    (tmp_path / "a.txt").write_text("hello world " * 50)
    args = ["causal-lm", "--data-dir", str(tmp_path), "--pretrained", str(model)]
    args += ["--output-dir", str(tmp_path / "o")]
    _one_error_line(capsys, main(args), "--tokenizer")
