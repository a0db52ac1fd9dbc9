"""Print the chart's README.md from values.yaml's `# --` comments (helm-docs style).

`make chart-docs` writes it; tests/chart/test_chart_docs.py fails when the README drifts from
values.yaml. Only PyYAML is needed. A `# -- text` comment (continued by `# ` lines) documents
the key right below it; keys without one are covered by a documented parent (e.g. `resources`).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parents[1] / "charts" / "trainium-operator"
KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_]+):")


def documented(text: str) -> list[tuple[str, str]]:
    """(dotted key, description) for every `# --` comment, in file order."""
    out: list[tuple[str, str]] = []
    path: list[tuple[int, str]] = []
    desc: list[str] | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("# --"):
            desc = [stripped[4:].strip()]
        elif stripped.startswith("#") and desc is not None:
            desc.append(stripped[1:].strip())
        elif match := KEY.match(line):
            indent = len(match["indent"])
            path = [(i, k) for i, k in path if i < indent] + [(indent, match["key"])]
            if desc is not None:
                out.append((".".join(k for _, k in path), " ".join(desc)))
            desc = None
        elif not stripped:
            desc = None
    return out


def kind(value: Any) -> str:
    """helm-docs' type names."""
    for t, name in (
        (bool, "bool"),
        (int, "int"),
        (float, "float"),
        (str, "string"),
        (list, "list"),
    ):
        if isinstance(value, t):
            return name
    return "object"


def lookup(values: dict[str, Any], dotted: str) -> Any:
    node: Any = values
    for part in dotted.split("."):
        node = node[part]
    return node


def render() -> str:
    """The README text."""
    text = (CHART / "values.yaml").read_text()
    values = yaml.safe_load(text)
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    lines = [
        f"# {chart['name']}",
        "",
        " ".join(chart["description"].split()),
        "",
        f"Version {chart['version']}, appVersion {chart['appVersion']}, Kubernetes "
        f"`{chart['kubeVersion']}`. Generated from `values.yaml` by `make chart-docs` "
        "(scripts/chart-docs.py): edit the `# --` comments there, not this file.",
        "",
        "```bash",
        f"helm install {chart['name']} charts/{chart['name']} \\",
        "  -n trainium-system --create-namespace",
        "```",
        "",
        "Every value is checked by `values.schema.json`: a typo or a wrong type fails the install.",
        "",
        "## Values",
        "",
        "| Key | Type | Default | Description |",
        "|-----|------|---------|-------------|",
    ]
    for key, desc in documented(text):
        value = lookup(values, key)
        default = json.dumps(value).replace("|", "\\|")
        cells = [key, kind(value), f"`{default}`", desc.replace("|", "\\|")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
