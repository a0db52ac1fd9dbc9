"""`trainium render -f` / `run -f` read YAML as kubectl does (go-yaml v2, then JSON), not as PyYAML.

Issue 34 item 3: an unquoted `4e-4` in spec.args was a string to PyYAML (YAML 1.1), so the CLI
accepted a file that `kubectl apply` refuses (`spec.args[16] ... must be of type string:
"number"`). The expected values below follow go-yaml v2's resolve.go (as vendored by
sigs.k8s.io/yaml) and sigs.k8s.io/yaml's JSON conversion, case by case.
"""

from __future__ import annotations

import io
import json
import math
from contextlib import redirect_stderr
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_examples import EXAMPLE_FILES

from trainium_operator import cli
from trainium_operator.local import kubeyaml, render

TUTORIAL = Path(__file__).resolve().parents[2] / "examples" / "bert-large-pretrain.yaml"

#: plain scalar -> the JSON value kubectl sends (after go-yaml v2 and sigs.k8s.io/yaml).
KUBECTL = [
    ("4e-4", 0.0004), ("1e3", 1000), ("1E+3", 1000), ("1.0e+3", 1000), ("1.e5", 100000),
    (".5", 0.5), ("-.5", -0.5), ("+.5", 0.5), ("3.", 3), ("3.5", 3.5), ("09.5", 9.5),
    ("+1", 1), ("-0", 0), ("00", 0), ("0x1F", 31), ("-0x1F", -31), ("0X1f", 31),
    ("0o17", 15), ("017", 15), ("08", 8), ("1_000", 1000), ("1__0", 10), ("0b101", 5),
    ("-0b101", -5), ("18446744073709551615", 2**64 - 1), ("0x10000000000000000", 2**64),
    ("18446744073709551616", 1.8446744073709552e19),
    ("y", True), ("Y", True), ("yes", True), ("Yes", True), ("YES", True), ("on", True),
    ("On", True), ("ON", True), ("true", True), ("True", True), ("TRUE", True),
    ("n", False), ("N", False), ("no", False), ("NO", False), ("off", False), ("Off", False),
    ("false", False), ("FALSE", False),
    ("null", None), ("Null", None), ("NULL", None), ("~", None), ("", None),
    # strings to kubectl, though not all to PyYAML (base 60, dates, `=`) or to YAML 1.2 core
    ("12:30", "12:30"), ("2026-11-25", "2026-11-25"),
    ("2001-12-14t21:59:43Z", "2001-12-14t21:59:43Z"),
    ("=", "="), ("tRUE", "tRUE"), ("yES", "yES"), ("0x", "0x"), ("1e", "1e"), ("+", "+"),
    (".", "."), ("..5", "..5"), ("_1", "_1"), ("0x1p-2", "0x1p-2"),
    ("1e400", "1e400"), ("+0x10000000000000000", "+0x10000000000000000"), ("4e-4x", "4e-4x"),
]  # fmt: skip


def kubectl_reads(text: str) -> Any:
    """What the CLI loads from `v: <text>` (the document as kubectl would send it)."""
    return render.load_yaml(f"v: {text}\n", "t.yaml")[0]["v"]


@pytest.mark.parametrize(("text", "expected"), KUBECTL, ids=[t or "empty" for t, _ in KUBECTL])
def test_a_plain_scalar_has_kubectls_type(text: str, expected: Any) -> None:
    got = kubectl_reads(text)
    assert got == expected and type(got) is type(expected), (text, got)


def test_pyyaml_alone_disagreed() -> None:
    """The cases behind the issue: PyYAML's YAML 1.1 differs from kubectl on each of these."""
    assert yaml.safe_load("[4e-4, 1e3, 0o17, 08, +.5, y, n, '12:30', 12:30]") == [
        "4e-4", "1e3", "0o17", "08", "+.5", "y", "n", "12:30", 750,
    ]  # fmt: skip
    assert render.load_yaml("[4e-4, 1e3, 0o17, 08, +.5, y, n, '12:30', 12:30]", "t")[0] == [
        0.0004, 1000, 15, 8, 0.5, True, False, "12:30", "12:30",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "shown"),
    [(".inf", ".inf"), ("-.Inf", "-.inf"), ("+.INF", ".inf"), (".nan", ".nan"), (".NaN", ".nan")],
)
def test_inf_and_nan_are_refused_as_kubectl_cannot_send_them(text: str, shown: str) -> None:
    with pytest.raises(render.UsageError) as exc:
        kubectl_reads(text)
    expected = f"t.yaml: v: {shown} is not a JSON number; kubectl cannot send it"
    assert exc.value.problems == [expected]


def test_keys_become_strings_as_sigs_k8s_io_yaml_writes_them() -> None:
    text = "{on: a, 2: b, 1.5: c, 1e6: d, 0.0001: e, 1e-5: f, 3.14159265: g, -0.0: h, 1e40: i}"
    assert render.load_yaml(text, "t")[0] == {
        "true": "a", "2": "b", "1.5": "c", "1e+06": "d", "0.0001": "e", "1e-05": "f",
        "3.1415927": "g", "-0": "h", ".inf": "i",
    }  # fmt: skip


def test_keys_equal_as_json_are_a_duplicate() -> None:
    with pytest.raises(render.UsageError) as exc:
        render.load_yaml("m: {on: a, 'true': b}\n", "t.yaml")
    assert exc.value.problems == ["t.yaml: m: keys True and 'true' are both 'true'"]


def test_a_null_key_is_refused() -> None:
    with pytest.raises(render.UsageError) as exc:
        render.load_yaml("m: {~: a}\n", "t.yaml")
    assert exc.value.problems == ["t.yaml: m: a NoneType map key cannot become JSON"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("!!str 4e-4", "4e-4"), ("'4e-4'", "4e-4"), ('"y"', "y"), ("!!float 1", 1),
        ("!!float 1.5", 1.5), ("!!int 0o17", 15), ("!!bool y", True), ("!!null ''", None),
        ("!!timestamp 2001-12-14", "2001-12-14"), ("!!binary aGk=", "hi"), ("!foo bar", "bar"),
        ("!!set {a, b}", {"a": None, "b": None}), ("!foo [1, x]", [1, "x"]),
    ],
)  # fmt: skip
def test_explicit_tags_as_go_yaml_takes_them(text: str, expected: Any) -> None:
    assert kubectl_reads(text) == expected


def test_an_explicit_tag_that_does_not_fit_is_refused() -> None:
    with pytest.raises(render.UsageError) as exc:
        kubectl_reads("!!int 1.5")
    assert exc.value.problems == [
        "t.yaml:1:4: not valid YAML: cannot decode !!float `1.5` as a !!int"
    ]


def test_float32_g_matches_go() -> None:
    """strconv.FormatFloat(x, 'g', -1, 32) for a few values (from Go's own formatting rules)."""
    cases = {0.0: "0", 1.0: "1", 100000.0: "100000", 1e6: "1e+06", 0.0001: "0.0001",
             1e-5: "1e-05", 0.1: "0.1", 123.456: "123.456", 1e38: "1e+38", 1e39: ".inf",
             -1e39: "-.inf", math.nan: ".nan", 16777217.0: "1.6777216e+07"}  # fmt: skip
    assert {x: kubeyaml.float32_g(x) for x in cases} == cases


def _render_errors(tmp_path: Path, text: str, command: str = "render") -> tuple[int, list[str]]:
    path = tmp_path / "job.yaml"
    path.write_text(text, encoding="utf-8")
    err = io.StringIO()
    with redirect_stderr(err):
        code = cli.main([command, "-f", str(path)])
    return code, err.getvalue().splitlines()


def _tutorial_with_args(args: str) -> str:
    job = yaml.safe_load(TUTORIAL.read_text(encoding="utf-8"))
    job["spec"]["args"] = ["ARGS"]
    return yaml.safe_dump(job).replace("- ARGS", args)


@pytest.mark.parametrize("command", ["render", "run"])
def test_an_unquoted_4e_4_in_args_is_refused_naming_the_field(tmp_path: Path, command: str) -> None:
    """The issue's file: kubectl sends 4e-4 as a number and the API server refuses spec.args[1]."""
    code, lines = _render_errors(tmp_path, _tutorial_with_args("- --lr\n  - 4e-4"), command)
    assert code == 2
    assert lines == [
        "error: bert-large-pretrain: spec.args[1]: 0.0004 is not of type 'string'; "
        "quote it: unquoted, YAML reads a number"
    ]


def test_a_quoted_4e_4_renders(tmp_path: Path) -> None:
    code, lines = _render_errors(tmp_path, _tutorial_with_args("- --lr\n  - '4e-4'"))
    assert (code, lines) == (0, [])


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_every_example_reads_the_same_to_kubectl_and_to_pyyaml(path: Path) -> None:
    """No example holds a scalar the two readers type differently (a trap for who copies it)."""
    text = path.read_text(encoding="utf-8")
    pyyaml = [d for d in yaml.safe_load_all(text) if d is not None]
    assert render.load_yaml(text, str(path)) == json.loads(json.dumps(pyyaml))
