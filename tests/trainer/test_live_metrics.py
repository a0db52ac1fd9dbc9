"""Each node's local rank 0 serves the run's gauges; they match what metrics.jsonl records."""

from __future__ import annotations

import dataclasses
import json
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from trainer_utils import FAST, free_port

from trainium_trainer import contract
from trainium_trainer.config import UsageError, parse_args
from trainium_trainer.device import make_runtime
from trainium_trainer.loop import train


def scrape(port: int) -> dict[str, float]:
    """{metric name: value} of the trainer's gauges, read over HTTP as the operator does."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    families = text_string_to_metric_families(text)
    return {s.name: s.value for f in families for s in f.samples if s.name.startswith("trainium")}


@pytest.mark.parametrize("mode", ["--no-checkpoint-async", "--checkpoint-async"])
def test_served_values_match_metrics_jsonl_at_every_log_step(
    mode: str, bert_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    args = ["bert-pretrain", "--data-dir", str(bert_data), "--output-dir", str(out), *FAST, mode]
    args += ["--max-steps", "9", "--log-every", "3", "--checkpoint-every", "6", "--seq-len", "64"]
    port = free_port()
    cfg = dataclasses.replace(parse_args(args), metrics_port=port)
    served: dict[int, dict[str, float]] = {}
    train(cfg, make_runtime("cpu"), on_step=lambda step: served.update({step: scrape(port)}))
    records = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 3, 6, 9]
    for record in records:
        got = served[record["step"]]
        assert got[contract.METRIC_STEP] == record["step"]
        assert got[contract.METRIC_TOTAL_STEPS] == 9
        assert got[contract.METRIC_LOSS] == pytest.approx(record["loss"])
        assert got[contract.METRIC_LR] == pytest.approx(record["lr"])
        sps = record["samples_per_second"]
        assert got[contract.METRIC_SAMPLES_PER_SECOND] == pytest.approx(sps)
        assert got[contract.METRIC_TOKENS_PER_SECOND] == pytest.approx(record["tokens_per_second"])
    shown = [served[s][contract.METRIC_CHECKPOINT_STEP] for s in (3, 6, 9)]
    if mode == "--checkpoint-async":  # rank 0 shows a checkpoint once it is durable
        assert shown[0] == 0 and shown[1] in (0, 6) and shown[2] in (0, 6, 9), shown
    else:
        assert shown == [0, 6, 9]
    # Between log steps the gauges hold the last logged step.
    assert served[5][contract.METRIC_STEP] == 3


def test_the_server_stops_with_the_run(bert_data: Path, tmp_path: Path) -> None:
    args = ["bert-pretrain", "--data-dir", str(bert_data), "--output-dir", str(tmp_path), *FAST]
    port = free_port()
    cfg = dataclasses.replace(parse_args([*args, "--max-steps", "1"]), metrics_port=port)
    train(cfg, make_runtime("cpu"))
    with pytest.raises(OSError):
        scrape(port)


@pytest.mark.parametrize(
    ("env", "port"),
    [
        ({contract.ENV_METRICS_PORT: "9400"}, 9400),
        ({contract.ENV_METRICS_PORT: "9400", contract.ENV_LOCAL_RANK: "0"}, 9400),
        ({contract.ENV_METRICS_PORT: "9400", contract.ENV_LOCAL_RANK: "3"}, None),
        ({}, None),
    ],
)
def test_only_each_nodes_local_rank_0_serves(
    env: dict[str, str], port: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(contract.ENV_METRICS_PORT, raising=False)
    monkeypatch.delenv(contract.ENV_LOCAL_RANK, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert parse_args(["bert-pretrain"]).metrics_port == port


def test_a_bad_port_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(contract.ENV_METRICS_PORT, "http")
    with pytest.raises(UsageError, match=contract.ENV_METRICS_PORT):
        parse_args(["bert-pretrain"])


def test_each_nodes_step_seconds_are_served_by_its_index(
    bert_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The straggler gauge: this node's (index from the pod's env) rank-local step seconds."""
    monkeypatch.setenv(contract.ENV_NODE_INDEX, "0")
    args = ["bert-pretrain", "--data-dir", str(bert_data), "--output-dir", str(tmp_path), *FAST]
    args += ["--max-steps", "4", "--log-every", "2", "--seq-len", "64"]
    port = free_port()
    cfg = dataclasses.replace(parse_args(args), metrics_port=port)
    served: dict[int, str] = {}

    def read(step: int) -> None:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            served[step] = resp.read().decode()

    train(cfg, make_runtime("cpu"), on_step=read)
    found = {
        s.labels[contract.NODE_STEP_LABEL]: s.value
        for f in text_string_to_metric_families(served[4])
        for s in f.samples
        if s.name == contract.METRIC_NODE_STEP_SECONDS
    }
    assert list(found) == ["0"] and 0 < found["0"] < 60, found


def test_a_nodes_figure_is_its_slowest_ranks() -> None:
    """Two nodes of two ranks each: every rank learns each node's slowest rank's seconds."""
    from trainium_trainer.loop import node_step_seconds

    class Gathered:
        def gather_host(self, values: list[float]) -> list[list[float]]:
            return [[0, 0.2], [0, 0.25], [1, 0.4], [1, 0.3]]

    class T:
        rt = Gathered()
        state = type("S", (), {"local_seconds": 1.0})()

    assert node_step_seconds(T(), 5) == {0: 0.25, 1: 0.4}  # type: ignore[arg-type]
