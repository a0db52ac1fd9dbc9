"""The chart's CRD is crds/ plus only the release labels and the keep annotation: no drift."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from helmchart import CHART, CRD_SOURCE, by_kind, render

CHART_ANNOTATIONS = {"helm.sh/resource-policy"}
CHART_LABELS = {
    "helm.sh/chart",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
}


def strip_chart_additions(crd: dict) -> dict:  # type: ignore[type-arg]
    out = copy.deepcopy(crd)
    md = out["metadata"]
    for key, added in (("annotations", CHART_ANNOTATIONS), ("labels", CHART_LABELS)):
        kept = {k: v for k, v in (md.get(key) or {}).items() if k not in added}
        if kept:
            md[key] = kept
        else:
            md.pop(key, None)
    return out


def trainium_crd(objs: list[Any]) -> Any:
    """The TrainiumJob CRD among the rendered ones."""
    found = [
        o for o in by_kind(objs, "CustomResourceDefinition") if "trainium" in o["metadata"]["name"]
    ]
    assert len(found) == 1
    return found[0]


def test_rendered_crd_equals_the_source(helm_bin: Path) -> None:
    rendered = trainium_crd(render())
    source = yaml.safe_load(CRD_SOURCE.read_text())
    assert strip_chart_additions(rendered) == source, (
        "charts/trainium-operator/templates/crd-trainiumjobs.yaml drifted from "
        f"{CRD_SOURCE.name}: run `make crds`"
    )


def test_generated_template_says_how_it_is_made() -> None:
    text = (CHART / "templates" / "crd-trainiumjobs.yaml").read_text()
    assert "make crds" in text.splitlines()[0]


def test_keep_policy_is_on_by_default_and_can_be_dropped(helm_bin: Path) -> None:
    crd = trainium_crd(render())
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert set(crd["metadata"]["labels"]) >= CHART_LABELS
    crd = trainium_crd(render("crds.keep=false"))
    assert "annotations" not in crd["metadata"]


def test_crds_can_be_left_out(helm_bin: Path) -> None:
    assert by_kind(render("crds.enabled=false"), "CustomResourceDefinition") == []


def test_kopf_peering_crds_are_no_longer_rendered(helm_bin: Path) -> None:
    """The replicas elect through a Lease: kopf's peering CRDs are not the chart's to install."""
    for sets in ((), ("peering.crds=true",)):
        names = [c["metadata"]["name"] for c in by_kind(render(*sets), "CustomResourceDefinition")]
        assert names == ["trainiumjobs.trainium.dev"], sets
