"""Spec and code, row by row: does the model say what the real code does?

For every row a spec's map pairs with a scenario (a setting of the switches
both have), TLC checks the spec with the row's constants, one run per
invariant, and the real code is searched under the same bounds (exhaustively
by default: ``dst.explore.exhaustive``, one search per invariant, since a run
stops at its first violation).  Each invariant then has two verdicts; they
*agree* when both find a violation or neither does.  A code verdict that is
not a proof (a seeded search, a search stopped by its budget) agrees with
"holds" only as far as it goes, and says so.

Every spec counterexample is also replayed on the code (``dst.specs.steer``)
when the map allows it, so a disagreement shows the same story twice: the
spec's, and what the real runtime does when its scheduler is made to take the
spec's steps; both are written as ordinary traces.

The work (a TLC run, or a search of the code, per row and invariant) is
independent, so ``jobs`` processes run it at once.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import resource
import shlex
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dst.errors import UsageError
from dst.explore import exhaustive
from dst.explore.strategies import explore as strategy_for
from dst.registry import is_shipped
from dst.registry import load as load_scenario
from dst.runner.single import RunResult, run_seeds
from dst.scenario import Scenario
from dst.trace.codec import write_trace
from dst.verdict_table import only

from .catalog import Spec, Value, row_cfg, shown
from .mapping import Conformance, Pair, Search, read, scenario_names
from .steer import follow
from .stories import Step, code_story, spec_story
from .tlc import Outcome, Tlc
from .tlc import run as run_tlc


@dataclass
class CodeVerdict:
    """What the search of the real code found for one invariant of one row."""

    verdict: str  # "violated", "holds" (proven within the bounds) or "not violated"
    proof: bool
    caveat: str
    story: list[Step] = field(default_factory=list)
    steps: int | None = None  # scheduler decisions of the shortest violating run found
    message: str = ""
    trace: str | None = None
    replay: str | None = None
    replay_divergence: str | None = None
    runs: int = 0  # schedules (exhaustive) or seeds run
    seconds: float = 0.0
    cpu: float = 0.0  # CPU seconds of the search (a busy machine stretches ``seconds``)


@dataclass
class FollowedSpec:
    """A spec counterexample run on the code."""

    followed: int
    of: int
    violated: list[str]
    story: list[Step]
    departure: str | None
    trace: str
    replay: str | None
    replay_divergence: str | None
    #: The code broke the invariant the spec's story breaks.
    reproduced: bool = False
    #: Why the story's steps were not all taken (a departure, or the run stopping first).
    unfinished: str | None = None

    def outcome(self) -> str:
        """What the run did, in a few words: "reproduced", "broke X instead", ..."""
        if self.reproduced:
            return "reproduced"
        if self.violated:
            return f"broke {', '.join(self.violated)} instead"
        return "departed, broke nothing" if self.departure else "broke nothing"


@dataclass
class Cell:
    """One invariant of one row: the spec's verdict beside the code's."""

    invariant: str
    scenario_invariant: str
    spec: Outcome
    code: CodeVerdict
    spec_story: list[Step]
    on_code: FollowedSpec | None = None
    spec_cpu: float = 0.0  # CPU seconds of the TLC runs, Java's included (shared by a row)

    @property
    def agree(self) -> bool:
        return (self.spec.verdict == "violated") == (self.code.verdict == "violated")


@dataclass
class RowReport:
    pair: Pair
    row: dict[str, Value]
    config: dict[str, Any]
    cells: dict[str, Cell]

    @property
    def agree(self) -> bool:
        return all(c.agree for c in self.cells.values())

    def tag(self) -> str:
        """The row in a file name: the shared constants' values (``after-false-true``)."""
        return "-".join(shown(self.row[n]).lower() for n in self.pair.shared) or "row"


@dataclass
class Report:
    spec: Spec
    conformance: Conformance
    rows: list[RowReport]
    tlc_seconds: float = 0.0
    code_seconds: float = 0.0
    seconds: float = 0.0
    tlc_cpu: float = 0.0
    code_cpu: float = 0.0

    @property
    def disagreements(self) -> list[tuple[RowReport, Cell]]:
        return [(r, c) for r in self.rows for c in r.cells.values() if not c.agree]


def load(spec: Spec) -> tuple[Conformance, dict[str, Scenario]]:
    """The spec's conformance section and the scenarios it names, loaded."""
    scenarios = {}
    for name in scenario_names(spec):
        try:
            scenarios[name] = load_scenario(name)
        except UsageError as err:
            raise UsageError(f"{spec.name}.map.json pairs the spec with {name!r}: {err}") from None
    return read(spec, scenarios), scenarios


# -- the work, one TLC run or one search each (run in worker processes) ---------------


def tlc_row(tlc: Tlc, spec: Spec, row: Mapping[str, Value],
            invariants: tuple[str, ...]) -> dict[str, Outcome]:
    """TLC's verdict on each invariant of one row, in as few runs as that takes.

    One run checks every invariant still open.  TLC explores breadth first and
    stops at the first state that breaks any of them, so the invariant it names
    gets the same shortest counterexample, and the same count of states found,
    as a run checking it alone; the others are checked again without it.  A
    run that finds nothing settles every invariant it checked.  Rows that hold
    take one run instead of one per invariant.
    """
    outcomes: dict[str, Outcome] = {}
    open_ = list(invariants)
    while open_:
        names = " ".join(open_)
        o = run_tlc(tlc, spec.tla, row_cfg(spec, row, names), names)
        if o.verdict == "holds":
            share = o.seconds / len(open_)
            for name in open_:
                outcomes[name] = dataclasses.replace(o, invariant=name, seconds=share)
            break
        outcomes[o.invariant] = o
        open_.remove(o.invariant)
    return {name: outcomes[name] for name in invariants}


def cpu_seconds() -> float:
    """CPU time of this process and of the children it waited for (TLC's JVMs)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _tlc_job(tlc: Tlc, spec: Spec, row: Mapping[str, Value],
             invariants: tuple[str, ...]) -> tuple[dict[str, Outcome], float]:
    began = cpu_seconds()
    outcomes = tlc_row(tlc, spec, row, invariants)
    return outcomes, cpu_seconds() - began


def _replay_command(path: Path, ref: str) -> str:
    again = f"dst replay {shlex.quote(str(path))}"
    return again if is_shipped(ref) else again + f" --scenario {shlex.quote(ref)}"


def _write(full: Scenario, ref: str, run: RunResult, path: Path) -> tuple[str, str | None,
                                                                         str | None]:
    trace = run.trace()
    written = write_trace(trace, path)
    why = exhaustive.replays(full, trace)
    return str(written), _replay_command(written, ref) if why is None else None, why


def bounds_for(scenario: Scenario, config: Mapping[str, Any], search: Search,
               budget: float | None = None) -> exhaustive.Bounds:
    """The exploration bounds of a row: the scenario's own fault budgets (slow timers
    included), as its switches set them, and the map's step bound and preemptions."""
    plan = scenario.fault_plan(config)
    return exhaustive.Bounds(
        max_steps=search.max_steps or scenario.max_steps, crashes=plan.max_crashes,
        drops=plan.max_drops, dups=plan.max_dups, slow=plan.max_slow,
        preemptions=search.preemptions, service_faults=search.service_faults, budget=budget)


def _code_job(conf: Conformance, ref: str, config: dict[str, Any], invariant: str,
              search: Search, out: str, stem: str, budget: float | None) -> CodeVerdict:
    began, cpu = time.perf_counter(), cpu_seconds()
    full = load_scenario(ref)
    alone = only(full, [invariant])
    path = Path(out) / f"{stem}-code.jsonl"
    if search.strategy == "exhaustive":
        result = exhaustive.explore(alone, config, bounds_for(full, config, search, budget))
        verdict, proof = result.verdict(invariant)
        code = CodeVerdict(verdict, proof, result.caveat(invariant), runs=result.schedules)
        v = result.violations.get(invariant)
        if v is not None:
            run = exhaustive.record(alone, result, v)
            code.steps, code.message = v.steps, v.message
            code.story = code_story(conf, run.sim.records)
            code.trace, code.replay, code.replay_divergence = _write(full, ref, run, path)
    else:
        how = strategy_for(search.strategy, alone, config)
        shortest: list[RunResult] = []

        def keep(r: RunResult) -> None:
            if invariant in r.violated and (not shortest or r.steps < shortest[0].steps):
                shortest[:] = [r]

        run_seeds(alone, config, range(search.seeds), keep, strategy=how.strategy,
                  plan=how.plan)
        code = CodeVerdict("not violated", False,
                           f"{search.seeds} seeds of {search.strategy} search: not a proof",
                           runs=search.seeds)
        if shortest:
            run = shortest[0]
            code = CodeVerdict("violated", True, "", runs=search.seeds, steps=run.steps,
                               story=code_story(conf, run.sim.records))
            code.message = next((r[4] for r in run.sim.records
                                 if r[0] == "violation" and r[3] == invariant), "")
            code.trace, code.replay, code.replay_divergence = _write(full, ref, run, path)
    code.seconds, code.cpu = time.perf_counter() - began, cpu_seconds() - cpu
    return code


# -- the whole comparison ------------------------------------------------------------------


Progress = Callable[[int, int, float], None]
#: A row's TLC verdicts and the CPU seconds they took.
TlcRow = tuple[dict[str, Outcome], float]


def compare(conf: Conformance, scenarios: Mapping[str, Scenario], tlc: Tlc, out: Path,
            *, fixed: Mapping[str, Value] | None = None, jobs: int = 1,
            budget: float | None = None, progress: Progress | None = None) -> Report:
    """Every paired row: TLC's verdict and the code's, per invariant, and the stories."""
    spec = conf.spec
    began = time.perf_counter()
    plans: list[tuple[Pair, dict[str, Value], dict[str, Any]]] = []
    for pair in conf.pairs:
        scen = scenarios[pair.scenario]
        for row in conf.rows(pair, fixed):
            plans.append((pair, row, conf.config(pair, scen, row)))
    if not plans:
        raise UsageError(f"no row of {spec.name} fits the given constants")
    out.mkdir(parents=True, exist_ok=True)
    reports: list[RowReport] = []
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context(
        "fork")) if jobs > 1 else None
    work: list[tuple[RowReport, Future[TlcRow] | TlcRow,
                     dict[str, Future[CodeVerdict] | CodeVerdict]]] = []
    total = sum(1 + len(p.invariants) for p, _, _ in plans)
    finished = [0]

    def tick(_f: object = None) -> None:
        finished[0] += 1
        if progress is not None:
            progress(finished[0], total, time.perf_counter() - began)

    try:
        for pair, row, config in plans:
            report = RowReport(pair, row, config, {})
            reports.append(report)
            tlc_args = (tlc, spec, row, pair.invariants)
            t: Future[TlcRow] | TlcRow
            if pool is None:
                t = _tlc_job(*tlc_args)
                tick()
            else:
                t = pool.submit(_tlc_job, *tlc_args)
                t.add_done_callback(tick)
            codes: dict[str, Future[CodeVerdict] | CodeVerdict] = {}
            for inv in pair.invariants:
                mapped = spec.scenario_invariants[inv]
                assert mapped is not None
                stem = f"{spec.name}-{pair.scenario}-{report.tag()}-{inv}"
                code_args = (conf, pair.scenario, config, mapped, pair.search, str(out), stem,
                             budget)
                if pool is None:
                    codes[inv] = _code_job(*code_args)
                    tick()
                else:
                    future = pool.submit(_code_job, *code_args)
                    future.add_done_callback(tick)
                    codes[inv] = future
            work.append((report, t, codes))
        tlc_seconds = code_seconds = tlc_cpu = code_cpu = 0.0
        for report, t, codes in work:
            outcomes, row_cpu = t.result() if isinstance(t, Future) else t
            tlc_cpu += row_cpu
            for inv, c in codes.items():
                outcome = outcomes[inv]
                code = c.result() if isinstance(c, Future) else c
                tlc_seconds += outcome.seconds
                code_seconds += code.seconds
                code_cpu += code.cpu
                mapped = spec.scenario_invariants[inv]
                assert mapped is not None
                report.cells[inv] = Cell(inv, mapped, outcome, code, spec_story(conf, outcome),
                                         spec_cpu=row_cpu / len(codes))
    except BaseException:
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        raise
    if pool is not None:
        pool.shutdown()
    if conf.follow:
        for report in reports:
            for cell in report.cells.values():
                if cell.spec.verdict == "violated":
                    cell.on_code = _on_code(conf, scenarios[report.pair.scenario], report,
                                            cell, out)
    return Report(spec, conf, reports, tlc_seconds, code_seconds, time.perf_counter() - began,
                  tlc_cpu, code_cpu)


def _on_code(conf: Conformance, scenario: Scenario, report: RowReport, cell: Cell,
             out: Path) -> FollowedSpec:
    """Replay the cell's spec counterexample on the code; write it as a trace.

    The run has the faults the code's search had: an exhaustive search's
    bounds, or for a seeded search the scenario's own plan (a lost reply is
    one of its service faults).  The steer injects only the faults the story
    asks for.
    """
    search = report.pair.search
    if search.strategy == "exhaustive":
        bounds = bounds_for(scenario, report.config, search)
        plan = exhaustive.fault_plan(scenario, report.config, bounds)
        steps = max(scenario.max_steps, bounds.max_steps + 1)
    else:
        plan, steps = scenario.fault_plan(report.config), scenario.max_steps
    done = follow(conf, scenario, report.config, plan, cell.spec_story, max_steps=steps)
    stem = f"{conf.spec.name}-{scenario.name}-{report.tag()}-{cell.invariant}"
    path, replay, why = _write(scenario, scenario.name, done.result, out / f"{stem}-spec.jsonl")
    violated = list(done.result.violated)
    return FollowedSpec(done.steer.followed, len(cell.spec_story), violated, done.story,
                        done.departure(), path, replay, why,
                        reproduced=cell.scenario_invariant in violated,
                        unfinished=done.unfinished())


def on_code_text(report: Report) -> list[str]:
    """One line per spec counterexample run on the code: did the code break the same
    invariant, how many of the spec's steps it took, and the command that replays it."""
    cells = [(r, c) for r in report.rows for c in r.cells.values() if c.on_code is not None]
    if not cells:
        return []
    same = sum(1 for _, c in cells if c.on_code is not None and c.on_code.reproduced)
    lines = [f"spec counterexamples run on the code: {same} of {len(cells)} reproduced"]
    for row, cell in cells:
        f = cell.on_code
        assert f is not None
        setting = ", ".join(f"{n}={shown(row.row[n])}" for n in row.pair.shared)
        where = f.replay or f"{f.trace} (does not replay: {f.replay_divergence})"
        lines.append(f"  {cell.invariant} at {setting} on {row.pair.scenario}: {f.outcome()}, "
                     f"{f.followed} of {f.of} spec steps taken: {where}")
        if f.unfinished and not f.reproduced:
            lines.append(f"    {f.unfinished}")
    return lines
