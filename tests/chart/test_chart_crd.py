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
    """The TrainiumJob CRD among the rendered ones (kopf's peering CRDs are beside it)."""
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


PEERING_SOURCE = CHART.parents[1] / "crds" / "kopf-peering.yaml"


def test_rendered_peering_crds_equal_the_source(helm_bin: Path) -> None:
    """Two replicas peer by default: kopf's CRDs come with the chart, a copy that cannot drift."""
    crds = by_kind(render(), "CustomResourceDefinition")
    rendered = sorted(
        (strip_chart_additions(c) for c in crds if c["metadata"]["name"].endswith("kopf.dev")),
        key=lambda c: c["metadata"]["name"],
    )
    assert rendered == list(yaml.safe_load_all(PEERING_SOURCE.read_text())), (
        "templates/crd-kopf-peering.yaml drifted from crds/kopf-peering.yaml"
    )
    assert all(c["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
               for c in crds)  # fmt: skip
    for off in ("peering.crds=false", "crds.enabled=false", "peering.enabled=false"):
        names = [
            c["metadata"]["name"]
            for c in by_kind(render(off, "replicaCount=1"), "CustomResourceDefinition")
        ]
        assert not [n for n in names if n.endswith("kopf.dev")], off
