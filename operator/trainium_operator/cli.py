"""`trainium render | run | operator | data`: argument parsing only, then the shared code paths."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from trainium_operator import builders
from trainium_operator.builders import Owner
from trainium_operator.crd import GROUP, KIND
from trainium_operator.spec import SpecError, TrainiumJobSpec, parse

Json = dict[str, Any]

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL.pattern}(\.{_DNS_LABEL.pattern})*")


class UsageError(Exception):
    """Bad input: printed as one line per problem, never as a traceback."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def load_jobs(path: str) -> list[Json]:
    """TrainiumJob documents of a YAML file ('-' is stdin); other kinds are an error."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except OSError as exc:
        raise UsageError([f"{path}: {exc.strerror}"]) from None
    except yaml.YAMLError as exc:
        raise UsageError([f"{path}: not valid YAML: {str(exc).splitlines()[0]}"]) from None
    except RecursionError:  # PyYAML composes nested nodes recursively
        raise UsageError([f"{path}: nested too deeply to be a {KIND}"]) from None
    problems = []
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict) or doc.get("kind") != KIND:
            problems.append(f"{path}: document {i + 1} is not a {KIND}")
        elif not str(doc.get("apiVersion", "")).startswith(f"{GROUP}/"):
            problems.append(f"{path}: document {i + 1}: apiVersion must be {GROUP}/v1alpha1")
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
    try:
        spec = parse(doc)
    except SpecError as exc:
        raise UsageError(problems + [f"{name}: {p}" for p in exc.problems]) from None
    if problems:
        raise UsageError(problems)
    return spec, Owner(name, meta.get("namespace") or "default", meta.get("uid", ""))


def render_manifests(doc: Json) -> Iterator[Json]:
    """Exactly what the operator would create for this job, in creation order."""
    spec, owner = checked(doc)
    fs = spec.storage.fsx
    if fs and fs.dnsName and fs.mountName:
        yield builders.build_fsx_volume(spec, owner, fs.dnsName, fs.mountName)
        yield builders.build_fsx_claim(spec, owner)
    stages = ["train"] if spec.precompile.policy == "Never" else ["precompile", "train"]
    for stage in stages:
        yield builders.build_vcjob(spec, owner, stage)


def _strip_unknown_owner(obj: Json) -> Json:
    """Offline there is no uid: drop ownerReferences rather than print an invalid one."""
    refs = obj["metadata"].get("ownerReferences")
    if refs and not refs[0].get("uid"):
        del obj["metadata"]["ownerReferences"]
    return obj


def cmd_render(args: argparse.Namespace) -> int:
    """Print the manifests of every job in the file as one stream."""
    out = [
        _strip_unknown_owner(m) for doc in load_jobs(args.filename) for m in render_manifests(doc)
    ]
    if args.output == "json":
        print(json.dumps({"apiVersion": "v1", "kind": "List", "items": out}, indent=2))
    else:
        print(yaml.safe_dump_all(out, sort_keys=False), end="")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """Run a job on this machine through TorchX's local scheduler."""
    from trainium_operator import local

    docs = load_jobs(args.filename)
    for doc in docs:
        checked(doc)
    ok = all(local.run(doc, Path(args.runs_dir), quiet=args.quiet) for doc in docs)
    return 0 if ok else 1


def cmd_operator(argv: Sequence[str]) -> int:
    """`kopf run` of our handlers with the user's kopf options."""
    import kopf.cli

    kopf.cli.main(
        args=["run", "-m", "trainium_operator.handlers", *argv], prog_name="trainium operator"
    )
    return 0


def cmd_data(argv: Sequence[str]) -> int:
    """Synthetic data for tests and the local run."""
    from trainium_trainer import synth

    if not argv or argv[0] != "synth-bert":
        raise UsageError(["usage: trainium data synth-bert --out DIR [--shards N ...]"])
    return int(synth.main(list(argv[1:])) or 0)


def parser() -> argparse.ArgumentParser:
    """The `trainium` command line."""
    p = argparse.ArgumentParser(prog="trainium", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("render", help="print the manifests the operator would create (offline)")
    r.add_argument("-f", "--filename", required=True, help="TrainiumJob YAML file, or - for stdin")
    r.add_argument("-o", "--output", choices=["yaml", "json"], default="yaml")
    run = sub.add_parser("run", help="run a TrainiumJob on this machine (TorchX local scheduler)")
    run.add_argument("-f", "--filename", required=True)
    run.add_argument("--runs-dir", default="runs", help="where runs/<job>/ goes (default ./runs)")
    run.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    sub.add_parser("operator", help="run the operator (kopf run options follow)", add_help=False)
    sub.add_parser("data", help="data tools: synth-bert", add_help=False)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `trainium` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv[:1] == ["operator"]:
            return cmd_operator(argv[1:])
        if argv[:1] == ["data"]:
            return cmd_data(argv[1:])
        args = parser().parse_args(argv)
        return int({"render": cmd_render, "run": cmd_run}[args.command](args))
    except UsageError as exc:
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        return 2
