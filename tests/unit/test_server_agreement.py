"""The offline validation gives a kube-apiserver's verdict, not Python's: each case was seen
to differ against a real API server (RE2, pruned nulls, int64, 2.0, list types, shapes)."""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

import pytest
import yaml
from support import job

from trainium_operator.api import crd, spec, structural
from trainium_operator.manifests import builders
from trainium_operator.manifests.ownership import Owner

Json = dict[str, Any]
NBSP = "\u00a0"


def errors_of(doc: Json) -> list[str]:
    return crd.validate(doc)[1]


# --- regular expressions: Go's RE2, for `pattern` and for CEL matches() ----------------------


def test_a_non_breaking_space_is_not_whitespace_for_re2() -> None:
    # `^[^\s]+$`: RE2's \s is ASCII only, so the server stores this image; Python's re refused it.
    assert errors_of(job(image=f"registry.example/trainer:1{NBSP}x")) == []


@pytest.mark.parametrize("field", ["image", "script"])
def test_a_trailing_newline_does_not_match_dollar(field: str) -> None:
    # RE2's `$` is the end of the text; Python's also matches before a final newline.
    errors = errors_of(job(**{field: "train.py\n"}))
    assert any(e.startswith(f"spec.{field}: ") and "does not match" in e for e in errors), errors


def test_a_trailing_newline_in_a_compiler_flag_is_refused() -> None:
    errors = errors_of(job(compilerFlags=["-O1\n"]))
    assert any(e.startswith("spec.compilerFlags[0]: ") for e in errors), errors


@pytest.mark.parametrize(
    ("rule", "value", "expected"),
    [
        (r"self.matches('^\\s$')", NBSP, False),  # Rust's regex (the evaluator's own) says True
        (r"self.matches('^\\s$')", " ", True),
        (r"self.matches('^\\d+$')", "\u0663", False),  # ARABIC-INDIC DIGIT THREE
        ("self.matches('^a$')", "a\n", False),
        ("matches(self, '^a+$')", "aaa", True),
        ("'matches(x)' + self == 'matches(x)y'", "y", True),  # text inside a literal stays
    ],
)
def test_cel_matches_is_re2(rule: str, value: str, expected: bool) -> None:
    assert crd.evaluate(rule, value) is expected


def test_cel_rules_see_escaped_property_names() -> None:
    assert crd.cel_field("hugepages-2Mi") == "hugepages__dash__2Mi"
    assert crd.cel_field("a__b.c/d") == "a__underscores__b__dot__c__slash__d"
    assert crd.cel_field("namespace") == "__namespace__"
    assert crd.cel_field("cpu") == "cpu"
    assert crd.cel_field("1gpu") is None
    assert crd.cel_field("a b") is None
    schema = {"type": "object", "properties": {"hugepages-2Mi": {"type": "string"}}}
    assert crd.cel_value({"hugepages-2Mi": "2Mi"}, schema) == {"hugepages__dash__2Mi": "2Mi"}
    as_map = {"type": "object", "additionalProperties": {"type": "string"}}
    assert crd.cel_value({"node-role/x": "1"}, as_map) == {"node-role/x": "1"}


# --- list types -------------------------------------------------------------------------------


def test_env_names_are_unique_as_in_a_list_map() -> None:
    errors = errors_of(job(env=[{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]))
    assert errors == ['spec.env[1]: Duplicate value: {"name": "A"}']


def test_env_with_distinct_names_is_valid() -> None:
    assert errors_of(job(env=[{"name": "A"}, {"name": "B"}])) == []


def test_set_lists_refuse_duplicate_items() -> None:
    schema = {
        "type": "object",
        "properties": {"tags": {"type": "array", "x-kubernetes-list-type": "set"}},
    }
    assert list(structural.list_type_errors({"tags": ["a", "b", "a"]}, schema)) == [
        '.tags[2]: Duplicate value: "a"'
    ]
    assert list(structural.list_type_errors({"tags": ["a", "b"]}, schema)) == []


# --- nulls are pruned, then defaulted ---------------------------------------------------------


def test_a_null_field_with_a_default_gets_the_default() -> None:
    parsed = spec.parse(job(nodes=None, cache=None, precompile=None))
    assert parsed.nodes == 1
    assert parsed.cache == spec.Cache()
    assert parsed.precompile == spec.Precompile()


def test_a_null_field_without_a_default_is_dropped() -> None:
    stored, errors = crd.validate(
        job(module=None, env=None, storage={"claimName": "c", "fsx": None})
    )
    assert errors == []
    assert "module" not in stored["spec"]
    assert "env" not in stored["spec"]
    assert "fsx" not in stored["spec"]["storage"]


def test_a_null_list_item_is_not_pruned() -> None:
    assert errors_of(job(args=[None])) == ["spec.args[0]: None is not of type 'string'"]


def test_a_null_spec_is_a_missing_spec() -> None:
    assert errors_of({"apiVersion": "trainium.dev/v1alpha1", "spec": None}) == ["spec: required"]


# --- numbers: int64, and integral floats are integers -----------------------------------------


@pytest.mark.parametrize(
    "run_policy",
    [{"activeDeadlineSeconds": 2**63}, {"ttlSecondsAfterFinished": 2**64 + 1}],
)
def test_integers_beyond_int64_are_refused(run_policy: Json) -> None:
    errors = errors_of(job(runPolicy=run_policy))
    (field,) = run_policy
    assert any(e.startswith(f"spec.runPolicy.{field}: ") for e in errors), errors


def test_the_largest_int64_is_an_integer() -> None:
    tolerations = [{"key": "k", "effect": "NoExecute", "tolerationSeconds": 2**63 - 1}]
    assert errors_of(job(scheduling={"tolerations": tolerations})) == []


def test_an_integral_float_is_an_integer_and_stored_as_an_int() -> None:
    parsed = spec.parse(job(nodes=2.0, precompile={"steps": 5.0}))
    assert parsed.nodes == 2 and type(parsed.nodes) is int
    assert parsed.precompile.steps == 5 and type(parsed.precompile.steps) is int


def test_an_integral_float_renders_like_the_int() -> None:
    owner = Owner("floaty", "default", "uid-1")
    by_float = builders.build_vcjob(spec.parse(job(nodes=2.0)), owner, "train")
    by_int = builders.build_vcjob(spec.parse(job(nodes=2)), owner, "train")
    assert by_float == by_int
    assert by_float["spec"]["minAvailable"] == 2


@pytest.mark.parametrize("value", [2.5, 1e20, math.inf, math.nan, True, "2"])
def test_other_numbers_are_not_integers(value: Any) -> None:
    errors = errors_of(job(nodes=value))
    assert any(e.startswith("spec.nodes: ") and "integer" in e for e in errors), errors


# --- no shape crashes: every field, every kind of wrong value ---------------------------------

ODD_VALUES: list[Any] = [
    None, "x", "", "\ud800", "a\n", [1], [], {}, {"a": 1}, 2.0, 2.5, -1, 0, 2**64, True, 1e300,
    math.nan,
]  # fmt: skip


def _spec_paths(schema: Json, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every field below spec (list items as index 0)."""
    found = []
    for name, sub in schema.get("properties", {}).items():
        here = (*path, name)
        found.append(here)
        found += _spec_paths(sub, here)
        if isinstance(sub.get("items"), dict):
            found.append((*here, 0))
            found += _spec_paths(sub["items"], (*here, 0))
    return found


SPEC_PATHS = _spec_paths(crd.version_schema()["properties"]["spec"])


def _put(doc: Json, path: tuple[Any, ...], value: Any) -> Json:
    node: Any = doc["spec"]
    for part, nxt in itertools.pairwise(path):
        if isinstance(part, int):
            node[:] = node[:1] or [[] if isinstance(nxt, int) else {}]
            node = node[0]
        else:
            if not isinstance(node.get(part), (dict, list)):
                node[part] = [] if isinstance(nxt, int) else {}
            node = node[part]
    if isinstance(path[-1], int):
        node[:] = [value]
    else:
        node[path[-1]] = value
    return doc


def test_the_field_walk_sees_the_schema() -> None:
    assert len(SPEC_PATHS) >= 55  # 58 today
    assert ("scheduling", "tolerations", 0, "tolerationSeconds") in SPEC_PATHS


def _int_fields(obj: Any) -> list[Any]:
    if dataclasses.is_dataclass(obj):
        fields = [getattr(obj, f.name) for f in dataclasses.fields(obj) if f.type != "float"]
        return [v for f in fields for v in ([f] if isinstance(f, (int, float)) else _int_fields(f))]
    if isinstance(obj, tuple):
        return [v for item in obj for v in _int_fields(item)]
    return []


@pytest.mark.parametrize("path", SPEC_PATHS, ids=lambda p: ".".join(map(str, p)))
def test_any_value_anywhere_is_a_spec_error_or_a_spec(path: tuple[Any, ...]) -> None:
    for value in ODD_VALUES:
        try:
            parsed = spec.parse(_put(job(), path, value))
        except spec.SpecError as exc:
            assert exc.problems, (path, value)
            assert all("\n" not in p for p in exc.problems)
            assert len(str(exc).encode()) <= spec.MAX_MESSAGE_BYTES
        else:
            assert all(type(n) in (int, bool) for n in _int_fields(parsed)), (path, value)


@pytest.mark.parametrize("body", ["x", [1], None, 5, {"spec": [1]}, {"spec": {"runPolicy": "x"}}])
def test_bodies_of_any_type_are_spec_errors(body: Any) -> None:
    with pytest.raises(spec.SpecError):
        spec.parse(body)


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


def test_deep_nesting_is_one_problem_naming_the_field() -> None:
    doc = job()
    doc["spec"]["gpus"] = _nested(5000)
    with pytest.raises(spec.SpecError) as caught:
        spec.parse(doc)
    assert caught.value.problems == ["spec.gpus[0]...: nested more than 64 levels deep"]


def _alias_bomb(levels: int) -> Any:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    refs = ", ".join(["*a{}"] * 9)
    lines += [f"a{i}: &a{i} [{refs.format(*[i - 1] * 9)}]" for i in range(1, levels)]
    return yaml.safe_load("\n".join(lines))[f"a{levels - 1}"]


def test_a_yaml_alias_bomb_is_one_short_problem() -> None:
    doc = job()
    doc["spec"]["args"] = _alias_bomb(7)  # 9**7 strings once expanded, a few hundred shared
    with pytest.raises(spec.SpecError) as caught:
        spec.parse(doc)
    assert caught.value.problems == [f"spec.args: more than {structural.MAX_VALUES} values"]


def test_a_yaml_alias_loop_is_one_problem() -> None:
    loop: list[Any] = []
    loop.append(loop)
    doc = job()
    doc["spec"]["args"] = loop
    with pytest.raises(spec.SpecError) as caught:
        spec.parse(doc)
    assert caught.value.problems == ["spec.args[0]: contains itself (a YAML alias loop)"]


def test_shared_but_acyclic_values_are_fine() -> None:
    flags = ["--model-type=transformer"]
    doc = job(compilerFlags=flags)
    doc["spec"]["args"] = flags
    assert errors_of(doc) == []


# --- messages stay small ----------------------------------------------------------------------


def test_each_problem_is_cut_to_one_kib_on_one_line() -> None:
    exc = spec.SpecError(["spec.env: " + "x" * 5000, "two\nlines"])
    first, second = exc.problems
    assert len(first.encode()) == spec.MAX_PROBLEM_BYTES and first.endswith("...")
    assert second == "two lines"


def test_all_problems_together_stay_within_four_kib() -> None:
    exc = spec.SpecError([f"problem {i}: " + "é" * 700 for i in range(40)])
    assert len(str(exc).encode()) <= spec.MAX_MESSAGE_BYTES
    assert exc.problems[-1].startswith("... and ") and exc.problems[-1].endswith("more problems")
    counted = int(exc.problems[-1].split()[2])
    assert len(exc.problems) - 1 + counted == 40


def test_few_short_problems_are_kept_as_they_are() -> None:
    assert spec.SpecError(["a: bad", "b: worse"]).problems == ["a: bad", "b: worse"]


def test_a_rejected_huge_env_gives_a_small_message() -> None:
    env = [{"name": f"V{i}", "value": "v" * 32768} for i in range(129)]  # one too many
    with pytest.raises(spec.SpecError) as caught:
        spec.parse(job(env=env))
    assert len(str(caught.value).encode()) <= spec.MAX_MESSAGE_BYTES
    assert caught.value.problems[0].startswith("spec.env: ")
