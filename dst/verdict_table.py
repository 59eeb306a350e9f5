"""``dst table SCENARIO``: the verdict of every spend design, found by running it.

For each combination of ``spend_mode`` x ``fresh_view`` x ``serialize`` the
command runs the scenario over the same seeds and reports, per invariant that
failed, the first seed that showed it and the shortest counterexample found,
counted in *protocol actions* (restore, check/claim, spend, effect, record: the
events the runtime tags with ``action=``), which is the unit a model checker's
trace is counted in.  Runs stop at their first violation, so an invariant that
always breaks later than another one never shows; ``--invariant`` checks only
the named ones, as a model checker given one invariant would.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import click

from .errors import DstError, UsageError
from .registry import load
from .runner.single import RunResult, run_seeds
from .scenario import Scenario

#: The three conditions of the approval rule, in the order the table lists them.
AXES = ("spend_mode", "fresh_view", "serialize")
#: Events that count as protocol actions (their ``action`` field).
ACTIONS = frozenset({"restore", "check", "spend", "effect", "record"})


class BadInput(click.ClickException):
    exit_code = 2


@dataclass
class Finding:
    first_seed: int
    failures: int = 0
    shortest: int = 0
    shortest_seed: int = 0


@dataclass
class Row:
    config: dict[str, Any]
    runs: int = 0
    findings: dict[str, Finding] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        return "fail" if self.findings else "pass"


def protocol_actions(result: RunResult) -> int:
    """How many protocol actions the run took (its story, counted like a model's trace)."""
    n = 0
    for rec in result.sim.records:
        if rec[0] != "event":
            continue
        fields = rec[5]
        if isinstance(fields, str):
            fields = json.loads(fields)
        if fields.get("action") in ACTIONS:
            n += 1
    return n


def only(scenario: Scenario, invariants: Sequence[str]) -> Scenario:
    """The scenario with just the named checks (per-step or at the end)."""
    known = set(scenario.all_checks)
    for name in invariants:
        if name not in known:
            raise UsageError(f"{scenario.name} has no invariant {name!r}; "
                             f"it has {', '.join(scenario.all_checks)}")
    return dataclasses.replace(
        scenario,
        invariants={k: v for k, v in scenario.invariants.items() if k in invariants},
        end_checks={k: v for k, v in scenario.end_checks.items() if k in invariants})


def verdict_table(scenario: Scenario, seeds: int, base: Mapping[str, Any],
                  axes: Sequence[str] = AXES) -> list[Row]:
    """Run every combination of ``axes`` over seeds ``0..seeds-1``."""
    for axis in axes:
        if axis not in scenario.switches or scenario.switches[axis].allowed is None:
            raise UsageError(f"{scenario.name} has no switch {axis} with a fixed set of values")
    rows = []
    choices = [scenario.switches[a].allowed or () for a in axes]
    for values in itertools.product(*choices):
        config = {**base, **dict(zip(axes, values, strict=True))}
        row = Row({a: config[a] for a in axes})

        def collect(result: RunResult, row: Row = row) -> None:
            row.runs += 1
            if result.verdict != "fail":
                return
            length = protocol_actions(result)
            for name in result.violated:
                f = row.findings.setdefault(name, Finding(result.seed, 0, length, result.seed))
                f.failures += 1
                if length < f.shortest:
                    f.shortest, f.shortest_seed = length, result.seed

        run_seeds(scenario, config, range(seeds), collect)
        rows.append(row)
    return rows


def _show(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def render(rows: Sequence[Row]) -> str:
    head = f"{'spend_mode':<10} {'fresh_view':<10} {'serialize':<9}  verdict  findings"
    out = [head, "-" * len(head)]
    for row in rows:
        c = row.config
        cells = [f"{_show(c[a]):<{w}}" for a, w in zip(AXES, (10, 10, 9), strict=True)]
        found = "; ".join(
            f"{name} (first seed {f.first_seed}, {f.failures}/{row.runs} seeds, "
            f"shortest {f.shortest} actions at seed {f.shortest_seed})"
            for name, f in sorted(row.findings.items())) or "-"
        out.append(f"{' '.join(cells)}  {row.verdict:<7}  {found}")
    return "\n".join(out)


def as_json(scenario: str, seeds: int, rows: Sequence[Row]) -> dict[str, Any]:
    return {"scenario": scenario, "seeds": seeds, "rows": [
        {"config": r.config, "runs": r.runs, "verdict": r.verdict,
         "failures": {n: {"first_seed": f.first_seed, "seeds_failed": f.failures,
                          "shortest_actions": f.shortest, "shortest_seed": f.shortest_seed}
                      for n, f in sorted(r.findings.items())}}
        for r in rows]}


@click.command("table")
@click.argument("scenario")
@click.option("--seeds", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Seeds 0..N-1 for every combination.")
@click.option("-c", "switches", multiple=True, metavar="KEY=VALUE",
              help="Fix another switch for every row (repeatable).")
@click.option("--invariant", "invariants", multiple=True, metavar="NAME",
              help="Check only this invariant (repeatable), as a model checker given one.")
@click.option("--json", "json_out", is_flag=True, help="One JSON document on stdout.")
def table_command(scenario: str, seeds: int, switches: tuple[str, ...],
                  invariants: tuple[str, ...], json_out: bool) -> None:
    """Verdict table of SCENARIO: every spend_mode x fresh_view x serialize.

    Exit status 0 when it ran (failing rows are findings, not errors), 2 on bad input.
    """
    try:
        scen = load(scenario)
        overrides = {}
        for item in switches:
            key, sep, text = item.partition("=")
            if not sep:
                raise UsageError(f"{item!r} is not key=value (e.g. -c llm=happy)")
            overrides[key.strip()] = text.strip()
        base = scen.config(overrides)
        if invariants:
            scen = only(scen, invariants)
        rows = verdict_table(scen, seeds, base)
    except DstError as err:
        raise BadInput(str(err)) from None
    if json_out:
        click.echo(json.dumps(as_json(scen.name, seeds, rows), indent=2))
        return
    click.echo(f"{scen.name}: {seeds} seeds per row"
               + (f", checking {', '.join(invariants)} only" if invariants else ""))
    click.echo(render(rows))
