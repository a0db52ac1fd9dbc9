"""The chart's `prices` reach the operator as the env var domain.cost reads, or fail."""

from __future__ import annotations

import json
import tempfile
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from helmchart import helm, one, template_args
from trainium_operator.domain import cost


def operator_env(*sets: str, values_file: str | None = None) -> dict[str, Any]:
    """The operator container's env as {name: value}."""
    args = template_args(*sets) + (["-f", values_file] if values_file else [])
    docs = [d for d in yaml.safe_load_all(helm(*args).stdout) if d]
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    return {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}


def test_no_prices_means_no_env_and_the_built_in_table(helm_bin: Path) -> None:
    assert cost.PRICES_ENV not in operator_env()


def test_set_prices_reach_the_env_the_operator_parses(helm_bin: Path) -> None:
    env = operator_env("prices.trn2\\.48xlarge=44.7", "prices.trn1\\.32xlarge=20")
    prices, error = cost.effective_prices(env[cost.PRICES_ENV])
    assert error is None
    assert prices["trn2.48xlarge"] == Decimal("44.7")
    assert prices["trn1.32xlarge"] == Decimal("20")
    assert prices["trn1.2xlarge"] == cost.DEFAULT_PRICES["trn1.2xlarge"]


def test_prices_from_a_values_file_are_numbers(helm_bin: Path) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        f.write("prices:\n  trn2.48xlarge: 44.70\n  trn1n.32xlarge: 0\n")
        f.flush()
        env = operator_env(values_file=f.name)
    assert json.loads(env[cost.PRICES_ENV]) == {"trn2.48xlarge": 44.7, "trn1n.32xlarge": 0}
    prices, error = cost.effective_prices(env[cost.PRICES_ENV])
    assert error is None
    assert (prices["trn2.48xlarge"], prices["trn1n.32xlarge"]) == (Decimal("44.7"), 0)


REJECTED = [
    ("prices.trn3\\.1xlarge=1", "invalid propertyName 'trn3.1xlarge'"),
    ("prices.trn2\\.48xlarge=-1", "at '/prices/trn2.48xlarge': minimum: got -1, want 0"),
    ("prices.trn2\\.48xlarge=cheap", "at '/prices/trn2.48xlarge': 'cheap' does not match"),
    ("prices.trn2\\.48xlarge=-0.5", "at '/prices/trn2.48xlarge': '-0.5' does not match"),
    ("prices=5", "at '/prices': got number, want object"),
]


@pytest.mark.parametrize(("value", "message"), REJECTED, ids=[v for v, _ in REJECTED])
def test_schema_rejects_bad_prices(helm_bin: Path, value: str, message: str) -> None:
    proc = helm(*template_args(value), check=False)
    assert proc.returncode != 0, f"--set {value} was accepted"
    assert "don't meet the specifications of the schema" in proc.stderr
    assert message in proc.stderr, proc.stderr
