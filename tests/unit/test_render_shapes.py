"""`trainium render` on any spec shape: one error line per problem, never a traceback or a hang."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from trainium_operator import cli

HEAD = "apiVersion: trainium.dev/v1alpha1\nkind: TrainiumJob\nmetadata: {name: x}\n"
BASE = "image: i, instanceType: trn1.2xlarge, storage: {claimName: c}"


def _bomb(levels: int) -> str:
    """A spec whose args expand to 9**levels strings through YAML aliases (billion laughs)."""
    defs = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    defs += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(defs) + f"\n{HEAD}spec: {{{BASE}, args: *a{levels - 1}}}\n"


#: (id, document, the one expected error line; "" means it renders).
CASES = [
    ("spec-string", f'{HEAD}spec: "x"\n', "error: x: spec: 'x' is not of type 'object'"),
    ("spec-list", f"{HEAD}spec: [1]\n", "error: x: spec: [1] is not of type 'object'"),
    (
        "run-policy-string",
        f'{HEAD}spec: {{{BASE}, runPolicy: "x"}}\n',
        "error: x: spec.runPolicy: 'x' is not of type 'object'",
    ),
    ("nodes-2.5", f"{HEAD}spec: {{{BASE}, nodes: 2.5}}\n", "error: x: spec.nodes: 2.5 is not of"),
    (
        "env-twice",
        f"{HEAD}spec: {{{BASE}, env: [{{name: A}}, {{name: A}}]}}\n",
        'error: x: spec.env[1]: Duplicate value: {"name": "A"}',
    ),
    (
        "deep",
        f"{HEAD}spec: {{{BASE}, gpus: {'[' * 3000}{']' * 3000}}}\n",
        "nested deeper than",
    ),
    ("alias-bomb", _bomb(9), "YAML aliases"),
    ("nodes-2.0", f"{HEAD}spec: {{{BASE}, nodes: 2.0}}\n", ""),
    ("nodes-null", f"{HEAD}spec: {{{BASE}, nodes: null}}\n", ""),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_render_answers_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(text, encoding="utf-8")
    code = cli.main(["render", "-f", str(path)])
    out, err = capsys.readouterr()
    if not expected:
        assert (code, err) == (0, "")
        jobs = [d for d in yaml.safe_load_all(out) if d["kind"] == "Job"]
        assert [j["spec"]["minAvailable"] for j in jobs] == [2 if "2.0" in text else 1] * 2
        return
    assert code == 2
    (line,) = err.splitlines()
    assert expected in line and len(line.encode()) < 4200, line
