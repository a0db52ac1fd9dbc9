"""The folder layout shows the layers, and every import points down (or within its layer)."""

from __future__ import annotations

import ast
from pathlib import Path

import trainium_operator

ROOT = Path(trainium_operator.__file__).parent
#: Lowest first: a module may import its own layer and those below, never one above.
RANKS = {"api": 0, "domain": 1, "manifests": 2, "cluster": 3, "runtime": 4, "local": 4}
#: Beside each other, not on top of each other: neither backend imports the other.
SIDE_BY_SIDE = {"runtime", "local"}
TOP = {"cli", "__main__", "__init__"}


def imported(path: Path) -> set[str]:
    """The trainium_operator modules a file imports (`from pkg import mod` counts as pkg.mod)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom) or not node.module:
            continue
        if node.module == "trainium_operator":
            out |= {f"trainium_operator.{a.name}" for a in node.names}
        elif node.module.startswith("trainium_operator."):
            out.add(node.module)
    return out


def layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in RANKS else None


def test_every_module_lives_in_a_layer_or_is_the_command_line() -> None:
    loose = {p.stem for p in ROOT.glob("*.py")} - TOP
    assert not loose, f"modules outside the layer folders: {sorted(loose)}"
    assert not (ROOT.parent / "__init__.py").exists()  # operator/ would shadow the stdlib module


def test_imports_point_down_only() -> None:
    upward: list[str] = []
    for path in ROOT.rglob("*.py"):
        me = layer(".".join(("trainium_operator", *path.relative_to(ROOT).with_suffix("").parts)))
        if me is None:
            continue
        for target in imported(path):
            them = layer(target)
            if them is None or them == me:
                continue
            if RANKS[them] > RANKS[me] or {me, them} <= SIDE_BY_SIDE:
                upward.append(f"{path.relative_to(ROOT)} -> {target}")
    assert not upward, "imports against the layers:\n" + "\n".join(sorted(upward))
