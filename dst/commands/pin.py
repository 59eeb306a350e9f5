"""``dst pin TRACE``: keep a failing trace in the regression corpus, with a note.

A bug found once should stay found until it is fixed, and stay fixed after: the
pinned trace is replayed by the test suite (dst's pytest plugin collects
``traces/regressions/*.jsonl``).  Pinning checks what the corpus relies on
before it copies anything: the trace failed, its scenario can be found (a
user's own scenario is named with ``--scenario``, and saved with the note so
that the tests can load it), and it replays identically here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

import click

from dst.errors import DstError
from dst.testing import DEFAULT_PIN_DIR, pin_trace
from dst.trace.escape import visible


def refuse(err: DstError) -> NoReturn:
    """Stop as every dst command does on bad input: ``error: ...`` in one line, its status."""
    click.echo(f"error: {' '.join(str(err).split())}", err=True)
    sys.exit(err.exit_code)


@click.command("pin")
@click.argument("trace_path", metavar="TRACE")
@click.option("--name", default=None, metavar="NAME",
              help="File name in the corpus, without .jsonl (default: SCENARIO-SEED).")
@click.option("--note", default="", metavar="TEXT",
              help="Why this trace is kept: the bug it shows, the issue it came from.")
@click.option("--dir", "directory", default=str(DEFAULT_PIN_DIR), show_default=True,
              metavar="DIR", help="The corpus directory (created if missing).")
@click.option("--scenario", "scenario_ref", default=None, metavar="REF",
              help="Where the trace's scenario lives when it is not a shipped one: a .py "
                   "file or a module; saved with the note.")
def command(trace_path: str, name: str | None, note: str, directory: str,
            scenario_ref: str | None) -> None:
    """Copy the failing TRACE into the regression corpus, with a note.

    The trace goes to DIR/NAME.jsonl and its note to DIR/NAME.json
    ({"note": ..., "scenario": ...}). A passing trace, or one that does not
    replay identically here, is refused. The tests then replay it on every run
    (pytest, with dst's plugin): identically, or with --dst-fixed, passing
    after the fix.

    \b
      dst pin traces/failures/counter-3.jsonl --note "lost update under blind put"
      dst pin traces/failures/bank-7.jsonl --scenario bank.py --name bank-overdraft
    """
    try:
        pin, new = pin_trace(trace_path, name=name, note=note, directory=directory,
                             scenario=scenario_ref)
    except DstError as err:
        refuse(err)
    except Exception as exc:  # the scenario's setup or a check raised as the trace replayed
        from dst.cli import _load_trace, scenario_broke

        try:
            trace, scen = _load_trace(trace_path, scenario_ref)
        except DstError as err:
            refuse(err)
        refuse(scenario_broke(exc, scen, trace, scenario_ref))
    if not new:
        click.echo(f"already pinned: {visible(str(pin.path))} holds this trace")
        return
    click.echo(f"pinned {visible(str(pin.path))}; note in {visible(str(pin.sidecar))}; "
               f"{_where_pytest_finds(pin.path.parent)}")


def _where_pytest_finds(directory: Path) -> str:
    """Whether a plain ``pytest`` run here collects the pins of ``directory``, in words."""
    from dst.project import pin_dirs
    from dst.registry import shown_path

    dirs, rootdir, ini = pin_dirs(".")
    if directory.resolve() in [d.resolve() for d in dirs]:
        return "pytest replays it on every run"
    looks = ", ".join(visible(shown_path(str(d))) for d in dirs)
    why = f"dst_traces of {visible(shown_path(str(ini.path)))}" if ini is not None \
        and ini.paths("dst_traces") else f"its rootdir is {visible(str(rootdir))}"
    return (f"but a plain pytest run here collects pins from {looks} ({why}), not "
            f"from {visible(shown_path(str(directory)))}: replay it with `pytest "
            f"{visible(shown_path(str(directory)))}`, or pin it with --dir "
            f"{visible(shown_path(str(dirs[0])))}")
