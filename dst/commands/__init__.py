"""Commands beyond the core ones (``list``, ``replay``, ``show``), one module each.

Each module here defines a click command named ``command``, and is imported only
when that command runs (or its ``--help`` is asked for): ``dst --help`` lists
every command from ``COMMANDS``, which holds the first paragraph of each one's
help (what click shortens to the one line of the list), so that listing them
imports none of them.  A new command is a new module and a row here;
tests/test_startup.py checks that the two agree.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import click

#: Command name (its module's name) -> the first paragraph of its help.
COMMANDS: dict[str, str] = {
    "check": "Check that SCENARIO's default config passes and its planted bugs are still "
             "found.",
    "conformance": "Check that SPEC and the real code agree, invariant by invariant, row by "
                   "row.",
    "explore": "Run every schedule of SCENARIO within bounds: a proof, or the shortest trace.",
    "pin": "Copy the failing TRACE into the regression corpus, with a note.",
    "run": "Run SCENARIO over many seeds and report every invariant violated.",
    "runs": "List the runs recorded in OUT/results.sqlite: when, what, how far, what failed.",
    "shrink": "Shrink a failing TRACE to the shortest story that breaks the same invariant.",
    "specs": "TLA+ specs of the shipped protocols (specs/), checked by TLC.",
    "table": "Verdict table of SCENARIO: every combination of some switches, found by "
             "running.",
}


def load(name: str) -> click.Command:
    """The command ``name`` of ``COMMANDS``, its module imported now."""
    command: click.Command = importlib.import_module(f"{__name__}.{name}").command
    return command
