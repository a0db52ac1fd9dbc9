"""`trainium data TOOL`: the synthetic-data tools, with the trainer's own flags."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from trainium_operator.cli.usage import CommandError, Parser

DATA_EXAMPLES = """\
examples:
  trainium data synth-bert --out runs/bert-synth --shards 4 --seq-len 64\
"""


def data_parser() -> argparse.ArgumentParser:
    """`trainium data TOOL`: the synthetic-data tools (the trainer's own flags)."""
    from trainium_trainer import synth

    p = Parser(
        prog="trainium data",
        description="Data tools: synthetic BERT phase-1 shards for tests and `trainium run`.",
        epilog=DATA_EXAMPLES,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    tools = p.add_subparsers(dest="tool", metavar="TOOL")
    bert = tools.add_parser("synth-bert", help=synth.DESCRIPTION, description=synth.DESCRIPTION)
    synth.add_arguments(bert)
    return p


def cmd_data(argv: Sequence[str]) -> int:
    """Synthetic data for tests and the local run (--help needs none of the trainer's packages)."""
    p = data_parser()
    args = p.parse_args(list(argv))
    if args.tool is None:
        p.error("a tool is required: synth-bert")
    from trainium_trainer import synth

    try:
        return synth.run(args)
    except ImportError as exc:  # numpy and h5py come with the [trainer] extra
        raise CommandError(f"trainium data needs the trainer's packages ({exc})") from exc
