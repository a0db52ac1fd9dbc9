"""Argo CD: the TrainiumJob health check run as Argo CD runs it (Lua 5.1 with only the base,
table and safe os libraries: tests/argocd.py), its upstream health_test.yaml, its one source,
argocd-cm's ignoreResourceUpdates, and the Application for the chart."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import lupa.lua51
import pytest
import yaml

from argocd import ARGOCD, CUSTOMIZATION, HEALTH_LUA, health, health_tests, restricted_runtime

HEALTH_KEY = "resource.customizations.health.trainium.dev_TrainiumJob"
IGNORE_KEY = "resource.customizations.ignoreResourceUpdates.trainium.dev_TrainiumJob"
Obj = dict[str, Any]
CASES = health_tests()


@pytest.mark.parametrize(("obj", "expected", "path"), CASES, ids=[c[2] for c in CASES])
def test_upstream_health_test_yaml(obj: Obj, expected: dict[str, str], path: str) -> None:
    """Each health_test.yaml case, as Argo CD's util/lua test runner checks it."""
    assert health(obj) == expected


def test_health_tests_cover_every_testdata_file_and_health() -> None:
    files = {f"testdata/{p.name}" for p in (CUSTOMIZATION / "testdata").iterdir()}
    assert files == {path for _, _, path in CASES}
    assert {e["status"] for _, e, _ in CASES} == {"Progressing", "Healthy", "Degraded"}


@pytest.mark.parametrize(
    "snippet",
    [
        'return {status = string.format("%s", "Healthy")}',
        'return {status = ("x"):upper()}',
        "return {status = tostring(math.floor(1.5))}",
        'return {status = io.write("")}',
    ],
    ids=["string.format", "string-method", "math", "io"],
)
def test_the_runtime_has_only_argo_cds_libraries(snippet: str) -> None:
    """What passes with every library open fails here, as it would in Argo CD."""
    everything = lupa.lua51.LuaRuntime()
    assert everything.execute(snippet.replace("return", "local r =", 1) + " return r") is not None
    with pytest.raises(lupa.lua51.LuaError):
        restricted_runtime(snippet)({})


def test_the_runtime_keeps_what_argo_cd_opens() -> None:
    script = ("local t = {} table.insert(t, obj.a) "
              "return {status = t[1] .. tostring(#t) .. type(os.time())}")  # fmt: skip
    assert restricted_runtime(script)({"a": "ok"}) == {"status": "ok1number"}


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
    from trainium_operator.runtime.metrics import PHASES

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
    assert cm["data"][HEALTH_KEY] == HEALTH_LUA.read_text(), (
        "deploy/argocd/argocd-cm.yaml differs from health.lua: copy health.lua into it, "
        "indented by 4 spaces"
    )


def test_ignore_resource_updates_names_kopfs_annotation_prefix() -> None:
    from trainium_operator.runtime.handlers import PREFIX

    cm = yaml.safe_load((ARGOCD / "argocd-cm.yaml").read_text())
    assert cm["data"]["resource.ignoreResourceUpdatesEnabled"] == "true"
    [expr] = yaml.safe_load(cm["data"][IGNORE_KEY])["jqPathExpressions"]
    assert f'startswith("{PREFIX}/")' in expr


@pytest.mark.skipif(shutil.which("jq") is None, reason="jq not installed (apt-get install jq)")
def test_ignore_resource_updates_drops_only_kopfs_annotations() -> None:
    """Argo CD applies each jqPathExpression as del(EXPR); jq does the same here."""
    cm = yaml.safe_load((ARGOCD / "argocd-cm.yaml").read_text())
    [expr] = yaml.safe_load(cm["data"][IGNORE_KEY])["jqPathExpressions"]
    obj, _, _ = CASES[-1]
    annotations = {"trainium.dev/last-handled-configuration": "{}", "trainium.dev/on_job": "{}",
                   "team": "ml"}  # fmt: skip
    live = dict(obj, metadata=dict(obj["metadata"], annotations=annotations))
    proc = subprocess.run(["jq", "-c", f"del({expr})"], input=json.dumps(live),
                          capture_output=True, text=True, check=True, timeout=30)  # fmt: skip
    out = json.loads(proc.stdout)
    assert out["metadata"]["annotations"] == {"team": "ml"}
    assert out["status"] == obj["status"]


def test_ttl_with_self_heal_is_documented() -> None:
    doc = (ARGOCD / "README.md").read_text()
    for words in ("ttlSecondsAfterFinished", "selfHeal", "recreates"):
        assert words in doc


def test_application_deploys_the_chart_with_server_side_apply() -> None:
    app = yaml.safe_load((ARGOCD / "application.yaml").read_text())
    assert (app["apiVersion"], app["kind"]) == ("argoproj.io/v1alpha1", "Application")
    source = app["spec"]["source"]
    assert source["path"] == "charts/trainium-operator"
    assert (ARGOCD.parents[1] / source["path"] / "Chart.yaml").exists()
    assert "ServerSideApply=true" in app["spec"]["syncPolicy"]["syncOptions"]
    assert "YOUR-ORG" in source["repoURL"]  # a placeholder, documented in the file
