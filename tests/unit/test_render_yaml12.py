"""`trainium render` output keeps every string a string for YAML 1.1 and YAML 1.2 readers.

PyYAML resolves YAML 1.1: `4e-4` (no dot) is a string to it and so was written plain, but a
YAML 1.2 reader takes it for a number, and so does kubectl (go-yaml v2, which also reads `y` and
`n` as booleans and `08` as a number): the API server refuses an args list holding a number.
"""

from __future__ import annotations

import io
import json
import re
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml
from test_examples import EXAMPLE_FILES

from trainium_operator import cli
from trainium_operator.local import render


class Core12Loader(yaml.SafeLoader):
    """A YAML 1.2 core-schema reader: how Go YAML and other 1.2 parsers resolve plain scalars."""

    yaml_implicit_resolvers: ClassVar[dict[Any, Any]] = {}


_CORE12 = {
    "tag:yaml.org,2002:null": r"~|null|Null|NULL|",
    "tag:yaml.org,2002:bool": r"true|True|TRUE|false|False|FALSE",
    "tag:yaml.org,2002:int": r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+",
    "tag:yaml.org,2002:float": (
        r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?"
        r"|[-+]?\.(inf|Inf|INF)|\.nan|\.NaN|\.NAN"
    ),
}
for _tag, _pattern in _CORE12.items():
    Core12Loader.add_implicit_resolver(_tag, re.compile(rf"^(?:{_pattern})$"), None)


def _int12(loader: Core12Loader, node: yaml.ScalarNode) -> int:
    value = str(loader.construct_scalar(node))
    if value.startswith("0o"):
        return int(value[2:], 8)
    return int(value, 0) if value.startswith("0x") else int(value)


Core12Loader.add_constructor("tag:yaml.org,2002:int", _int12)

AMBIGUOUS = [
    "4e-4", "1e3", "1E+3", ".5", "-.5", "+1", "0x1F", "0o17", "017", "1_000", "0b101", "12:30",
    "yes", "no", "Yes", "NO", "on", "off", "On", "y", "n", "true", "False", "TRUE", "null", "Null",
    "~", "", ".inf", "-.Inf", ".nan", ".NaN", "2026-11-25", "=", "3.", "1.0e+3",
    "Y", "N", "+.5", "08", "09.5", "1.e5", "0B101", "-0b1", "0X1f", "1__0", "<<",
]  # fmt: skip


def test_the_core12_reader_reads_numbers_as_numbers() -> None:
    """The check itself: plain 4e-4 is a number to a 1.2 reader, a string to PyYAML."""
    assert yaml.load("[4e-4, 0o17, 0x1F, .5, true, null]", Core12Loader) == [
        4e-4, 15, 31, 0.5, True, None,
    ]  # fmt: skip
    assert yaml.safe_load("[4e-4, yes]") == ["4e-4", True]


@pytest.mark.parametrize("text", AMBIGUOUS)
def test_an_ambiguous_string_stays_a_string(text: str) -> None:
    doc = {"args": ["--lr", text], "n": 3, "f": 0.5, "b": True, "z": None}
    out = render.dump_all([doc])
    assert yaml.safe_load(out) == doc
    assert yaml.load(out, Core12Loader) == doc
    assert render.load_yaml(out, "out") == [doc]  # as kubectl reads it


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_every_rendered_example_reads_back_the_same_under_yaml_1_2(path: Path) -> None:
    manifests = [
        render.strip_unknown_owner(m)
        for doc in render.load_jobs(str(path))
        for m in render.render_job(doc).manifests
    ]
    printed = io.StringIO()
    with redirect_stdout(printed):
        assert cli.main(["render", "-f", str(path)]) == 0
    expected = json.loads(json.dumps(manifests))
    assert list(yaml.load_all(printed.getvalue(), Core12Loader)) == expected
    assert list(yaml.safe_load_all(printed.getvalue())) == expected
    assert render.load_yaml(printed.getvalue(), "out") == expected
