"""spec.precision and spec.backend reach the trainer through the environment; a flag wins."""

from __future__ import annotations

import pytest

from trainium_trainer import contract
from trainium_trainer.config import UsageError, parse_args

ARGS = ["bert-pretrain", "--data-dir", "/nowhere"]


def test_env_sets_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(contract.ENV_PRECISION, "fp32")
    assert parse_args(ARGS).precision == "fp32"
    assert parse_args([*ARGS, "--precision", "bf16"]).precision == "bf16"


def test_bf16_without_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(contract.ENV_PRECISION, raising=False)
    assert parse_args(ARGS).precision == "bf16"


def test_bad_env_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(contract.ENV_PRECISION, "fp16")
    with pytest.raises(UsageError, match="TRAINIUM_PRECISION"):
        parse_args(ARGS)


def test_spec_backend_reaches_the_trainer_and_a_flag_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator sets TRAINIUM_BACKEND from spec.backend: a native job trains natively."""
    monkeypatch.setenv(contract.ENV_BACKEND, contract.BACKEND_NATIVE)
    assert parse_args(ARGS).backend == "native"
    assert parse_args([*ARGS, "--backend", "cpu"]).backend == "cpu"
    monkeypatch.delenv(contract.ENV_BACKEND)
    assert parse_args(ARGS).backend == "auto"
    monkeypatch.setenv(contract.ENV_BACKEND, "tpu")
    with pytest.raises(UsageError, match="TRAINIUM_BACKEND"):
        parse_args(ARGS)
