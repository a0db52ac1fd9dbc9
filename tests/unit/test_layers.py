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


def _module(path: Path) -> str:
    return ".".join(("trainium_operator", *path.relative_to(ROOT).with_suffix("").parts))


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of the graph, if any (a depth-first search's back edge)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)) is not None:
            return found
    return None


def test_no_module_imports_itself_through_others_not_even_for_types() -> None:
    """A circle (even one under TYPE_CHECKING) means two modules say one thing: split them."""
    graph = {_module(p): imported(p) for p in ROOT.rglob("*.py")}
    known = set(graph)
    graph = {m: {t for t in ts if t in known and t != m} for m, ts in graph.items()}
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or ())
