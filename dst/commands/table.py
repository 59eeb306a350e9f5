"""``dst table SCENARIO``: a verdict table, found by running the code.

Without ``--vary`` it is the approval table (every ``spend_mode`` x
``fresh_view`` x ``serialize``, docs/approval.md), unchanged.  With ``--vary``
it is any scenario's: every combination of the named switches, a verdict per
invariant, and the shortest failing run of each failing cell as a trace with
its story (``dst.verdict_table``).
"""

from __future__ import annotations

import json

import click

from dst.errors import DstError, UsageError
from dst.registry import load
from dst.verdict_table import (
    AXES,
    STRATEGIES,
    as_json,
    only,
    render,
    render_vary,
    vary_json,
    vary_table,
    verdict_table,
)

from .arguments import key_values, out_dir


class BadInput(click.ClickException):
    exit_code = 2


@click.command("table")
@click.argument("scenario")
@click.option("--vary", "vary", default=None, metavar="SWITCH[,SWITCH...]",
              help="The switches whose every combination is a row (each boolean, or declared "
                   "with choices) [default: approval's spend_mode,fresh_view,serialize].")
@click.option("--strategy", type=click.Choice(STRATEGIES), default="random", show_default=True,
              help="With --vary: seeds of a strategy, or every schedule (exhaustive, under "
                   "the fault budgets the switches set).")
@click.option("--seeds", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Seeds 0..N-1 for every combination.")
@click.option("-c", "switches", multiple=True, metavar="KEY=VALUE",
              help="Fix another switch for every row (repeatable).")
@click.option("--invariant", "invariants", multiple=True, metavar="NAME",
              help="Check only this invariant (repeatable), as a model checker given one.")
@click.option("--max-steps", type=click.IntRange(min=1), default=None,
              help="With --strategy exhaustive: decisions per schedule [default: the "
                   "scenario's max_steps].")
@click.option("--out", default="traces/table", show_default=True,
              help="With --vary: where the shortest failing run of each cell is written.")
@click.option("--json", "json_out", is_flag=True, help="One JSON document on stdout.")
def command(scenario: str, vary: str | None, strategy: str, seeds: int,
            switches: tuple[str, ...], invariants: tuple[str, ...], max_steps: int | None,
            out: str, json_out: bool) -> None:
    """Verdict table of SCENARIO: every combination of some switches, found by running.

    Without --vary: the approval table, every spend_mode x fresh_view x
    serialize over the same seeds (docs/approval.md).  With --vary: every
    combination of the named switches of any scenario, each invariant's
    verdict, and for each failing cell the shortest run found, with its story
    and the command that replays it.

    \b
      dst table approval --seeds 1000 --invariant AtMostOnce -c llm=happy
      dst table counter --vary cas,workers --seeds 200
      dst table approval --vary spend_mode --strategy exhaustive -c llm=happy \\
          -c crashes=0 -c drops=0 -c dups=0 --invariant AtMostOnce

    Exit status 0 when it ran (failing rows are findings, not errors), 2 on bad input.
    """
    try:
        full = load(scenario)
        scen = full
        overrides = key_values(switches, "-c llm=happy")
        base = scen.config(overrides)
        if invariants:
            scen = only(scen, invariants)
        if vary is None:
            if strategy != "random" or max_steps is not None:
                raise UsageError("--strategy and --max-steps go with --vary (the approval "
                                 "table runs seeds)")
            missing = [a for a in AXES if a not in full.switches]
            if missing:
                raise UsageError(
                    f"{full.name} has no switch {missing[0]}: without --vary the table is "
                    "the approval one; give --vary SWITCH[,SWITCH...] from its switches "
                    f"({', '.join(full.switches) or 'none'})")
            rows = verdict_table(scen, seeds, base)
        else:
            axes = [a.strip() for a in vary.split(",") if a.strip()]
            where = out_dir(out)
            vrows = vary_table(full, scen, scenario, base, axes, strategy=strategy,
                               seeds=seeds, out=where, max_steps=max_steps)
    except DstError as err:
        raise BadInput(str(err)) from None
    if vary is None:
        if json_out:
            click.echo(json.dumps(as_json(scen.name, seeds, rows), indent=2))
            return
        click.echo(f"{scen.name}: {seeds} seeds per row"
                   + (f", checking {', '.join(invariants)} only" if invariants else ""))
        click.echo(render(rows))
        return
    if json_out:
        click.echo(json.dumps(vary_json(scen.name, axes, strategy, seeds, vrows), indent=2,
                              default=str))
        return
    how = ("every schedule" if strategy == "exhaustive"
           else f"{seeds} seeds per row ({strategy})")
    click.echo(f"{scen.name}: {how}"
               + (f", checking {', '.join(invariants)} only" if invariants else ""))
    click.echo(render_vary(vrows, axes, list(scen.all_checks)))
