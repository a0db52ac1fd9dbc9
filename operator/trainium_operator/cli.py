"""`trainium render | run | operator | data`: argument parsing only, then the shared code paths."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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
        print(render.dump_all(out), end="")
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


OPERATOR_DESCRIPTION = """\
Run the operator against the current kubeconfig (or the in-cluster service account): it watches
TrainiumJobs and drives their storage, compile cache and Volcano jobs (kopf underneath).
Run one process with --standalone, or several with --peering=NAME (one acts, the others wait).\
"""
OPERATOR_EXAMPLES = """\
examples:
  trainium operator --standalone --all-namespaces
  trainium operator --peering=trainium -n team-a -n team-b --liveness=http://0.0.0.0:8080/healthz\
"""


def operator_parser() -> argparse.ArgumentParser:
    """`trainium operator`: kopf's run options we support, by our names (no module paths)."""
    p = argparse.ArgumentParser(
        prog="trainium operator",
        allow_abbrev=False,  # --standalon must not pass for --standalone
        description=OPERATOR_DESCRIPTION,
        epilog=OPERATOR_EXAMPLES,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    who = p.add_mutually_exclusive_group()
    who.add_argument("--standalone", action="store_true", help="the only operator: no peering")
    who.add_argument("-P", "--peering", metavar="NAME", help="coordinate with peers in NAME")
    where = p.add_mutually_exclusive_group()
    where.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace")
    where.add_argument(
        "-n", "--namespace", action="append", default=[], help="watch this namespace (repeatable)"
    )
    p.add_argument(
        "-L", "--liveness", metavar="URL", help="serve /healthz, e.g. http://0.0.0.0:8080/healthz"
    )
    p.add_argument("-p", "--priority", type=int, help="this process's priority among peers")
    p.add_argument("--dev", action="store_true", help="development mode: peering priority 666")
    level = p.add_mutually_exclusive_group()
    for short, name in (("-v", "verbose"), ("-d", "debug"), ("-q", "quiet")):
        level.add_argument(short, f"--{name}", action="store_true", help=f"{name} logging")
    p.add_argument("--log-format", choices=["plain", "full", "json"], help="log line format")
    p.add_argument("--log-refkey", metavar="KEY", help="JSON logs: the key of the object reference")
    p.add_argument("--log-prefix", action=argparse.BooleanOptionalAction, default=None,
                   help="prefix log lines with the object they are about")  # fmt: skip
    return p


def kopf_argv(argv: Sequence[str]) -> list[str]:
    """Our operator flags as `kopf run` arguments for our handlers module."""
    a = operator_parser().parse_args(list(argv))
    out = ["run", "-m", "trainium_operator.handlers"]
    flags = ("standalone", "all_namespaces", "dev", "verbose", "debug", "quiet")
    out += [f"--{f.replace('_', '-')}" for f in flags[:2] if getattr(a, f)]
    out += [f"--peering={a.peering}"] if a.peering else []
    out += [f"--namespace={ns}" for ns in a.namespace]
    out += [f"--{f}" for f in flags[2:] if getattr(a, f)]
    for name in ("liveness", "priority", "log_format", "log_refkey"):
        if getattr(a, name) is not None:
            out.append(f"--{name.replace('_', '-')}={getattr(a, name)}")
    if a.log_prefix is not None:
        out.append("--log-prefix" if a.log_prefix else "--no-log-prefix")
    return out


def cmd_operator(argv: Sequence[str]) -> int:
    """`kopf run` of our handlers with the user's options (parsed here: --help is ours)."""
    args = kopf_argv(argv)
    import kopf.cli

    from trainium_operator import footprint

    footprint.cap_malloc_arenas()
    kopf.cli.main(args=args, prog_name="trainium operator")
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
    sub.add_parser("operator", help="run the operator (`trainium operator --help`)", add_help=False)
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
