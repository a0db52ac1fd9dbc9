"""Rank 0 names the last complete checkpoint in the termination message, and nothing else."""

from __future__ import annotations

import dataclasses
import datetime
import json
from pathlib import Path
from typing import Any

import pytest
from trainer_utils import FAST

from trainium_trainer import __main__ as entry
from trainium_trainer import checkpoint, contract, termination
from trainium_trainer.config import RunConfig, parse_args
from trainium_trainer.device import make_runtime
from trainium_trainer.loop import train


def reported(path: Path) -> dict[str, Any] | None:
    """The report line's body, or None when the file is absent or empty."""
    if not path.exists() or not path.read_text():
        return None
    (only,) = path.read_text().splitlines()
    body: dict[str, Any] = json.loads(only)[contract.CHECKPOINT_REPORT_KEY]
    return body


def config(data: Path, out: Path, report: Path | None, *extra: str) -> RunConfig:
    args = ["bert-pretrain", "--data-dir", str(data), "--output-dir", str(out), *FAST, *extra]
    return dataclasses.replace(parse_args(args), checkpoint_report=report)


@pytest.mark.parametrize("mode", ["--no-checkpoint-async", "--checkpoint-async"])
def test_the_report_names_the_last_complete_checkpoint_at_every_step(
    mode: str, bert_data: Path, tmp_path: Path
) -> None:
    target = tmp_path / "termination-log"
    cfg = config(
        bert_data, tmp_path / "out", target, "--max-steps", "10", "--checkpoint-every", "4", mode
    )
    seen: dict[int, int | None] = {}
    complete: dict[int, list[int]] = {}

    def look(step: int) -> None:
        body = reported(target)
        seen[step] = body["step"] if body else None
        complete[step] = [s for s, _ in checkpoint.complete_checkpoints(cfg.checkpoint_dir)]

    train(cfg, make_runtime("cpu"), on_step=look)
    # Steps that were not checkpointed leave the last complete checkpoint's report alone.
    want = {1: None, 2: None, 3: None, 4: 4, 5: 4, 6: 4, 7: 4, 8: 8, 9: 8, 10: 10}
    if mode == "--checkpoint-async":  # a write lands steps later, but is reported only then
        assert all(seen[s] in (None, *complete[s]) and (seen[s] or 0) <= (want[s] or 0)
                   for s in seen), (seen, complete)  # fmt: skip
        assert list(seen.values()) == sorted(seen.values(), key=lambda v: v or 0), seen
    else:
        assert seen == want
    body = reported(target)
    assert body is not None
    complete = dict(checkpoint.complete_checkpoints(cfg.checkpoint_dir))
    assert Path(body["path"]) == complete[10] == checkpoint.checkpoint_path(cfg.checkpoint_dir, 10)
    when = datetime.datetime.fromisoformat(body["time"].replace("Z", "+00:00"))
    assert abs(datetime.datetime.now(datetime.timezone.utc) - when).total_seconds() < 600


def test_graph_extraction_reports_nothing(
    bert_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(contract.ENV_EXTRACT_GRAPHS_ONLY, "1")
    target = tmp_path / "termination-log"
    train(config(bert_data, tmp_path / "out", target, "--max-steps", "2"), make_runtime("cpu"))
    assert not target.exists()


def test_a_report_that_cannot_be_written_does_not_stop_training(
    bert_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "no-such-dir" / "termination-log"
    out = tmp_path / "out"
    result = train(config(bert_data, out, target, "--max-steps", "2"), make_runtime("cpu"))
    assert result["steps"] == 2 and not target.exists()
    assert "warning: checkpoint report" in capsys.readouterr().err


def test_the_env_names_the_report_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(contract.ENV_CHECKPOINT_REPORT, raising=False)
    assert parse_args(["bert-pretrain"]).checkpoint_report is None
    monkeypatch.setenv(contract.ENV_CHECKPOINT_REPORT, str(tmp_path / "log"))
    assert parse_args(["bert-pretrain"]).checkpoint_report == tmp_path / "log"


def test_the_outcome_line_goes_first_and_the_report_stays_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "termination-log"
    log.write_text("")  # the kubelet creates it empty
    monkeypatch.setattr(contract, "TERMINATION_LOG", str(log))
    termination.report_checkpoint(log, 7, Path("/out/checkpoints/ckpt-00000007.pt"))
    assert entry._fail("stopped: SIGTERM: stopped after step 7, checkpointed", 143) == 143
    first, last = log.read_text().splitlines()
    assert first.startswith("stopped: SIGTERM") and reported_line(last)["step"] == 7


def test_a_huge_outcome_is_cut_so_the_report_survives_the_kubelets_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "termination-log"
    log.write_text("")
    monkeypatch.setattr(contract, "TERMINATION_LOG", str(log))
    termination.report_checkpoint(log, 3, Path("/" + "d" * 5000 + "/ckpt-00000003.pt"))
    entry._fail("error: " + "x" * 10_000, contract.EXIT_USAGE)
    text = log.read_text()
    assert len(text.encode()) < contract.TERMINATION_MESSAGE_LIMIT
    first, last = text.splitlines()
    assert first.startswith("error: xxx") and reported_line(last) == {"step": 3, "time": ANY_TIME}


def test_outside_a_pod_the_outcome_creates_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(contract, "TERMINATION_LOG", str(tmp_path / "absent"))
    assert entry._fail("error: bad flag", contract.EXIT_USAGE) == contract.EXIT_USAGE
    assert not (tmp_path / "absent").exists()


def test_a_shorter_text_leaves_no_stale_bytes(tmp_path: Path) -> None:
    target = tmp_path / "termination-log"
    target.write_text("y" * 5000)
    termination.report_checkpoint(target, 1, Path("/c.pt"))
    assert reported(target) == {"step": 1, "time": ANY_TIME, "path": "/c.pt"}


class _AnyTime:
    """Equal to any RFC 3339 UTC timestamp with second precision."""

    def __eq__(self, other: object) -> bool:
        try:
            datetime.datetime.strptime(str(other), "%Y-%m-%dT%H:%M:%SZ")
        except ValueError:
            return False
        return True


ANY_TIME: Any = _AnyTime()


def reported_line(text: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(text)[contract.CHECKPOINT_REPORT_KEY]
    return body
