"""End-to-end trainer runs on CPU: learning, DDP equivalence, text tasks, graph-extraction mode."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from trainer_utils import FAST, final_weights, run_trainer, stdout_records, summary

from trainium_trainer.__main__ import main
from trainium_trainer.synth import write_bert_shards


def test_tiny_model_with_the_defaults_learns_in_40_steps(bert_data: Path, tmp_path: Path) -> None:
    # Only what the task needs: optimizer, lr, schedule and precision are the defaults.
    args = ["bert-pretrain", "--data-dir", str(bert_data), "--output-dir", str(tmp_path)]
    assert main([*args, "--max-steps", "40"]) == 0
    result = summary(tmp_path)
    assert result["precision"] == "bf16"
    assert result["final_loss"] < result["initial_loss"] - 1.0, result


def test_stdout_is_json_lines_only(bert_data: Path, tmp_path: Path) -> None:
    args = ["bert-pretrain", "--data-dir", str(bert_data), "--output-dir", str(tmp_path)]
    proc = run_trainer([*args, "--max-steps", "4", "--checkpoint-every", "2", "--log-every", "2"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = stdout_records(proc.stdout)  # raises on any line that is not JSON
    assert [r["step"] for r in records if "loss" in r] == [1, 2, 4]
    assert [r["step"] for r in records if r.get("event") == "checkpoint"] == [2, 4]
    again = run_trainer([*args, "--max-steps", "6"])
    assert stdout_records(again.stdout)[0]["event"] == "resumed"


def test_bert_loss_falls_on_synthetic_task(bert_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["bert-pretrain", "--data-dir", str(bert_data), "--output-dir", str(out)]
    assert main([*args, "--max-steps", "60", "--batch-size", "16", "--log-every", "10", *FAST]) == 0
    result = summary(out)
    assert result["steps"] == 60
    assert result["resumed_from_step"] == 0
    assert result["final_loss"] < result["initial_loss"] - 1.5, result
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 10, 20, 30, 40, 50, 60]
    assert set(records[0]) >= {"step", "loss", "lr", "samples_per_second", "tokens_per_second"}
    assert any((out / "tensorboard").iterdir())


def test_two_process_ddp_matches_one_process(tmp_path: Path, no_dropout_config: Path) -> None:
    # Shards of exactly one batch: every optimizer step sees all 8 samples in both layouts
    # (1 process: 2 accumulated micro-batches; 2 ranks: one shard each), so the averaged
    # gradients, and thus the weights, must agree.
    data = tmp_path / "data"
    write_bert_shards(data, shards=2, samples_per_shard=4, seq_len=64, seed=3)
    common = ["bert-pretrain", "--data-dir", str(data), "--batch-size", "4", "--max-steps", "6"]
    common += ["--model-config", str(no_dropout_config), *FAST]
    single, ddp = tmp_path / "single", tmp_path / "ddp"
    assert main([*common, "--output-dir", str(single), "--grad-accum-steps", "2"]) == 0
    proc = run_trainer([*common, "--output-dir", str(ddp)], nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert summary(ddp)["world_size"] == 2
    one, two = final_weights(single), final_weights(ddp)
    start = torch.load(single / "checkpoints" / "ckpt-00000006.pt", weights_only=False)
    assert start["step"] == 6
    for name, value in one.items():
        torch.testing.assert_close(two[name], value, atol=2e-5, rtol=1e-4, msg=name)
    # The logged loss is the mean over ranks (rank 0 alone saw only its own shard): the same
    # number the single process logs for both micro-batches.
    for key in ("initial_loss", "final_loss"):
        assert summary(ddp)[key] == pytest.approx(summary(single)[key], rel=1e-5), key


def _write_classification(data: Path) -> None:
    data.mkdir()
    rows = [(f"good great fine film {i}", "pos") for i in range(24)]
    rows += [(f"bad awful poor film {i}", "neg") for i in range(24)]
    csv_rows = ["text,label", *(f"{t},{lbl}" for t, lbl in rows[::2])]
    (data / "train.csv").write_text("\n".join(csv_rows) + "\n", encoding="utf-8")
    jsonl = [json.dumps({"text": t, "label": lbl}) for t, lbl in rows[1::2]]
    (data / "more.jsonl").write_text("\n".join(jsonl) + "\n", encoding="utf-8")


def test_text_classification_smoke(tmp_path: Path) -> None:
    data, out = tmp_path / "data", tmp_path / "out"
    _write_classification(data)
    args = ["text-classification", "--data-dir", str(data), "--output-dir", str(out)]
    assert main([*args, "--seq-len", "16", "--max-steps", "12", "--optimizer", "adamw"]) == 0
    result = summary(out)
    assert result["steps"] == 12 and math.isfinite(result["final_loss"])


def test_causal_lm_smoke(tmp_path: Path) -> None:
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    (data / "a.txt").write_text("the quick brown fox jumps over the lazy dog. " * 40)
    (data / "b.txt").write_text("pack my box with five dozen liquor jugs. " * 40)
    args = ["causal-lm", "--data-dir", str(data), "--output-dir", str(out), "--seq-len", "32"]
    assert main([*args, "--max-steps", "20", "--lr", "0.003", "--optimizer", "adamw"]) == 0
    result = summary(out)
    assert result["steps"] == 20
    assert result["final_loss"] < result["initial_loss"]


def test_extract_graphs_only_writes_no_checkpoint(
    bert_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NEURON_EXTRACT_GRAPHS_ONLY", "1")
    out = tmp_path / "out"
    args = ["bert-pretrain", "--data-dir", str(bert_data), "--output-dir", str(out)]
    assert main([*args, "--max-steps", "4", "--checkpoint-every", "2", "--precision", "fp32"]) == 0
    assert not (out / "checkpoints").exists()
    assert not (out / "summary.json").exists()
    assert not (out / "metrics.jsonl").exists()


def test_output_dir_defaults_to_env(
    bert_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINIUM_OUTPUT_DIR", str(tmp_path / "from-env"))
    assert main(["bert-pretrain", "--data-dir", str(bert_data), "--max-steps", "2"]) == 0
    assert summary(tmp_path / "from-env")["steps"] == 2
