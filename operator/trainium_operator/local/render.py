"""Offline rendering for `trainium render` and `trainium run`: load, check, build manifests.

Input is untrusted YAML: its size, nesting and alias expansion are bounded before it is built,
so an alias bomb or a deeply nested file gets one error line instead of a hang or a traceback.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from trainium_operator.api import naming, structural
from trainium_operator.api.crd import GROUP, KIND, VERSION, version_schema
from trainium_operator.api.spec import SpecError, TrainiumJobSpec, parse
from trainium_operator.cluster import fsx
from trainium_operator.local import kubeyaml
from trainium_operator.manifests import builders, dra, workload
from trainium_operator.manifests.ownership import Owner

Json = dict[str, Any]

#: The API server refuses request bodies over 3 MiB; a TrainiumJob file has no reason to be larger.
MAX_BYTES = 3 * 1024 * 1024
#: Far deeper than any TrainiumJob (about 10 levels); Python's recursion would fail near 1,000.
MAX_DEPTH = 100
#: Nodes after alias expansion: a real job has hundreds; a "billion laughs" file has 10**9.
MAX_NODES = 100_000
API_VERSION = f"{GROUP}/{VERSION}"

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL.pattern}(\.{_DNS_LABEL.pattern})*")


class UsageError(Exception):
    """Bad input: printed as one line per problem, never as a traceback."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass
class Rendered:
    """The manifests of one job, and notes (for stderr) about what could not be rendered."""

    manifests: list[Json] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _read(path: str) -> str:
    try:
        if path == "-":
            text = sys.stdin.read(MAX_BYTES + 1)
        else:
            with Path(path).open(encoding="utf-8") as f:
                text = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise UsageError([f"{path}: {exc.strerror}"]) from None
    except UnicodeDecodeError:
        raise UsageError([f"{path}: not UTF-8 text"]) from None
    if len(text) > MAX_BYTES:
        raise UsageError([f"{path}: larger than {MAX_BYTES // (1024 * 1024)} MiB"])
    return text


def check_shape(text: str) -> None:
    """Refuse deep nesting, recursive aliases and alias expansion beyond MAX_NODES.

    Walks the parser's event stream (iterative, nothing built), counting expanded nodes.
    """
    size: dict[str, int] = {}  # anchor -> nodes it expands to
    open_: list[tuple[str | None, int]] = []  # collections being read: (anchor, count at start)
    count = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.ScalarEvent):
            count += 1
            if event.anchor:
                size[event.anchor] = 1
        elif isinstance(event, yaml.CollectionStartEvent):
            open_.append((event.anchor, count))
            count += 1
            if len(open_) > MAX_DEPTH:
                raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
        elif isinstance(event, yaml.CollectionEndEvent):
            anchor, start = open_.pop()
            if anchor:
                size[anchor] = count - start
        elif isinstance(event, yaml.AliasEvent):
            if any(anchor == event.anchor for anchor, _ in open_):
                raise ValueError(f"alias *{event.anchor} refers to itself")
            count += size.get(event.anchor or "", 1)
        if count > MAX_NODES:
            raise ValueError(f"expands to more than {MAX_NODES:,} nodes (YAML aliases)")


class StrictLoader(kubeyaml.KubectlLoader):
    """kubectl's scalar types, refusing a key given twice in one mapping (PyYAML keeps the last).

    Merge keys (`<<: *base`) may still be overridden: that is what they are for.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[Any, yaml.Node] = {}
        for key_node, _value in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (str, int, float, bool)) and key in first:
                line = first[key].start_mark.line + 1
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line {line})", key_node.start_mark
                )
            first.setdefault(key, key_node)
        return super().construct_mapping(node, deep=deep)


def yaml_problem(path: str, exc: yaml.YAMLError) -> str:
    """One line for a YAML error: file:line:column and what is wrong (never a bare context)."""
    if not isinstance(exc, yaml.MarkedYAMLError):
        return f"{path}: not valid YAML: {str(exc).splitlines()[0]}"
    mark = exc.problem_mark or exc.context_mark
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else path
    problem = (exc.problem or exc.context or "").replace(
        "found character '\\t' that cannot start any token",
        "found a tab: YAML indents with spaces only",
    )
    return f"{where}: not valid YAML: {problem}"


def load_yaml(text: str, path: str) -> list[Any]:
    """The documents of untrusted YAML text as kubectl sends them: bounded, no duplicate keys."""
    try:
        check_shape(text)
        docs = [d for d in yaml.load_all(text, Loader=StrictLoader) if d is not None]
        return [kubeyaml.to_json(d) for d in docs]
    except yaml.YAMLError as exc:
        raise UsageError([yaml_problem(path, exc)]) from None
    except kubeyaml.JsonError as exc:
        raise UsageError([f"{path}: {exc}"]) from None
    except ValueError as exc:
        raise UsageError([f"{path}: refused: {exc}"]) from None


def load_jobs(path: str) -> list[Json]:
    """TrainiumJob documents of a YAML file ('-' is stdin); other kinds are an error."""
    docs = load_yaml(_read(path), path)
    problems = []
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict) or doc.get("kind") != KIND:
            problems.append(f"{path}: document {i + 1} is not a {KIND}")
        elif doc.get("apiVersion") != API_VERSION:
            problems.append(
                f"{path}: document {i + 1}: apiVersion {doc.get('apiVersion')!r} "
                f"is not served; use {API_VERSION}"
            )
    if not docs:
        problems.append(f"{path}: no {KIND} found")
    if problems:
        raise UsageError(problems)
    return docs


def _metadata_problems(meta: Any) -> list[str]:
    """What the API server would say about metadata: a name and namespace it accepts."""
    if meta is None:
        return ["metadata.name: required"]
    if not isinstance(meta, dict):
        return ["metadata: must be a mapping with a name"]
    name, namespace = meta.get("name"), meta.get("namespace") or "default"
    problems = []
    if not name:
        problems.append("metadata.name: required")
    elif not isinstance(name, str) or len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        problems.append(
            f"metadata.name: {name!r} must be a lowercase DNS subdomain of at most 253 characters"
        )
    if not isinstance(namespace, str) or len(namespace) > 63 or not _DNS_LABEL.fullmatch(namespace):
        problems.append(f"metadata.namespace: {namespace!r} must be a lowercase DNS label")
    return problems


def checked(doc: Json) -> tuple[TrainiumJobSpec, Owner]:
    """Validate one document like the API server and the operator do."""
    problems = _metadata_problems(doc.get("metadata"))
    meta: Json = {} if problems else doc["metadata"]
    name = meta.get("name") or "<unnamed>"
    if "spec" not in doc:
        # parse() also takes a bare spec; a whole document without one would be misread as it.
        raise UsageError([*problems, f"{name}: spec: required"])
    problems += [
        f"{name}: {field}: null is refused by the API server (kubectl apply --server-side); "
        "omit the field or give it a value"
        for field in _refused_nulls(doc)
    ]
    try:
        spec = parse(doc)
    except SpecError as exc:
        raise UsageError(problems + [f"{name}: {p}" for p in exc.problems]) from None
    if problems:
        raise UsageError(problems)
    return spec, Owner(name, meta.get("namespace") or "default", meta.get("uid", ""))


def _refused_nulls(doc: Json) -> list[str]:
    """Spec fields set to null without a default (pruned on create, refused by apply)."""
    spec_schema = version_schema()["properties"]["spec"]
    spec = doc.get("spec")
    return [f"spec.{f}" for f in structural.refused_nulls(spec, spec_schema)] if spec else []


def _storage(spec: TrainiumJobSpec, owner: Owner, lookup: fsx.FsxLookup | None) -> Rendered:
    """The static FSx PV and claim; without names, looked up (lookup) or skipped with a note."""
    fs = spec.storage.fsx
    if fs is None:
        return Rendered()
    dns, mount = fs.dnsName, fs.mountName
    if not (dns and mount) and lookup is not None:
        try:
            found = lookup(fs.fileSystemId)
        except fsx.FsxLookupError as exc:
            raise UsageError([f"{owner.name}: spec.storage.fsx.fileSystemId: {exc}"]) from None
        dns, mount = dns or found.dns_name, mount or found.mount_name
    if not (dns and mount):
        pv_name = naming.volume_name(owner.namespace, owner.name)
        note = (
            f"{owner.name}: skipped PersistentVolume {pv_name} and PersistentVolumeClaim "
            f"{naming.claim_name(owner.name)}: their FSx dnsName and "
            f"mountName come from the operator's look-up of {fs.fileSystemId} "
            "(fsx:DescribeFileSystems); add --fsx-lookup to look them up now with your AWS "
            "credentials, or set spec.storage.fsx.dnsName and mountName"
        )
        return Rendered(notes=[note])
    volume = builders.build_fsx_volume(spec, owner, dns, mount)
    return Rendered([volume, builders.build_fsx_claim(spec, owner)])


def render_job(doc: Json, lookup: fsx.FsxLookup | None = None) -> Rendered:
    """Exactly what the operator would create for this job, in creation order: under Kueue
    (the queue-name label) each stage's Workload before its gang (the quota it asks for)."""
    spec, owner = checked(doc)
    out = _storage(spec, owner, lookup)
    stages = ["train"] if spec.precompile.policy == "Never" else ["precompile", "train"]
    if dra.uses_dra(spec):
        out.manifests.append(builders.build_claim_template(spec, owner))
    kueue = workload.opt_in((doc.get("metadata") or {}).get("labels"))
    for stage in stages:
        vcjob = builders.build_vcjob(spec, owner, stage)
        if kueue is not None:
            out.manifests.append(workload.build_workload(spec, owner, stage, kueue, vcjob))
        out.manifests.append(vcjob)
    if kueue is not None:
        out.notes += _kueue_notes(owner, kueue)
    return out


def _kueue_notes(owner: Owner, kueue: workload.Kueue) -> list[str]:
    """What a Kueue job's render cannot know offline: its uid, its class's value, its flavor."""
    notes = [
        f"{owner.name}: each Volcano job is created only once Kueue admits the Workload printed "
        "before it; the admitted ResourceFlavor's nodeLabels and tolerations are then added to "
        "its pods"
    ]
    if not owner.uid:
        notes.append(
            f"{owner.name}: Workload names carry a hash of the job's uid, which the API server "
            "gives on create: printed with an empty uid's (metadata.uid is used when given)"
        )
    if kueue.priority_class:
        notes.append(
            f"{owner.name}: spec.priority and spec.priorityClassRef of the Workloads come from "
            f"WorkloadPriorityClass {kueue.priority_class!r} on the cluster: not printed"
        )
    return notes


class _Dumper(yaml.SafeDumper):
    """PyYAML's YAML 1.1 resolver, YAML 1.2's core schema and kubectl's, used only to quote.

    A string that any of them would read as a number, bool or null is written quoted:
    `4e-4` is a string to YAML 1.1 but a float to kubectl (go-yaml v2), `y` a bool to kubectl.
    """

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is yaml.ScalarNode and implicit[0]:
            tag = kubeyaml.resolve_plain(value)[0]
            if tag != kubeyaml.STR:
                return tag
        return super().resolve(kind, value, implicit)


#: YAML 1.2 core schema (yaml.org/spec/1.2.2, 10.3.2) plain scalars that are not strings.
_YAML12_CORE = {
    "tag:yaml.org,2002:null": r"~|null|Null|NULL",
    "tag:yaml.org,2002:bool": r"true|True|TRUE|false|False|FALSE",
    "tag:yaml.org,2002:int": r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+",
    "tag:yaml.org,2002:float": (
        r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.nan|\.NaN|\.NAN"
    ),
}
for _tag, _pattern in _YAML12_CORE.items():
    _Dumper.add_implicit_resolver(_tag, re.compile(rf"^(?:{_pattern})$"), None)


def dump_all(docs: list[Json]) -> str:
    """YAML documents that YAML 1.1 and 1.2 readers both read back with the same types."""
    return str(yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False))


def strip_unknown_owner(obj: Json) -> Json:
    """Offline there is no uid: drop ownerReferences rather than print an invalid one."""
    refs = obj["metadata"].get("ownerReferences")
    if refs and not refs[0].get("uid"):
        del obj["metadata"]["ownerReferences"]
    return obj
