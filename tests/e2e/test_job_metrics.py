"""Per-job state on the operator's /metrics: read from the TrainiumJob at scrape time, gone with
the job. The real operator process, the emulator and kubectl; Volcano is not needed (the job
stays in Precompiling)."""

from __future__ import annotations

import datetime
import urllib.request

from prometheus_client.parser import text_string_to_metric_families
from test_operator_e2e import claim

from harness import OperatorProcess, apply, get, kubectl, wait_for

TJ = "trainiumjobs.v1alpha1.trainium.dev"
START = "trainium_operator_job_phase_start_time_seconds"


def series(operator: OperatorProcess, metric: str, ns: str) -> dict[tuple[str, str], float]:
    """(name, phase) -> value of one per-job metric for the jobs of namespace ns."""
    with urllib.request.urlopen(operator.metrics_url, timeout=5) as response:
        text = response.read().decode()
    return {
        (s.labels["name"], s.labels["phase"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == metric and s.labels.get("namespace") == ns
    }


def precompiling_job(ns: str, name: str) -> None:
    """A job whose cache misses: it stays in Precompiling while nobody plays Volcano."""
    queue = f"q-{ns}"
    apply({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
           "metadata": {"name": queue}, "spec": {"weight": 1}})  # fmt: skip
    claim(ns, "data")  # with its StorageClass: bound whichever tests ran before
    apply({
        "apiVersion": "trainium.dev/v1alpha1", "kind": "TrainiumJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"image": "123456789012.dkr.ecr.us-west-2.amazonaws.com/trainer:1.0",
                 "instanceType": "trn1.32xlarge", "nodes": 2,
                 "storage": {"claimName": "data"}, "cache": {"name": "bert-metrics"},
                 "scheduling": {"queue": queue}},
    })  # fmt: skip


def test_job_phase_and_start_time_are_read_from_the_object(
    operator: OperatorProcess, ns: str
) -> None:
    precompiling_job(ns, "slow")
    phase = wait_for(lambda: ((get(TJ, "slow", ns) or {}).get("status") or {}).get("phase"),
                     timeout=20, what="slow has a phase")  # fmt: skip
    assert phase == "Precompiling", (get(TJ, "slow", ns) or {})["status"]["message"]
    status = (get(TJ, "slow", ns) or {})["status"]
    [cond] = [c for c in status["conditions"] if c["type"] == "Precompiled"]
    entered = datetime.datetime.fromisoformat(cond["lastTransitionTime"].replace("Z", "+00:00"))
    wait_for(lambda: ("slow", "Precompiling") in series(operator, START, ns), timeout=20,
             what="the job's start-time series")  # fmt: skip
    assert series(operator, START, ns) == {("slow", "Precompiling"): entered.timestamp()}
    assert series(operator, "trainium_operator_job_phase", ns) == {("slow", "Precompiling"): 1}

    kubectl("delete", TJ, "slow", "-n", ns, "--wait=false")
    wait_for(lambda: get(TJ, "slow", ns) is None, timeout=20, what="slow deleted")
    wait_for(lambda: not series(operator, "trainium_operator_job_phase", ns), timeout=20,
             what="the deleted job's series gone")  # fmt: skip
    assert not series(operator, START, ns)
