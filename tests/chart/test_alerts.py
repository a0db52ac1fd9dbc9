"""`promtool test rules` over the chart's rendered PrometheusRule: every alert has a test, and
the tests pass (promtool from Debian's prometheus package, fetched by scripts/fetch-promtool.sh)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from helmchart import REPO, one, render

PROMTOOL = Path(os.environ.get("PROMTOOL", REPO / ".tools" / "bin" / "promtool"))
TESTS = Path(__file__).parent / "alerts" / "alerts_test.yaml"


@pytest.fixture(scope="module")
def promtool() -> Path:
    """promtool, fetched once (idempotent); a skip says why only when it cannot be had."""
    if not PROMTOOL.exists():
        subprocess.run(
            ["bash", str(REPO / "scripts" / "fetch-promtool.sh"), str(PROMTOOL.parent)],
            cwd=REPO, capture_output=True, timeout=300, check=False,
        )  # fmt: skip
    if not PROMTOOL.exists():
        pytest.skip(f"promtool missing at {PROMTOOL}: `make promtool` failed (apt reachable?)")
    return PROMTOOL


@pytest.fixture(scope="module")
def workdir(helm_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """rules.yaml (the chart's rendered rule groups) beside a copy of alerts_test.yaml."""
    rule = one(render("metrics.prometheusRule.enabled=true"), "PrometheusRule")
    out = tmp_path_factory.mktemp("alerts")
    (out / "rules.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    shutil.copy(TESTS, out / TESTS.name)
    return out


def promtool_run(promtool: Path, workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(promtool), *args], cwd=workdir, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip


def test_rules_pass_promtool_check(promtool: Path, workdir: Path) -> None:
    proc = promtool_run(promtool, workdir, "check", "rules", "rules.yaml")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_alert_has_a_promtool_test(workdir: Path) -> None:
    rules = yaml.safe_load((workdir / "rules.yaml").read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    tests = yaml.safe_load(TESTS.read_text())["tests"]
    tested = {t["alertname"] for case in tests for t in case.get("alert_rule_test", [])}
    fired = {t["alertname"] for case in tests for t in case.get("alert_rule_test", [])
             if t["exp_alerts"]}  # fmt: skip
    assert alerts == tested == fired, "each alert needs a test case in which it fires"


def test_promtool_rule_tests_pass(promtool: Path, workdir: Path) -> None:
    proc = promtool_run(promtool, workdir, "test", "rules", TESTS.name)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout
