"""What one simulated seed costs, against bare trio and ``ping`` in the same process.

Usage::

    python benchmarks/bench_kernel.py [--seeds N] [--scenario-seeds N] [--repeat 3] [--json]

The core workload is the ``counter`` scenario's: 2 workers, each making 15
store calls (7 increments of read-then-put, then a final read), so every
``cas=false`` run is 30 choice points.  Every row is measured in this one
process, passes interleaved (one pass of each row, then the next round), so
that the ratios compare like with like on whatever machine runs them:

``dst counter cas=false``
    ``dst.runner.single.run_seeds`` over chunks of seeds, one shared
    ``trio.run`` per chunk, exactly as ``dst run`` does.  The scenario's
    invariant is evaluated after every step as usual, but its verdict is
    discarded: the planted lost update would otherwise stop most runs after a
    handful of steps, and the point here is a fixed 30 decisions per run.
    Measured with the shipped fault plan (preemption at trio checkpoints on)
    and at ``preemptions=0``.
``dst counter`` (shipped default, ``cas=true``)
    passes; its compare-and-set retries make the decision count vary per
    seed (reported as decisions/run).  Preemption on and off.
``dst approval``, ``dst replenish_crash``
    their shipped defaults (faults on), preemption on and off; against
    ``dst ping`` (its defaults) and against bare trio.
``bare trio, one trio.run per seed``
    2 tasks x 15 awaits of a trivial async store (``checkpoint`` then a dict
    read or write): what a user would write to run the code once.
``bare trio, seeds share a trio.run``
    the same tasks, many "seeds" back to back inside one ``trio.run``.

Each row gets a warm-up pass, then ``--repeat`` timed passes; the best pass
counts.  Seeds per second are given per wall second (``time.perf_counter``)
and per CPU second of this process (``time.process_time``): on a shared
machine the second is the steadier one, and it is what "seeds per second per
core" means.  Per-run percentiles (wall) come from the best pass.  The dst
rows also record the scenarios' structlog events, which the bare side does not
do; that is part of what dst costs its users.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import trio

from dst.runner.bulk import CHUNK
from dst.runner.single import RunResult, run_seeds
from dst.scenario import Scenario
from dst.sim.faults import FaultPlan
from scenarios import counter

#: Store calls per worker in the default counter config with cas=false:
#: 7 increments x (get + put) + the final get.
CALLS_PER_WORKER = 2 * counter.scenario.switches["increments"].default + 1
WORKERS = counter.scenario.switches["workers"].default


def _measured_counter() -> Scenario:
    """``counter`` as shipped, except that its invariant's verdict is ignored.

    The check still runs after every step (its cost is part of a seed's cost);
    only its answer is thrown away, so every cas=false run does all 30 calls.
    """
    bench = Scenario("counter", doc=counter.scenario.doc)
    bench.switches = dict(counter.scenario.switches)
    bench.setup(counter.setup)
    for name, check in counter.scenario.invariants.items():
        bench.invariant(name)(_ignoring(check))
    return bench


def _ignoring(check: Callable[[Any], object]) -> Callable[[Any], object]:
    def evaluated(world: Any) -> object:
        check(world)
        return True

    return evaluated


@dataclass
class Pass:
    """One timed pass: total wall and CPU time, per-run times, decisions made."""

    seconds: float
    per_run: list[float]
    decisions: int
    cpu: float = 0.0


# -- dst --------------------------------------------------------------------


def _chunks(seeds: list[int]) -> Iterator[list[int]]:
    for i in range(0, len(seeds), CHUNK):
        yield seeds[i : i + CHUNK]


def dst_pass(scenario: Scenario, config: dict[str, Any], seeds: list[int],
             faults: FaultPlan | None = None, *, must_pass: bool = True) -> Pass:
    """Run ``seeds`` as ``dst run`` does: chunks of CHUNK seeds, one trio.run each."""
    per_run: list[float] = []
    decisions = 0
    last = 0.0

    def on_result(r: RunResult) -> None:
        nonlocal last, decisions
        now = time.perf_counter()
        per_run.append(now - last)
        last = now
        decisions += r.steps
        if must_pass and r.verdict != "pass":
            raise RuntimeError(f"benchmark run of seed {r.seed} failed: {r.violated}")

    start, cpu = time.perf_counter(), time.process_time()
    for chunk in _chunks(seeds):
        # The first run of a chunk carries the trio.run start-up, as in production.
        last = time.perf_counter()
        run_seeds(scenario, config, chunk, on_result, faults=faults)
    return Pass(time.perf_counter() - start, per_run, decisions, time.process_time() - cpu)


# -- bare trio ------------------------------------------------------------------


async def _bare_worker(db: dict[str, int], calls: int) -> None:
    """The counter worker's shape with a trivial store: await, then touch a dict."""
    for i in range(calls):
        await trio.lowlevel.checkpoint()
        if i % 2 == 0:
            db.get("n")
        else:
            db["n"] = db.get("n", 0) + 1


async def _bare_once() -> None:
    db: dict[str, int] = {}
    async with trio.open_nursery() as nursery:
        for _ in range(WORKERS):
            nursery.start_soon(_bare_worker, db, CALLS_PER_WORKER)


def bare_pass_per_seed(seeds: list[int]) -> Pass:
    per_run: list[float] = []
    start, cpu = time.perf_counter(), time.process_time()
    for _ in seeds:
        t0 = time.perf_counter()
        trio.run(_bare_once)
        per_run.append(time.perf_counter() - t0)
    return Pass(time.perf_counter() - start, per_run, len(seeds) * WORKERS * CALLS_PER_WORKER,
                time.process_time() - cpu)


def bare_pass_shared(seeds: list[int]) -> Pass:
    per_run: list[float] = []

    async def many(chunk: list[int]) -> None:
        last = time.perf_counter()
        for _ in chunk:
            await _bare_once()
            now = time.perf_counter()
            per_run.append(now - last)
            last = now

    start, cpu = time.perf_counter(), time.process_time()
    for chunk in _chunks(seeds):
        trio.run(many, chunk)
    return Pass(time.perf_counter() - start, per_run, len(seeds) * WORKERS * CALLS_PER_WORKER,
                time.process_time() - cpu)


# -- measuring --------------------------------------------------------------------


@dataclass
class Row:
    """One measured workload: its name, how a pass runs, and how many seeds a pass runs."""

    key: str
    name: str
    run: Callable[[list[int]], Pass]
    seeds: int


def _scenario_row(key: str, name: str, module: str, seeds: int, preemptions: int | None) -> Row:
    scenario: Scenario = importlib.import_module(f"scenarios.{module}").scenario
    config = scenario.default_config()
    plan = scenario.fault_plan(config)
    if preemptions is not None:
        plan = dataclasses.replace(plan, preemptions=preemptions)
    # Shipped defaults pass; the verdict is checked so that a broken kernel shows.
    return Row(key, name, lambda s: dst_pass(scenario, config, s, plan), seeds)


def rows_for(seeds: int, scenario_seeds: int) -> list[Row]:
    base = counter.scenario.default_config()
    fixed = _measured_counter()
    blind = {**base, "cas": False}
    shipped = counter.scenario.fault_plan(blind)
    off = dataclasses.replace(shipped, preemptions=0)
    return [
        Row("dst_cas_false", "dst counter cas=false", lambda s: dst_pass(fixed, blind, s), seeds),
        Row("dst_cas_false_p0", "dst counter cas=false, preemptions=0",
            lambda s: dst_pass(fixed, blind, s, off), seeds),
        Row("dst_cas_true", "dst counter (shipped default)",
            lambda s: dst_pass(counter.scenario, base, s), seeds),
        Row("dst_cas_true_p0", "dst counter, preemptions=0",
            lambda s: dst_pass(counter.scenario, base, s,
                               dataclasses.replace(counter.scenario.fault_plan(base),
                                                   preemptions=0)), seeds),
        _scenario_row("ping", "dst ping (shipped default)", "ping", scenario_seeds, None),
        _scenario_row("approval", "dst approval", "approval", scenario_seeds, None),
        _scenario_row("approval_p0", "dst approval, preemptions=0", "approval",
                      scenario_seeds, 0),
        _scenario_row("replenish_crash", "dst replenish_crash", "replenish_crash",
                      max(1, scenario_seeds // 4), None),
        _scenario_row("replenish_crash_p0", "dst replenish_crash, preemptions=0",
                      "replenish_crash", max(1, scenario_seeds // 4), 0),
        Row("bare_per_seed", "bare trio, one trio.run per seed", bare_pass_per_seed, seeds),
        Row("bare_shared", "bare trio, seeds share a trio.run", bare_pass_shared, seeds),
    ]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def summarize(name: str, p: Pass, runs: int) -> dict[str, Any]:
    return {
        "name": name,
        "runs": runs,
        "seconds": p.seconds,
        "cpu_seconds": p.cpu,
        "runs_per_s": runs / p.seconds,
        "runs_per_cpu_s": runs / p.cpu if p.cpu > 0 else float("inf"),
        "decisions_per_run": p.decisions / runs,
        "decisions_per_s": p.decisions / p.seconds,
        "us_per_run": {
            "p50": percentile(p.per_run, 50) * 1e6,
            "p90": percentile(p.per_run, 90) * 1e6,
            "p99": percentile(p.per_run, 99) * 1e6,
            "max": max(p.per_run) * 1e6,
        },
    }


#: (row, baseline row) pairs whose seeds/s ratio is reported.
RATIOS = [
    ("dst_cas_false", "bare_per_seed"),
    ("dst_cas_false", "bare_shared"),
    ("dst_cas_false_p0", "bare_per_seed"),
    ("dst_cas_true", "bare_per_seed"),
    ("dst_cas_true_p0", "bare_per_seed"),
    ("approval", "ping"),
    ("approval_p0", "ping"),
    ("replenish_crash", "ping"),
    ("replenish_crash_p0", "ping"),
    ("ping", "bare_per_seed"),
]


def measure(seeds: int, repeat: int, scenario_seeds: int | None = None,
            only: list[str] | None = None) -> dict[str, Any]:
    rows = rows_for(seeds, scenario_seeds if scenario_seeds is not None else max(1, seeds // 5))
    if only:
        rows = [r for r in rows if r.key in only]
    for row in rows:  # warm-up: imports, first trio.run, caches
        row.run(list(range(10_000, 10_000 + min(row.seeds, 2 * CHUNK))))
    best: dict[str, Pass] = {}
    for _ in range(repeat):  # interleaved, so that a busy moment hits every row alike
        for row in rows:
            p = row.run(list(range(row.seeds)))
            if row.key not in best or p.cpu < best[row.key].cpu:
                best[row.key] = p
    figures = {row.key: summarize(row.name, best[row.key], row.seeds) for row in rows}
    ratios = {}
    for key, baseline in RATIOS:
        if key in figures and baseline in figures:
            ratios[f"{key}/{baseline}"] = {
                "wall": figures[key]["runs_per_s"] / figures[baseline]["runs_per_s"],
                "cpu": figures[key]["runs_per_cpu_s"] / figures[baseline]["runs_per_cpu_s"],
            }
    return {
        "workload": {
            "workers": WORKERS,
            "calls_per_worker": CALLS_PER_WORKER,
            "chunk": CHUNK,
            "seeds": seeds,
            "repeat": repeat,
        },
        "python": sys.version.split()[0],
        "trio": trio.__version__,
        "rows": figures,
        "ratios": ratios,
    }


def render(result: dict[str, Any]) -> str:
    w = result["workload"]
    lines = [
        f"counter workload: {w['workers']} workers x {w['calls_per_worker']} choice points; "
        f"best of {w['repeat']} interleaved passes; dst chunks of {w['chunk']} seeds per "
        f"trio.run (python {result['python']}, trio {result['trio']})",
        "",
        f"{'':38} {'seeds':>5} {'runs/s':>7} {'runs/CPUs':>9} {'dec/run':>7} "
        f"{'p50 us':>7} {'p90 us':>7} {'p99 us':>7} {'max us':>7}",
    ]
    for row in result["rows"].values():
        pct = row["us_per_run"]
        lines.append(
            f"{row['name']:38} {row['runs']:5d} {row['runs_per_s']:7,.0f} "
            f"{row['runs_per_cpu_s']:9,.0f} {row['decisions_per_run']:7.1f} "
            f"{pct['p50']:7.0f} {pct['p90']:7.0f} {pct['p99']:7.0f} {pct['max']:7.0f}"
        )
    lines += ["", "seeds/s ratios (above 1: the row is faster than its baseline)",
              f"{'':72} {'wall':>5} {'CPU':>5}"]
    names = {key: row["name"] for key, row in result["rows"].items()}
    for pair, r in result["ratios"].items():
        key, baseline = pair.split("/")
        lines.append(f"  {names[key] + ' / ' + names[baseline]:70} "
                     f"{r['wall']:5.2f} {r['cpu']:5.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=2000,
                        help="seeds per timed pass of the counter and bare rows")
    parser.add_argument("--scenario-seeds", type=int, default=None,
                        help="seeds per pass of ping and approval (a quarter of it for "
                             "replenish_crash); default: --seeds / 5")
    parser.add_argument("--repeat", type=int, default=3, help="timed passes (best one counts)")
    parser.add_argument("--only", action="append", default=None, metavar="ROW",
                        help="measure only this row (repeatable): " + ", ".join(
                            r.key for r in rows_for(1, 1)))
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.repeat < 1 or (args.scenario_seeds or 1) < 1:
        parser.error("--seeds, --scenario-seeds and --repeat must be at least 1")
    result = measure(args.seeds, args.repeat, args.scenario_seeds, args.only)
    print(json.dumps(result, indent=2) if args.json else render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
