"""`trainium render` and `trainium run`: a job file, offline or on this machine."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from trainium_operator.cli.usage import Subcommands
from trainium_operator.cluster import fsx
from trainium_operator.local import render


def add_render(sub: Subcommands) -> argparse.ArgumentParser:
    """The `render` subcommand's flags."""
    r = sub.add_parser("render", help="print the manifests the operator would create (offline)")
    r.add_argument("-f", "--filename", required=True, help="TrainiumJob YAML file, or - for stdin")
    r.add_argument("-o", "--output", choices=["yaml", "json"], default="yaml")
    r.add_argument(
        "--fsx-lookup",
        action="store_true",
        help="look up FSx dnsName/mountName with your AWS credentials (fsx:DescribeFileSystems)",
    )
    return r


def add_run(sub: Subcommands) -> argparse.ArgumentParser:
    """The `run` subcommand's flags."""
    run = sub.add_parser("run", help="run a TrainiumJob on this machine (TorchX local scheduler)")
    run.add_argument("-f", "--filename", required=True)
    run.add_argument("--runs-dir", default="runs", help="where runs/<job>/ goes (default ./runs)")
    run.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    return run


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
        print(render.dump_all(out), end="")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """Run a job on this machine through TorchX's local scheduler."""
    from trainium_operator.local import interrupt
    from trainium_operator.local import runner as local

    docs = render.load_jobs(args.filename)
    for doc in docs:
        render.checked(doc)
    runs = Path(args.runs_dir)
    # The file is read again while each job runs: a change of runPolicy.suspend is followed.
    follow = [local.follow_file(args.filename, d["metadata"]["name"]) for d in docs]
    try:
        ok = all(local.run(doc, runs, args.quiet, f) for doc, f in zip(docs, follow, strict=True))
    except interrupt.Interrupted as stopped:  # Ctrl-C: checkpointed, status.json says so
        print(stopped, file=sys.stderr, flush=True)
        return stopped.code
    return 0 if ok else 1
