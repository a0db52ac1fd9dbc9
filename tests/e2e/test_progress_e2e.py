"""A running gang's progress reaches status from rank 0's metrics; a stalled one is Hung."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_operator_e2e import events, printer_columns, start_training, status

from harness import (
    OPERATOR_COMMAND,
    EmulatorServer,
    OperatorProcess,
    apply,
    kubectl,
    started,
    train_gang,
    wait_for,
)
from trainium_trainer import contract
from trainium_trainer.live import LiveMetrics

Obj = dict[str, Any]
VCJOBS = "batch.volcano.sh/v1alpha1/jobs"


@pytest.fixture
def reading_operator(crd: Path, request: pytest.FixtureRequest, tmp_path: Path) -> OperatorProcess:
    """The operator reading rank 0 every second (the chart's progressIntervalSeconds), writing
    progress every 5 s (progressWriteSeconds; the chart's minute made this test wait one)."""
    env = {"TRAINIUM_PROGRESS_INTERVAL_SECONDS": "1", "TRAINIUM_PROGRESS_WRITE_SECONDS": "5"}
    return started(request, OperatorProcess(OPERATOR_COMMAND, tmp_path / "operator.log", env=env))


@pytest.fixture
def trainer() -> Iterator[LiveMetrics]:
    """Rank 0's metrics server as the trainer runs it, on loopback (the pod's IP here)."""
    live = LiveMetrics()
    live.start(0, 1000, 0)
    live.serve(0, addr="127.0.0.1")
    yield live
    live.close()


def rank0_pod(k8s: EmulatorServer, ns: str, owner: str, port: int) -> str:
    """Pod 0 of the gang, Running at 127.0.0.1 with its named metrics port moved to `port`."""
    template = k8s.get(VCJOBS, ns, f"{owner}-train")["spec"]["tasks"][0]["template"]
    spec = json.loads(json.dumps(template["spec"]))
    (named,) = spec["containers"][0]["ports"]
    assert named == {"name": contract.METRICS_PORT_NAME, "containerPort": contract.METRICS_PORT}
    named["containerPort"] = port
    name = f"{owner}-train-node-0"
    apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, **template["metadata"]},
            "spec": spec,
        }
    )
    patch = {"status": {"phase": "Running", "podIP": "127.0.0.1"}}  # fmt: skip
    kubectl("patch", "pod", name, "-n", ns, "--subresource=status", "--type=merge",
            "-p", json.dumps(patch))  # fmt: skip
    return name


def test_progress_and_eta_show_in_kubectl_get(
    reading_operator: OperatorProcess, ns: str, k8s: EmulatorServer, trainer: LiveMetrics
) -> None:
    assert trainer.port is not None
    start_training(k8s, ns, "watched")
    trainer.log({"step": 100, "loss": 3.25, "samples_per_second": 512.0})
    rank0_pod(k8s, ns, "watched", trainer.port)
    first = wait_for(lambda: (status(ns, "watched").get("progress") or {}).get("step") == 100
                     and status(ns, "watched")["progress"], what="step 100 on status")  # fmt: skip
    assert (
        first["totalSteps"] == 1000
        and first["loss"] == 3.25
        and first["display"] == "100/1000 (10%)"
    )
    assert first["samplesPerSecond"] == 512.0 and first["eta"] == "-"
    trainer.log({"step": 400, "loss": 2.5, "samples_per_second": 600.0})
    # The next write waits progressWriteSeconds after the first (one status write per interval).
    later = wait_for(lambda: (status(ns, "watched").get("progress") or {}).get("step") == 400
                     and status(ns, "watched")["progress"], timeout=30,
                     what="step 400 on status")  # fmt: skip
    assert isinstance(later["etaSeconds"], int) and later["eta"] != "-"
    out = kubectl("get", "tj", "watched", "-n", ns, "-o", f"custom-columns={printer_columns()}")
    header, row = out.stdout.splitlines()
    at = header.index("PROGRESS")
    assert row[at:].startswith("400/1000 (40%)") and header[at:].split()[1] == "ETA"
    assert row[header.index("ETA") :].split()[0] == later["eta"]
    assert (
        status(ns, "watched")["cost"]["projectedTotal"]
        >= status(ns, "watched")["cost"]["estimated"]["total"]
    )


def test_a_stalled_gang_is_hung_and_restarted_against_the_budget(
    reading_operator: OperatorProcess, ns: str, k8s: EmulatorServer, trainer: LiveMetrics
) -> None:
    assert trainer.port is not None
    start_training(k8s, ns, "stuck")
    kubectl("patch", "tj", "stuck", "-n", ns, "--type=merge",
            "-p", json.dumps({"spec": {"runPolicy": {"progressDeadlineSeconds": 60}}}))  # fmt: skip
    uid = k8s.get(VCJOBS, ns, "stuck-train")["metadata"]["uid"]
    trainer.log({"step": 40, "loss": 4.5})
    # The step stood at 40 (past the first step) since an hour ago, as an earlier reading saw.
    stalled = {
        "gang": uid,
        "step": 40,
        "totalSteps": 1000,
        "firstStep": 10,
        "advancedAt": "2026-01-01T00:00:00Z",
        "observedAt": "2026-01-01T00:00:00Z",
    }
    kubectl("patch", "tj", "stuck", "-n", ns, "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": {"progress": stalled}}))  # fmt: skip
    rank0_pod(k8s, ns, "stuck", trainer.port)
    warned = wait_for(lambda: [e for e in events(ns) if e["reason"] == "Hung"],
                      what="a Hung Warning")  # fmt: skip
    assert "progressDeadlineSeconds (60s)" in warned[0]["message"]
    assert "step 40/1000 (4%)" in warned[0]["message"] and "loss 4.5" in warned[0]["message"]
    wait_for(lambda: (j := k8s.get(VCJOBS, ns, train_gang(k8s, ns, "stuck")))
             and j["metadata"]["uid"] != uid, what="a new training gang")  # fmt: skip
    assert train_gang(k8s, ns, "stuck") != "stuck-train", "a replacement has a name of its own"
    st = status(ns, "stuck")
    assert st["restarts"] == 1 and st["lastFailure"]["reason"] == "Hung"
    assert st["phase"] == "Training"


def test_describe_of_a_job_that_never_logged_a_step_shows_no_progress_bookkeeping(
    reading_operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    """Issue 43, item 6: `kubectl describe` showed `Progress: Advanced At / Observed At` on a
    gang whose trainer never answered, and `Gang Pending` lists above each history entry's
    Phase (describe sorts keys and puts nothing between list items)."""
    from harness import free_port

    start_training(k8s, ns, "silent")
    rank0_pod(k8s, ns, "silent", free_port())  # nothing listens there: no reading
    passes = reading_operator.passes()
    wait_for(lambda: reading_operator.passes() >= passes + 3, what="a few passes reading rank 0")
    out = kubectl("describe", "trainiumjobs.v1alpha1.trainium.dev", "silent", "-n", ns).stdout
    assert "progress" not in status(ns, "silent")
    assert "Advanced At" not in out and "Observed At" not in out, out
    lines = [ln.strip() for ln in out.splitlines()]
    history = lines[lines.index("History:") + 1 :]
    assert history[0].startswith("Phase:"), out  # each entry starts at its phase
    assert not any(ln.startswith("Gang Pending") for ln in lines), out
