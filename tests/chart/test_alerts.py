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


def operator_metrics_page() -> str:
    """The operator's /metrics with every family holding samples (as after some jobs)."""
    import datetime
    from decimal import Decimal

    from prometheus_client import REGISTRY, generate_latest

    from trainium_operator.cluster.reconcile import Transition
    from trainium_operator.domain import cost
    from trainium_operator.runtime import metrics

    when = datetime.datetime(2026, 1, 1, 1, tzinfo=datetime.timezone.utc)
    phases = [("Precompiling", "2026-01-01T00:00:00Z", "2026-01-01T00:30:00Z"),
              ("Training", "2026-01-01T00:30:00Z", None)]  # fmt: skip
    prices = {"trn1.2xlarge": Decimal("1.34")}
    metrics.count_cost(cost.compute("trn1.2xlarge", 1, phases, now=when, prices=prices))
    for old, new in ((None, "Precompiling"), ("Precompiling", "Training")):
        metrics.count_transition(Transition("ns", "promtool", old, new, new, "m", "miss"), 0, 60)
    metrics.count_compile((("compileSeconds", 60.0),))
    with metrics.reconcile_timer():
        pass
    status = {"phase": "Training", "startTime": "2026-01-01T00:00:00Z"}
    metrics.watch_jobs({("ns", "promtool"): [status]})
    try:
        return generate_latest(REGISTRY).decode()
    finally:
        metrics.JOB_STATES.source = None


def test_operator_metrics_pass_promtool_check_metrics(promtool: Path) -> None:
    """Base units (seconds, not hours) and no `_created` series beside the counters."""
    page = operator_metrics_page()
    assert "trainium_operator_instance_seconds_total{" in page
    proc = subprocess.run(
        [str(promtool), "check", "metrics"], input=page, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "_created" not in page


def test_every_alert_links_its_runbook_in_the_readme(workdir: Path) -> None:
    rules = yaml.safe_load((workdir / "rules.yaml").read_text())
    alerts = [r for g in rules["groups"] for r in g["rules"] if "alert" in r]
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    headings = {line[4:].strip() for line in readme.splitlines() if line.startswith("### ")}
    base = "https://github.com/trainium-dev/trainium-operator/blob/main/README.md"
    for rule in alerts:
        name = rule["alert"]
        assert rule["annotations"]["runbook_url"] == f"{base}#{name.lower()}", name
        assert name in headings, f"README.md needs a '### {name}' runbook section"


def test_runbook_base_is_a_value(helm_bin: Path) -> None:
    rule = one(render("metrics.prometheusRule.enabled=true",
                      "metrics.prometheusRule.runbookUrl=https://wiki.example/ops"),
               "PrometheusRule")  # fmt: skip
    urls = {r["annotations"]["runbook_url"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert urls == {"https://wiki.example/ops#trainiumjobfailed",
                    "https://wiki.example/ops#trainiumjobprecompileslow",
                    "https://wiki.example/ops#trainiumoperatorreconcileerrors"}  # fmt: skip
