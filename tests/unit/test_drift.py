"""Facts that appear twice stay equal: CRD vs spec dataclasses, instance table, trainer contract."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
from support import TRAINER_SRC, example_spec

from trainium_operator.api import crd, spec
from trainium_operator.api.instances import INSTANCE_TYPES
from trainium_operator.manifests import appdef, builders
from trainium_trainer import config, contract

Json = dict[str, Any]


def _spec_schema() -> Json:
    schema: Json = crd.version_schema()["properties"]["spec"]
    return schema


#: CRD property path -> the dataclass that models that object.
MODELS: dict[str, type] = {
    "spec": spec.TrainiumJobSpec,
    "spec.storage": spec.Storage,
    "spec.storage.fsx": spec.Fsx,
    "spec.cache": spec.Cache,
    "spec.precompile": spec.Precompile,
    "spec.elastic": spec.Elastic,
    "spec.stragglers": spec.Stragglers,
    "spec.scheduling": spec.Scheduling,
    "spec.scheduling.placement": spec.Placement,
    "spec.resources": spec.Resources,
    "spec.runPolicy": spec.RunPolicy,
    "spec.env[]": spec.EnvVar,
}


def _schema_at(path: str) -> Json:
    node = {"properties": {"spec": _spec_schema()}}
    for part in path.split("."):
        node = node["properties"][part.removesuffix("[]")]
        if part.endswith("[]"):
            node = node["items"]
    return node


def _has_default(f: dataclasses.Field[Any]) -> bool:
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def test_every_nested_object_of_the_crd_spec_has_a_model() -> None:
    def objects(node: Json, path: str) -> set[str]:
        found = set()
        for name, sub in node.get("properties", {}).items():
            here = f"{path}.{name}"
            target = sub["items"] if sub.get("type") == "array" else sub
            key = here + "[]" if sub.get("type") == "array" else here
            if target.get("type") == "object" and "properties" in target:
                found.add(key)
                found |= objects(target, key)
        return found

    modelled = set(MODELS) - {"spec"}
    # Opaque objects: passed through as dicts, not modelled field by field.
    opaque = {"spec.resources.requests", "spec.resources.limits", "spec.scheduling.tolerations[]"}
    assert objects(_spec_schema(), "spec") == modelled | opaque


@pytest.mark.parametrize("path", list(MODELS))
def test_dataclass_fields_are_exactly_the_crd_properties(path: str) -> None:
    schema = _schema_at(path)
    fields = {f.name for f in dataclasses.fields(MODELS[path])}
    assert fields == set(schema["properties"]), path


@pytest.mark.parametrize("path", list(MODELS))
def test_required_crd_fields_have_no_dataclass_default(path: str) -> None:
    schema = _schema_at(path)
    required = set(schema.get("required", []))
    for f in dataclasses.fields(MODELS[path]):
        assert _has_default(f) == (f.name not in required), f"{path}.{f.name}"


@pytest.mark.parametrize("path", list(MODELS))
def test_dataclass_defaults_equal_the_crd_defaults(path: str) -> None:
    schema = _schema_at(path)
    for f in dataclasses.fields(MODELS[path]):
        prop = schema["properties"][f.name]
        if not _has_default(f):
            continue
        default = _default(f)
        where = f"{path}.{f.name}"
        if "default" not in prop:
            # Absent in the API object: the model's default must mean "not set".
            assert default in (None, "", (), [], {}) or dataclasses.is_dataclass(default), where
        elif dataclasses.is_dataclass(default):
            # An object default ({}): the model's default is the object the CRD's own
            # nested defaults produce.
            model: Any = type(default)
            assert default == model(**crd.apply_defaults(prop["default"], prop)), where
        else:
            assert default == prop["default"], where
            assert type(default) is type(prop["default"]), where


def test_the_defaulted_crd_and_the_dataclass_defaults_give_the_same_spec() -> None:
    minimal = {"image": "i", "instanceType": "trn1.32xlarge", "storage": {"claimName": "c"}}
    parsed = spec.parse({"spec": minimal})
    by_model = spec.TrainiumJobSpec(
        image="i", instanceType="trn1.32xlarge", storage=spec.Storage(claimName="c")
    )
    assert parsed == by_model


# --- the instance table -----------------------------------------------------------------------


def test_instance_type_enum_is_the_instance_table() -> None:
    assert _spec_schema()["properties"]["instanceType"]["enum"] == list(INSTANCE_TYPES)


def _nproc_rule() -> Json:
    rules = [r for r in _spec_schema()["x-kubernetes-validations"] if "nprocPerNode" in r["rule"]]
    rules = [r for r in rules if "instanceType" in r["rule"] and "elastic" not in r["rule"]]
    assert len(rules) == 1
    return rules[0]


def test_cel_nproc_map_is_the_physical_cores_of_the_instance_table() -> None:
    """Every {type: cores}[self.instanceType] map (nprocPerNode's, spec.elastic's) is the table."""
    maps = [
        m.group(1)
        for r in _spec_schema()["x-kubernetes-validations"]
        for m in re.finditer(r"\{([^}]*)\}\s*\[\s*self\.instanceType\s*\]", r["rule"])
    ]
    assert re.search(r"\{([^}]*)\}\s*\[\s*self\.instanceType\s*\]", _nproc_rule()["rule"])
    assert len(maps) >= 3, "no {type: cores}[self.instanceType] map literal in the rules"
    for found in maps:
        pairs = re.findall(r"'([^']+)'\s*:\s*(\d+)", found)
        assert {name: int(cores) for name, cores in pairs} == {
            name: t.physical_cores for name, t in INSTANCE_TYPES.items()
        }


def test_cel_nproc_message_lists_the_same_cores() -> None:
    pairs = re.findall(r"([a-z0-9]+\.[0-9]*xlarge): (\d+)", _nproc_rule()["message"])
    assert {n: int(c) for n, c in pairs} == {n: t.physical_cores for n, t in INSTANCE_TYPES.items()}


def test_nproc_maximum_admits_every_instance_type() -> None:
    nproc = _spec_schema()["properties"]["nprocPerNode"]
    assert nproc["maximum"] >= max(t.logical_cores(1) for t in INSTANCE_TYPES.values())


def test_lnc_bounds_are_the_lncs_of_the_families() -> None:
    lnc = _spec_schema()["properties"]["lnc"]
    lncs = {n for t in INSTANCE_TYPES.values() for n in t.family.lncs}
    assert (lnc["minimum"], lnc["maximum"]) == (min(lncs), max(lncs))


def test_backend_enum_is_the_contracts_backends() -> None:
    assert _spec_schema()["properties"]["backend"]["enum"] == list(contract.BACKENDS)
    assert {b for t in INSTANCE_TYPES.values() for b in t.family.backends} == set(contract.BACKENDS)


def _accepted(instance: str, **fields: Any) -> bool:
    body = {"image": "i", "instanceType": instance, "storage": {"claimName": "c"}, **fields}
    return crd.validate({"spec": body})[1] == []


@pytest.mark.parametrize("name", list(INSTANCE_TYPES))
def test_the_crd_allows_exactly_the_backends_and_lncs_of_the_family(name: str) -> None:
    """The CEL rules name families by prefix (trn1...); the table decides, per instance type."""
    family = INSTANCE_TYPES[name].family
    for backend in contract.BACKENDS:
        assert _accepted(name, backend=backend) == (backend in family.backends), backend
    for lnc in (1, 2):
        assert _accepted(name, lnc=lnc) == (lnc in family.lncs), lnc


@pytest.mark.parametrize("name", list(INSTANCE_TYPES))
def test_the_crd_nproc_limit_is_the_logical_cores_at_each_lnc(name: str) -> None:
    """At the family's default LNC (lnc unset) and at each LNC it supports."""
    t = INSTANCE_TYPES[name]
    assert _accepted(name, nprocPerNode=t.neuron_cores)
    assert not _accepted(name, nprocPerNode=t.neuron_cores + 1)
    for lnc in t.family.lncs:
        assert _accepted(name, lnc=lnc, nprocPerNode=t.logical_cores(lnc))
        assert not _accepted(name, lnc=lnc, nprocPerNode=t.logical_cores(lnc) + 1)


def test_the_default_nproc_is_the_logical_cores_at_the_jobs_lnc() -> None:
    trn2 = {"image": "i", "instanceType": "trn2.48xlarge", "storage": {"claimName": "c"}}
    assert spec.parse({"spec": trn2}).procs_per_node == 64
    assert spec.parse({"spec": {**trn2, "lnc": 1}}).procs_per_node == 128
    assert spec.parse({"spec": {**trn2, "lnc": 2}}).procs_per_node == 64


# --- the trainer contract ---------------------------------------------------------------------


def test_default_steps_arg_is_the_trainers_step_flag() -> None:
    steps_arg = _spec_schema()["properties"]["precompile"]["properties"]["stepsArg"]
    assert steps_arg["default"] == contract.MAX_STEPS_FLAG


def test_precision_enum_is_what_the_trainer_accepts() -> None:
    assert set(_spec_schema()["properties"]["precision"]["enum"]) == set(config.PRECISIONS)


def _is_trainer_env(name: str) -> bool:
    return name.startswith(("TRAINIUM_", "HF_")) or name == "NEURON_EXTRACT_GRAPHS_ONLY"


def _env_set_by_the_operator() -> set[str]:
    names: set[str] = set()
    for example in ("bert-large-pretrain.yaml", "aws-bert-script.yaml"):
        job_spec, owner = example_spec(example)
        for stage in (appdef.PRECOMPILE, appdef.TRAIN):
            vcjob = builders.build_vcjob(job_spec, owner, stage)
            for task in vcjob["spec"]["tasks"]:
                for c in task["template"]["spec"]["containers"]:
                    names |= {e["name"] for e in c["env"]}
            # The local backend's precompile stage has no neuron_parallel_compile.
            ctx = dataclasses.replace(
                builders.stage_context(job_spec, owner, stage), compile_launcher=()
            )
            names |= set(appdef.stage_env(job_spec, ctx))
    return names


def test_env_the_operator_sets_for_the_trainer_is_declared_in_the_contract() -> None:
    set_for_trainer = {n for n in _env_set_by_the_operator() if _is_trainer_env(n)}
    # Users' own env is excluded: the examples only add HF_HUB_OFFLINE, which is declared.
    assert set_for_trainer <= set(contract.TRAINER_ENV)
    assert set(contract.TRAINER_ENV) <= set_for_trainer, "declared but never set by the operator"


def _contract_constants() -> dict[str, str]:
    return {k: v for k, v in vars(contract).items() if k.isupper() and isinstance(v, str)}


def _env_name(node: ast.expr, path: Path) -> str:
    """The env var name an os.environ/os.getenv argument stands for."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "contract"
    ):
        return str(getattr(contract, node.attr))
    if isinstance(node, ast.Name) and node.id in _contract_constants():
        return _contract_constants()[node.id]
    raise AssertionError(f"{path.name}:{node.lineno}: env name {ast.unparse(node)} not resolvable")


def _is_os_environ(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "environ"
        and isinstance(node.value, ast.Name)
        and node.value.id == "os"
    )


def _env_reads(path: Path) -> list[str]:
    """Names the module reads through os.environ.get/[]/in and os.getenv."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            func = node.func
            if (func.attr in ("get", "pop", "setdefault") and _is_os_environ(func.value)) or (
                func.attr == "getenv" and isinstance(func.value, ast.Name) and func.value.id == "os"
            ):
                names.append(_env_name(node.args[0], path))
        elif isinstance(node, ast.Subscript) and _is_os_environ(node.value):
            names.append(_env_name(node.slice, path))
        elif isinstance(node, ast.Compare) and any(_is_os_environ(c) for c in node.comparators):
            names.append(_env_name(node.left, path))
    return names


TRAINER_MODULES = sorted(p for p in TRAINER_SRC.glob("*.py") if p.name != "contract.py")


def test_the_trainer_sources_are_found() -> None:
    assert {"config.py", "__main__.py"} <= {p.name for p in TRAINER_MODULES}


@pytest.mark.parametrize("path", TRAINER_MODULES, ids=lambda p: p.name)
def test_trainer_env_reads_are_declared_in_the_contract(path: Path) -> None:
    declared = set(_contract_constants().values())
    for name in _env_reads(path):
        assert name in declared, f"{path.name} reads {name}, not declared in contract.py"
        if name.startswith("TRAINIUM_"):  # set for every job, or for elastic ones only
            assert name in (*contract.TRAINER_ENV, *contract.ELASTIC_ENV), f"{path.name}: {name}"


@pytest.mark.parametrize("path", TRAINER_MODULES, ids=lambda p: p.name)
def test_trainer_has_no_undeclared_trainium_literals(path: Path) -> None:
    literals = set(re.findall(r"""["'](TRAINIUM_[A-Z0-9_]+)["']""", path.read_text("utf-8")))
    assert literals <= {*contract.TRAINER_ENV, *contract.ELASTIC_ENV}, path.name


def test_env_read_scanner_finds_every_form(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import os\nfrom trainium_trainer import contract\n"
        "a = os.environ.get('TRAINIUM_A')\nb = os.environ['TRAINIUM_B']\n"
        "c = os.getenv(contract.ENV_STAGE)\nd = 'TRAINIUM_D' in os.environ\n",
        encoding="utf-8",
    )
    assert _env_reads(probe) == ["TRAINIUM_A", "TRAINIUM_B", contract.ENV_STAGE, "TRAINIUM_D"]


# --- CEL rules and the fields they name -------------------------------------------------------


def _rules(schema: Json) -> list[str]:
    found = [r["rule"] for r in schema.get("x-kubernetes-validations", [])]
    for sub in schema.get("properties", {}).values():
        found += _rules(sub)
    return found + (_rules(schema["items"]) if "items" in schema else [])


def _property_names(schema: Json) -> set[str]:
    names = set(schema.get("properties", {}))
    for sub in schema.get("properties", {}).values():
        names |= _property_names(sub)
    return names | (_property_names(schema["items"]) if "items" in schema else set())


def test_cel_rules_name_only_fields_the_crd_has_as_cel_spells_them() -> None:
    root = crd.version_schema()
    spelled = {crd.cel_field(name) for name in _property_names(root)}
    rules = _rules(root)
    assert len(rules) >= 20
    for rule in rules:
        code = re.sub(crd.CEL_STRING_LITERAL, "''", rule)  # text in literals is not a field
        for field in re.findall(r"\.([A-Za-z_][A-Za-z0-9_]*)\b(?!\s*\()", code):
            assert field in spelled, f"{field} in {rule}"


def test_memory_units_of_the_rule_are_the_units_of_the_pattern() -> None:
    resources = _spec_schema()["properties"]["resources"]
    pattern = resources["properties"]["requests"]["properties"]["memory"]["pattern"]
    match = re.search(r"\(([A-Za-z|]+)\)\?\$$", pattern)
    assert match, pattern
    (rule,) = [
        r["rule"] for r in resources["x-kubernetes-validations"] if "endsWith(u)" in r["rule"]
    ]
    in_rule = re.search(r"\[('[A-Za-z]+'(?:, '[A-Za-z]+')*)\]\.all", rule)
    assert in_rule, rule
    assert re.findall(r"'([A-Za-z]+)'", in_rule.group(1)) == match.group(1).split("|")
