"""What every `trainium` command shares: one-line usage mistakes and one-line failures."""

from __future__ import annotations

import argparse
from typing import NoReturn, TypeAlias


class Parser(argparse.ArgumentParser):
    """Usage mistakes as one line, as kubectl and helm print them: what, and where help is."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


class CommandError(Exception):
    """A command that could not do its work (no cluster, no access): one line, exit code 1."""


#: What `add_subparsers()` returns (argparse keeps the class's name private).
Subcommands: TypeAlias = "argparse._SubParsersAction[Parser]"
