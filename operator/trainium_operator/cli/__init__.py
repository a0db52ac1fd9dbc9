"""`trainium render | run | logs | operator | data`: argument parsing only, one module a command."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Sequence

from trainium_operator import __version__
from trainium_operator.cli import local, logs
from trainium_operator.cli.usage import CommandError, Parser
from trainium_operator.local.render import UsageError

DESCRIPTION = """\
trainium: run PyTorch training on AWS Trainium from one TrainiumJob.
`render` prints offline the manifests the operator would create for a job, `run` trains a job on
this machine through the same lifecycle (TorchX's local scheduler), `operator` runs the
Kubernetes operator (kopf), `logs` prints a job's pod logs with node and rank, `data` makes
synthetic data.\
"""
EXAMPLES = """\
examples:
  trainium render -f examples/bert-large-pretrain.yaml > manifests.yaml
  trainium run -f examples/local-tiny-bert.yaml
  trainium logs bert-large-pretrain --rank 0 -f
  trainium operator --standalone --all-namespaces\
"""
Command = Callable[[argparse.Namespace], int]
#: The commands `parser()` parses, and what runs each; `operator` and `data` parse their own.
COMMANDS: dict[str, Command] = {
    "render": local.cmd_render,
    "run": local.cmd_run,
    "logs": logs.cmd_logs,
}


def parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The `trainium` command line, and the parser of each command it parses."""
    p = Parser(
        prog="trainium",
        description=DESCRIPTION,
        epilog=EXAMPLES,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"trainium {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    commands = {
        "render": local.add_render(sub),
        "run": local.add_run(sub),
        "logs": logs.add_logs(sub),
    }
    sub.add_parser("operator", help="run the operator (`trainium operator --help`)", add_help=False)
    sub.add_parser("data", help="data tools: synth-bert (`trainium data --help`)", add_help=False)
    return p, commands


def parse(argv: list[str]) -> argparse.Namespace:
    """argv parsed; a flag a command does not know points at that command's help."""
    p, commands = parser()
    args, unknown = p.parse_known_args(argv)
    if args.command is None:
        p.error("a command is required: render, run, logs, operator or data")
    if unknown:
        after = argv.index(unknown[0]) > argv.index(args.command)
        (commands[args.command] if after else p).error(
            f"unrecognized arguments: {' '.join(unknown)}"
        )
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `trainium` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        try:
            return _command(argv)
        finally:  # (--help's SystemExit too) what is still buffered meets a closed pipe here
            sys.stdout.flush()
    except BrokenPipeError:
        return closed_pipe()


def closed_pipe() -> int:
    """stdout's reader left (`| head -1`): end quietly with SIGPIPE's shell code, as kubectl."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's own flush at exit finds no pipe
    return 128 + signal.SIGPIPE


def _command(argv: list[str]) -> int:
    """Run one command; a usage mistake is one `error:` line and 2, a failed command 1."""
    try:
        if argv[:1] == ["operator"]:
            from trainium_operator.cli import operator

            return operator.cmd_operator(argv[1:])
        if argv[:1] == ["data"]:
            from trainium_operator.cli import data

            return data.cmd_data(argv[1:])
        args = parse(argv)
        return int(COMMANDS[args.command](args))
    except UsageError as exc:
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        return 2
    except CommandError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
