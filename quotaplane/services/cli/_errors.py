"""How a command fails: one ``Error:`` line on stderr and an exit code, never a traceback.

Scripts branch on the exit code, so it says what kind of failure it was: 1 for a request Kafka (or the
tool) refuses, 2 for usage errors (argparse's own), 3 when the admin service cannot be reached.
"""

from __future__ import annotations

__all__ = ["EXIT_REFUSED", "EXIT_UNREACHABLE", "CliError"]

EXIT_REFUSED, EXIT_UNREACHABLE = 1, 3


class CliError(Exception):
    """A request refused by the service or by the tool's own checks: ``Error: <message>``, exit 1."""
