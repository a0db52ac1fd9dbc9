"""`trainium render | run | operator | data`: argument parsing only, then the shared code paths."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from trainium_operator import fsx, render
from trainium_operator.render import UsageError

Json = dict[str, Any]

DESCRIPTION = """\
trainium: run PyTorch training on AWS Trainium from one TrainiumJob.
`render` prints offline the manifests the operator would create for a job, `run` trains a job on
this machine through the same lifecycle (TorchX's local scheduler), `operator` runs the
Kubernetes operator (kopf), `data` makes synthetic data.\
"""
EXAMPLES = """\
examples:
  trainium render -f examples/bert-large-pretrain.yaml > manifests.yaml
  trainium run -f examples/local-tiny-bert.yaml
  trainium operator --standalone --all-namespaces\
"""


def cmd_render(args: argparse.Namespace) -> int:
    """Print the manifests of every job in the file as one stream; notes go to stderr."""
    lookup = fsx.describe if args.fsx_lookup else None
    rendered = [render.render_job(doc, lookup) for doc in render.load_jobs(args.filename)]
    out = [render.strip_unknown_owner(m) for r in rendered for m in r.manifests]
    for note in (n for r in rendered for n in r.notes):
        print(f"note: {note}", file=sys.stderr)
    if args.output == "json":
        print(json.dumps({"apiVersion": "v1", "kind": "List", "items": out}, indent=2))
    else:
        print(yaml.safe_dump_all(out, sort_keys=False), end="")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """Run a job on this machine through TorchX's local scheduler."""
    from trainium_operator import local

    docs = render.load_jobs(args.filename)
    for doc in docs:
        render.checked(doc)
    runs = Path(args.runs_dir)
    # The file is read again while each job runs: a change of runPolicy.suspend is followed.
    follow = [local.follow_file(args.filename, d["metadata"]["name"]) for d in docs]
    ok = all(local.run(doc, runs, args.quiet, f) for doc, f in zip(docs, follow, strict=True))
    return 0 if ok else 1


def cmd_operator(argv: Sequence[str]) -> int:
    """`kopf run` of our handlers with the user's kopf options."""
    import kopf.cli

    from trainium_operator import footprint
    from trainium_operator.runtime import kopfpause

    footprint.cap_malloc_arenas()
    kopfpause.install()  # before kopf spawns its tasks: our passes pause when kopf does
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
    p = argparse.ArgumentParser(
        prog="trainium",
        description=DESCRIPTION,
        epilog=EXAMPLES,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("render", help="print the manifests the operator would create (offline)")
    r.add_argument("-f", "--filename", required=True, help="TrainiumJob YAML file, or - for stdin")
    r.add_argument("-o", "--output", choices=["yaml", "json"], default="yaml")
    r.add_argument(
        "--fsx-lookup",
        action="store_true",
        help="look up FSx dnsName/mountName with your AWS credentials (fsx:DescribeFileSystems)",
    )
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
