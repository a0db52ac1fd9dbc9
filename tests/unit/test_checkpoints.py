"""status.lastCheckpoint: the trainer's report, read from termination messages, never goes back."""

from __future__ import annotations

import ast
import inspect
import json
from pathlib import Path
from typing import Any

import pytest
from support import spec_of

from trainium_operator.cluster.reconcile import Outcome
from trainium_operator.domain import checkpoints, failures
from trainium_operator.domain.checkpoints import Checkpoint
from trainium_operator.manifests import appdef, builders, ownership
from trainium_operator.manifests.ownership import Owner
from trainium_operator.runtime import pods
from trainium_operator.runtime.passes import Passes
from trainium_trainer import contract, termination

Json = dict[str, Any]
T0, T1 = "2026-11-22T10:00:00Z", "2026-11-22T11:00:00Z"


def line(step: Any, time: Any = T0, **extra: Any) -> str:
    return json.dumps({contract.CHECKPOINT_REPORT_KEY: {"step": step, "time": time, **extra}})


def pod(*messages: str | None, key: str = "state") -> Json:
    """A pod whose containers ended with these termination messages."""
    statuses = [
        {"name": f"c{i}", key: {"terminated": {"exitCode": 1, "message": m}}}
        for i, m in enumerate(messages)
    ]
    return {"metadata": {"name": "p"}, "status": {"containerStatuses": statuses}}


def test_what_the_trainer_writes_is_what_the_operator_reads() -> None:
    text = termination.report_line(120, Path("/fsx/out/checkpoints/ckpt-00000120.pt"), T0)
    assert checkpoints.from_message(f"stopped: SIGTERM after step 120\n{text}\n") == Checkpoint(
        120, T0, "/fsx/out/checkpoints/ckpt-00000120.pt"
    )


@pytest.mark.parametrize(
    "message",
    [
        None,
        "",
        "my own exit note",
        line("12"),
        line(True),
        line(-1),
        line(1.5),
        line(3, "yesterday"),
        line(3, "2026-11-22T10:00:00"),  # no zone: not a Kubernetes timestamp
        line(3, 1700000000),
        line(3, path=7),
        '{"trainiumCheckpoint": {"step": 400',  # torn
        '{"trainiumCheckpoint": [1, 2]}',
        '{"trainiumCheckpoint": 5}',
        json.dumps({"step": 3, "time": T0}),  # not ours
    ],
)
def test_anything_but_a_well_formed_report_is_ignored(message: Any) -> None:
    assert checkpoints.from_message(message) is None


def test_the_newest_report_of_a_message_wins_even_after_stale_bytes() -> None:
    text = f'{line(8, T0)}\n{line(4, T1)}\n12, "time": garbage}}}}\n'
    assert checkpoints.from_message(text) == Checkpoint(8, T0)


def test_newest_is_the_highest_step_then_the_latest_time() -> None:
    a, b, c = Checkpoint(5, T1), Checkpoint(6, T0), Checkpoint(6, T1)
    assert checkpoints.newest([a, None, c, b]) == c
    assert checkpoints.newest([None]) is None


def test_a_pod_reports_through_any_container_now_or_before_a_restart() -> None:
    assert checkpoints.from_pod(pod("oops", line(7))) == Checkpoint(7, T0)
    assert checkpoints.from_pod(pod(line(9), key="lastState")) == Checkpoint(9, T0)
    assert checkpoints.from_pod({"status": {}}) is None
    assert checkpoints.from_pod({}) is None


def test_status_never_goes_back() -> None:
    before = {"lastCheckpoint": {"step": 120, "time": T0, "path": "/a"}}
    assert checkpoints.carried(before, Checkpoint(80, T1)) == Checkpoint(120, T0, "/a")
    assert checkpoints.carried(before, None) == Checkpoint(120, T0, "/a")
    assert checkpoints.carried(before, Checkpoint(121, T0)) == Checkpoint(121, T0)
    # The same step reported again leaves the status exactly as it is (no needless write).
    assert checkpoints.carried(before, Checkpoint(120, T0)).to_status() == before["lastCheckpoint"]
    assert checkpoints.carried({}, None) is None


def test_a_malformed_status_is_replaced_by_what_the_pods_say() -> None:
    broken = {"lastCheckpoint": {"step": "x"}}
    assert checkpoints.carried(broken, Checkpoint(3, T0)) == Checkpoint(3, T0)
    assert checkpoints.carried(broken) is None


def test_status_form_has_no_empty_path_and_a_long_path_is_cut() -> None:
    assert Checkpoint(3, T0).to_status() == {"step": 3, "time": T0}
    long = checkpoints.from_message(line(3, path="/" + "d" * 5000))
    assert long is not None and len(long.path) == checkpoints.MAX_PATH


def test_a_report_is_progress_not_failure_evidence() -> None:
    """Without a log, the failure's tail is the message minus the report line."""
    message = f"error: non-finite loss nan (mean over ranks) at step 7; rerun\n{line(5)}\n"
    found = failures.classify_pod(pod(message))
    assert found is not None and found.reason == "LossDiverged"
    assert found.log_tail == ("error: non-finite loss nan (mean over ranks) at step 7; rerun",)
    crashed = failures.classify_pod(pod(line(5)))
    assert crashed is not None and crashed.log_tail == ()


def test_only_the_training_stage_gets_the_report_env_on_a_cluster() -> None:
    spec, owner = spec_of(), Owner("job", "ns", "uid")
    for stage, wanted in ((appdef.TRAIN, contract.TERMINATION_LOG), (appdef.PRECOMPILE, None)):
        env = appdef.stage_env(spec, builders.stage_context(spec, owner, stage))
        assert env.get(contract.ENV_CHECKPOINT_REPORT) == wanted
    local = appdef.stage_env(spec, appdef.StageContext("job", appdef.TRAIN, "c", "r", "h", "/m"))
    assert contract.ENV_CHECKPOINT_REPORT not in local  # nowhere named: the trainer writes nothing


def test_the_pod_watch_remembers_only_a_newer_training_report() -> None:
    passes = Passes(lambda *_: Outcome(None), lambda *_: None, workers=0)
    key, train = "uid-1", {ownership.LABEL_STAGE: "train"}
    status = pod(line(5))["status"]
    remember = pods.remember_checkpoint
    assert remember(passes, key, {ownership.LABEL_STAGE: "precompile"}, status) is False
    assert remember(passes, key, train, status) is True
    assert remember(passes, key, train, status) is False  # the same: no new pass
    assert remember(passes, key, train, pod(line(4, T1))["status"]) is False
    record = passes.records.get(key)
    assert record is not None and record.checkpoint == Checkpoint(5, T0)
    passes.gone(key)
    assert passes.records.get(key) is None


def test_module_is_pure() -> None:
    tree = ast.parse(inspect.getsource(checkpoints))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert imported == {
        "__future__", "datetime", "json", "re", "collections.abc", "dataclasses", "typing",
        "trainium_trainer",
    }  # fmt: skip


@pytest.mark.parametrize(
    "time", ["2026-11-22 10:00:00Z", "2026-11-22T10:00+00:00", "2026-11-22T10:00:00", "20261122"]
)
def test_a_report_time_the_api_server_would_refuse_is_no_checkpoint(time: str) -> None:
    """A status patch with it is refused (422) on every pass: the job would never move again."""
    assert checkpoints.from_fields({"step": 5, "time": time}) is None


def test_rfc3339_times_are_checkpoints() -> None:
    for time in ("2026-11-22T10:00:00Z", "2026-11-22T10:00:00.123456+01:00"):
        assert checkpoints.from_fields({"step": 5, "time": time}) is not None


def test_a_local_xla_job_lets_the_trainer_pick_its_runtime_and_a_cluster_one_is_xla() -> None:
    """On this machine's CPU (make run) torch_xla is absent: auto, not xla (which would fail)."""
    spec, owner = spec_of(), Owner("job", "ns", "uid")
    assert spec.effective_backend == contract.BACKEND_XLA
    cluster = appdef.stage_env(spec, builders.stage_context(spec, owner, appdef.TRAIN))
    local = appdef.stage_env(
        spec, appdef.StageContext("job", appdef.TRAIN, "c", "r", "h", "/m", on_cpu=True)
    )
    assert (cluster[contract.ENV_BACKEND], local[contract.ENV_BACKEND]) == ("xla", "auto")
