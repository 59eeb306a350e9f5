"""``dst runs``: the past runs recorded in a results database, newest last.

Every ``dst run`` adds a row to the database under its ``--out`` when it starts
and updates it with each chunk of seeds, so the list shows a run still going,
one that ended, and one that was killed before it could say so (its row still
says running while its process is gone).
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
from pathlib import Path
from typing import Any

import click

from ..errors import UsageError
from ..runner.results import DB_NAME, ResultsDB, RunRow
from ..trace.escape import visible


def _alive(row: RunRow) -> bool:
    """Whether a run recorded as running still has its process (on this machine)."""
    if row.host != socket.gethostname():
        return True  # another machine's run: nothing here can tell
    try:
        os.kill(row.pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # it exists, under another user
    return True


def _status(row: RunRow) -> str:
    if row.status == "running" and not _alive(row):
        return "killed"
    return row.status


def _config(config: dict[str, Any]) -> str:
    return " ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}"
                    for k, v in config.items()) or "-"


def _row_json(row: RunRow) -> dict[str, Any]:
    return {"id": row.id, "started": row.started, "host": row.host, "pid": row.pid,
            "scenario": row.scenario, "config": row.config, "strategy": row.strategy,
            "seeds": row.seeds, "shard": row.shard, "done": row.done, "failed": row.failed,
            "groups": row.groups, "seconds": round(row.seconds, 3), "status": _status(row),
            "command": row.command}


@click.command("runs")
@click.option("--out", default="traces/failures", show_default=True,
              help="The directory `dst run --out` wrote to (its results database).")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
def command(out: str, as_json: bool) -> None:
    """List the runs recorded in OUT/results.sqlite: when, what, how far, what failed.

    One line a run of `dst run`, oldest first: when it started (UTC), the
    scenario and config, the strategy, the seeds asked for, how many are done
    (with seeds resumed from earlier runs), failing seeds, failure groups, and
    how it ended: done, time-up (--for), max-failures (-x), interrupted,
    incomplete (a worker was stopped), error, running, or killed (its row says
    running but its process is gone).

    \b
      dst runs
      dst runs --out nightly/ --json
    """
    from ..cli import _die  # the core, loaded first

    path = Path(out) / DB_NAME
    if not path.is_file():
        _die(UsageError(f"no results database at {path}; give the --out that `dst run` "
                        "wrote to"))
    try:
        with ResultsDB(out, create=False) as db:
            rows = db.runs()
    except sqlite3.Error as exc:
        _die(UsageError(f"cannot read the results database {path} ({exc}); is it one "
                        "`dst run` wrote?"))
    if as_json:
        click.echo(json.dumps({"runs": [_row_json(r) for r in rows]}, indent=2))
        return
    if not rows:
        click.echo(f"no runs recorded in {path}")
        return
    table = [("started", "scenario", "config", "strategy", "seeds", "done", "failed",
              "groups", "time", "ended")]
    for r in rows:
        seeds = r.seeds + (f" shard {r.shard}" if r.shard else "")
        table.append((r.started.replace("+00:00", "Z"), visible(r.scenario),
                      visible(_config(r.config)), visible(r.strategy), seeds, f"{r.done:,}",
                      f"{r.failed:,}", f"{r.groups:,}", f"{r.seconds:.1f}s", _status(r)))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    right = {5, 6, 7, 8}
    for row in table:
        click.echo("  ".join(cell.rjust(w) if i in right else cell.ljust(w)
                             for i, (cell, w) in enumerate(zip(row, widths, strict=True)))
                   .rstrip())
