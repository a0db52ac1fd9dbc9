"""Argo CD: the TrainiumJob health check in Lua 5.1 (as gopher-lua runs it), its one source,
and the Application for the chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lupa.lua51
import pytest
import yaml

ARGOCD = Path(__file__).resolve().parents[2] / "deploy" / "argocd"
HEALTH_KEY = "resource.customizations.health.trainium.dev_TrainiumJob"
Obj = dict[str, Any]


def health(obj: Obj) -> dict[str, str]:
    """Run health.lua over obj like Argo CD: the script is a function body over `obj`."""
    rt = lupa.lua51.LuaRuntime(unpack_returned_tuples=True)
    assert rt.eval("_VERSION") == "Lua 5.1"
    check = rt.eval("function(obj) " + (ARGOCD / "health.lua").read_text() + "\nend")
    return dict(check(rt.table_from(obj, recursive=True)))


def job(status: Obj | None = None, generation: int = 1) -> Obj:
    obj: Obj = {
        "apiVersion": "trainium.dev/v1alpha1", "kind": "TrainiumJob",
        "metadata": {"name": "bert", "namespace": "ml", "generation": generation},
        "spec": {"image": "trainer:1"},
    }  # fmt: skip
    if status is not None:
        obj["status"] = status
    return obj


FAILED = {
    "phase": "Failed",
    "message": "training failed",
    "observedGeneration": 1,
    "conditions": [
        {"type": "Validated", "status": "True", "reason": "Valid", "message": "ok"},
        {
            "type": "Failed",
            "status": "True",
            "reason": "TrainingFailed",
            "message": "Volcano job bert-train failed: pod train-0 OOMKilled",
        },
    ],
}


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (None, ("Progressing", "Waiting for the operator to pick up the job")),
        ({}, ("Progressing", "Waiting for the operator to pick up the job")),
        ({"phase": "Pending", "message": "queue default"}, ("Progressing", "queue default")),
        ({"phase": "Precompiling"}, ("Progressing", "Precompiling")),
        ({"phase": "Training", "message": "2 nodes"}, ("Progressing", "2 nodes")),
        ({"phase": "Succeeded"}, ("Healthy", "Training finished")),
        (FAILED, ("Degraded", "Volcano job bert-train failed: pod train-0 OOMKilled")),
        ({"phase": "Failed", "message": "bad spec"}, ("Degraded", "bad spec")),
        ({"phase": "Failed"}, ("Degraded", "TrainiumJob failed")),
        ({"phase": "Suspended"}, ("Suspended", "Suspended")),
        ({"phase": "Exploded"}, ("Unknown", "Unknown phase Exploded")),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_health_of_every_phase(status: Obj | None, expected: tuple[str, str]) -> None:
    hs = health(job(status))
    assert (hs["status"], hs["message"]) == expected


def test_every_operator_phase_is_mapped() -> None:
    from trainium_operator.metrics import PHASES

    for phase in PHASES:
        assert health(job({"phase": phase}))["status"] != "Unknown", phase


def test_a_failed_condition_that_is_not_true_is_ignored() -> None:
    status = dict(FAILED, conditions=[{"type": "Failed", "status": "False", "message": "no"}])
    assert health(job(status))["message"] == "training failed"


def test_stale_status_is_progressing_even_when_it_says_succeeded() -> None:
    hs = health(job({"phase": "Succeeded", "observedGeneration": 1}, generation=2))
    assert hs["status"] == "Progressing"


def test_argocd_cm_embeds_exactly_health_lua() -> None:
    cm = yaml.safe_load((ARGOCD / "argocd-cm.yaml").read_text())
    assert (cm["kind"], cm["metadata"]["name"]) == ("ConfigMap", "argocd-cm")
    assert cm["data"][HEALTH_KEY] == (ARGOCD / "health.lua").read_text(), (
        "deploy/argocd/argocd-cm.yaml differs from health.lua: copy health.lua into it, "
        "indented by 4 spaces"
    )


def test_application_deploys_the_chart_with_server_side_apply() -> None:
    app = yaml.safe_load((ARGOCD / "application.yaml").read_text())
    assert (app["apiVersion"], app["kind"]) == ("argoproj.io/v1alpha1", "Application")
    source = app["spec"]["source"]
    assert source["path"] == "charts/trainium-operator"
    assert (ARGOCD.parents[1] / source["path"] / "Chart.yaml").exists()
    assert "ServerSideApply=true" in app["spec"]["syncPolicy"]["syncOptions"]
    assert "YOUR-ORG" in source["repoURL"]  # a placeholder, documented in the file
