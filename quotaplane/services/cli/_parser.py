"""The ``quotaplane`` command line's parser: one subcommand per concern, each added by its own module.

Built in one place so ``--help`` lists every command and so tests (and documentation tools) can parse a
command line without running it.
"""

from __future__ import annotations

import argparse

from quotaplane import __version__

from ._admin import add_admin_commands
from ._demo import add_demo_command
from ._spark import add_spark_commands
from ._top import add_top_command
from ._up import add_up_command

__all__ = ["build_parser"]

#: The parser's description: the first line of the package's docstring.
_DESCRIPTION = "The ``quotaplane`` command line."


def build_parser() -> argparse.ArgumentParser:
    """Every ``quotaplane`` subcommand, its options and the name of the command chosen (``args.command``)."""
    parser = argparse.ArgumentParser(prog="quotaplane", description=_DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"quotaplane {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_demo_command(commands)
    add_admin_commands(commands)
    add_up_command(commands)
    add_spark_commands(commands)
    add_top_command(commands)
    return parser
