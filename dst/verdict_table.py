"""The verdict table: every combination of some switches, each invariant's verdict.

``dst table approval`` is the table of every spend design: each combination of
``spend_mode`` x ``fresh_view`` x ``serialize`` runs over the same seeds, and
each row reports, per invariant that failed, the first seed that showed it and
the shortest counterexample found, counted in *protocol actions* (restore,
check/claim, spend, effect, record: the events the runtime tags with
``action=``), the unit a model checker's trace is counted in.  Runs stop at
their first violation, so an invariant that always breaks later than another
one never shows; ``--invariant`` checks only the named ones, as a model checker
given one invariant would.

``dst table SCENARIO --vary A,B`` is the same question for any scenario and any
switches with a fixed set of values (:func:`vary_table`): one cell per
combination and invariant, searched with a seeded strategy or exhaustively,
and for each failing cell the shortest run found, written as a trace with its
story and the command that replays it.  The command itself is
``dst/commands/table.py``.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import UsageError
from .runner.single import RunResult, run_seeds
from .scenario import Scenario
from .trace.render import counted

#: The three conditions of the approval rule, in the order the table lists them.
AXES = ("spend_mode", "fresh_view", "serialize")
#: Events that count as protocol actions (their ``action`` field).
ACTIONS = frozenset({"restore", "check", "spend", "effect", "record"})


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
        end_checks={k: v for k, v in scenario.end_checks.items() if k in invariants},
        eventual_checks={k: v for k, v in scenario.eventual_checks.items() if k in invariants})


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


# -- any scenario, any switches: dst table SCENARIO --vary A,B -------------------------

#: How a cell can be searched: seeds of one strategy, or every schedule.
STRATEGIES = ("random", "pct", "swarm", "exhaustive")


@dataclass
class Cell:
    """One invariant in one combination: its verdict and the shortest failing run found."""

    verdict: str  # "fail", or "pass" (seeds), "holds" / "not violated" (exhaustive)
    runs: int = 0
    failures: int = 0
    first_seed: int | None = None
    steps: int | None = None  # scheduler decisions of the shortest failing run
    seed: int | None = None
    trace: str | None = None
    replay: str | None = None
    replay_divergence: str | None = None
    story: list[tuple[str, str]] = field(default_factory=list)  # (actor, text)
    caveat: str = ""


@dataclass
class VaryRow:
    values: dict[str, Any]
    config: dict[str, Any]
    cells: dict[str, Cell] = field(default_factory=dict)


def axes_values(scenario: Scenario, axes: Sequence[str]) -> list[tuple[Any, ...]]:
    """Every combination of ``axes``' values, each switch's in its declared order."""
    if not axes:
        raise UsageError("--vary needs at least one switch (e.g. --vary cas,workers)")
    choices = []
    for axis in axes:
        switch = scenario.switches.get(axis)
        if switch is None:
            raise UsageError(f"{scenario.name} has no switch {axis!r}; it has: "
                             f"{', '.join(scenario.switches) or 'none'}")
        if switch.allowed is None:
            raise UsageError(f"switch {axis} of {scenario.name} has no fixed set of values; "
                             "vary a boolean switch or one declared with choices")
        choices.append(switch.allowed)
    return list(itertools.product(*choices))


def _tag(values: Mapping[str, Any]) -> str:
    return "-".join(f"{k}={_show(v)}" for k, v in values.items())


def _told(trace: Any) -> list[tuple[str, str]]:
    from .trace.render import story

    return [(actor, text) for _step, _t, actor, text in story(trace)]


def vary_table(full: Scenario, checked: Scenario, ref: str, base: Mapping[str, Any],
               axes: Sequence[str], *, strategy: str, seeds: int, out: Any,
               max_steps: int | None = None) -> list[VaryRow]:
    """Each combination of ``axes`` over ``base``: every check of ``checked`` gets a cell.

    ``full`` is the scenario as shipped (what ``dst replay`` runs), ``checked``
    the one whose checks are judged (``only`` some).  Seeded strategies run
    seeds ``0..seeds-1``; ``exhaustive`` runs every schedule under the fault
    budgets the config sets (``dst.explore.exhaustive``).  The shortest failing
    run of each failing cell is written to ``out`` as a trace.
    """
    from pathlib import Path

    from .explore import exhaustive
    from .explore.strategies import explore as strategy_for
    from .registry import is_shipped
    from .trace.codec import write_trace

    names = list(checked.all_checks)
    rows = []
    for values in axes_values(full, axes):
        row_values = dict(zip(axes, values, strict=True))
        config = {**base, **row_values}
        row = VaryRow(row_values, config)
        shortest: dict[str, Any] = {}
        if strategy == "exhaustive":
            plan = full.fault_plan(config)
            bounds = exhaustive.Bounds(
                max_steps=max_steps or full.max_steps, crashes=plan.max_crashes,
                drops=plan.max_drops, dups=plan.max_dups)
            result = exhaustive.explore(checked, config, bounds)
            for name in names:
                verdict, _proof = result.verdict(name)
                v = result.violations.get(name)
                cell = Cell("fail" if v else verdict, runs=result.schedules,
                            caveat=result.caveat(name))
                if v is not None:
                    cell.failures, cell.steps = v.schedules, v.steps
                    shortest[name] = exhaustive.record(checked, result, v).trace()
                row.cells[name] = cell
        else:
            how = strategy_for(strategy, checked, config)
            for name in names:
                row.cells[name] = Cell("pass", runs=seeds)

            def collect(result: RunResult, row: VaryRow = row,
                        shortest: dict[str, Any] = shortest) -> None:
                for name in result.violated:
                    cell = row.cells.get(name)
                    if cell is None:
                        continue
                    cell.verdict = "fail"
                    cell.failures += 1
                    if cell.first_seed is None:
                        cell.first_seed = result.seed
                    if cell.steps is None or result.steps < cell.steps:
                        cell.steps, cell.seed = result.steps, result.seed
                        shortest[name] = result.trace()

            run_seeds(checked, config, range(seeds), collect, strategy=how.strategy,
                      plan=how.plan)
        for name, trace in shortest.items():
            cell = row.cells[name]
            path = write_trace(trace, Path(out) / f"{full.name}-{_tag(row_values)}-{name}.jsonl")
            why = exhaustive.replays(full, trace)
            cell.trace, cell.replay_divergence = str(path), why
            if why is None:
                from .trace.render import replay_line

                cell.replay = replay_line(str(path), None if is_shipped(ref) else ref)
            cell.story = _told(trace)
        rows.append(row)
    return rows


def render_vary(rows: Sequence[VaryRow], axes: Sequence[str], names: Sequence[str]) -> str:
    def text(c: Cell) -> str:
        if c.verdict != "fail":
            return c.verdict
        if c.first_seed is not None:
            return f"FAIL {c.failures}/{c.runs} ({counted(c.steps, 'step')})"
        return f"FAIL ({counted(c.steps, 'step')})"

    widths = [max(len(a), *(len(_show(r.values[a])) for r in rows)) for a in axes]
    cell_w = {n: max(len(n), *(len(text(r.cells[n])) for r in rows)) for n in names}
    head = "  ".join([*(f"{a:<{w}}" for a, w in zip(axes, widths, strict=True)),
                      *(f"{n:<{cell_w[n]}}" for n in names)])
    out = [head.rstrip(), "-" * len(head.rstrip())]
    for r in rows:
        out.append("  ".join([*(f"{_show(r.values[a]):<{w}}"
                                for a, w in zip(axes, widths, strict=True)),
                              *(f"{text(r.cells[n]):<{cell_w[n]}}" for n in names)]).rstrip())
    for r in rows:
        for n in names:
            c = r.cells[n]
            if c.verdict != "fail":
                continue
            at = f" at seed {c.seed}" if c.seed is not None else ""
            out.append(f"{_tag(r.values)} {n}: shortest {counted(c.steps, 'step')}{at}")
            actor_w = max([len(a) for a, _ in c.story] + [5])
            out += [f"    {a:<{actor_w}}  {t}" for a, t in c.story]
            if c.replay is not None:
                out.append(f"    replay: {c.replay}")
            elif c.trace is not None:
                out.append(f"    trace: {c.trace} (checked alone: `dst replay` runs every "
                           "check and stops at another violation first)")
    return "\n".join(out)


def vary_json(scenario: str, axes: Sequence[str], strategy: str, seeds: int,
              rows: Sequence[VaryRow]) -> dict[str, Any]:
    return {"scenario": scenario, "vary": list(axes), "strategy": strategy,
            "seeds": seeds if strategy != "exhaustive" else None, "rows": [
                {"values": r.values, "config": r.config, "invariants": {
                    n: {"verdict": c.verdict, "runs": c.runs, "failures": c.failures,
                        "first_seed": c.first_seed, "shortest_steps": c.steps,
                        "shortest_seed": c.seed, "trace": c.trace, "replay": c.replay,
                        "replay_divergence": c.replay_divergence,
                        "caveat": c.caveat or None,
                        "story": [{"actor": a, "text": t} for a, t in c.story]}
                    for n, c in r.cells.items()}}
                for r in rows]}
