"""What one simulated seed costs, against the same workload on bare trio.

Usage::

    python benchmarks/bench_kernel.py [--seeds N] [--repeat 3] [--json]

The workload is the ``counter`` scenario's: 2 workers, each making 15 store
calls (7 increments of read-then-put, then a final read), so every run is 30
choice points.  Four measurements, all in this one process, so that the
ratios compare like with like on whatever machine runs them:

``dst counter cas=false``
    ``dst.runner.single.run_seeds`` over chunks of seeds, one shared
    ``trio.run`` per chunk, exactly as ``dst run`` does.  The scenario's
    invariant is evaluated after every step as usual, but its verdict is
    discarded: the planted lost update would otherwise stop most runs after a
    handful of steps, and the point here is a fixed 30 decisions per run.
``dst counter cas=true``
    the shipped default config, unchanged: it passes, and its compare-and-set
    retries make the decision count vary per seed (reported as decisions/run).
``bare trio, one trio.run per seed``
    2 tasks x 15 awaits of a trivial async store (``checkpoint`` then a dict
    read or write): what a user would write to run the code once.
``bare trio, seeds share a trio.run``
    the same tasks, many "seeds" back to back inside one ``trio.run``.

Throughput is the best of ``--repeat`` timed passes (after a warm-up pass);
per-run percentiles come from the best pass.  Times are ``time.perf_counter``.
The dst side also records 28 structlog events per run (the scenario's logging),
which the bare side does not do; that is part of what dst costs its users.
"""

from __future__ import annotations

import argparse
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
    """One timed pass: total wall time, per-run times, decisions made."""

    seconds: float
    per_run: list[float]
    decisions: int


# -- dst --------------------------------------------------------------------


def _chunks(seeds: list[int]) -> Iterator[list[int]]:
    for i in range(0, len(seeds), CHUNK):
        yield seeds[i : i + CHUNK]


def dst_pass(scenario: Scenario, config: dict[str, Any], seeds: list[int]) -> Pass:
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
        if r.verdict != "pass":
            raise RuntimeError(f"benchmark run of seed {r.seed} failed: {r.violated}")

    start = time.perf_counter()
    for chunk in _chunks(seeds):
        # The first run of a chunk carries the trio.run start-up, as in production.
        last = time.perf_counter()
        run_seeds(scenario, config, chunk, on_result)
    return Pass(time.perf_counter() - start, per_run, decisions)


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
    start = time.perf_counter()
    for _ in seeds:
        t0 = time.perf_counter()
        trio.run(_bare_once)
        per_run.append(time.perf_counter() - t0)
    return Pass(time.perf_counter() - start, per_run, len(seeds) * WORKERS * CALLS_PER_WORKER)


def bare_pass_shared(seeds: list[int]) -> Pass:
    per_run: list[float] = []

    async def many(chunk: list[int]) -> None:
        last = time.perf_counter()
        for _ in chunk:
            await _bare_once()
            now = time.perf_counter()
            per_run.append(now - last)
            last = now

    start = time.perf_counter()
    for chunk in _chunks(seeds):
        trio.run(many, chunk)
    return Pass(time.perf_counter() - start, per_run, len(seeds) * WORKERS * CALLS_PER_WORKER)


# -- measuring --------------------------------------------------------------------


def best_of(run: Callable[[list[int]], Pass], seeds: int, repeat: int) -> Pass:
    """One warm-up pass (a few chunks), then the fastest of ``repeat`` timed passes."""
    run(list(range(10_000, 10_000 + min(seeds, 2 * CHUNK))))
    passes = [run(list(range(seeds))) for _ in range(repeat)]
    return min(passes, key=lambda p: p.seconds)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def summarize(name: str, p: Pass, runs: int) -> dict[str, Any]:
    return {
        "name": name,
        "runs": runs,
        "seconds": p.seconds,
        "runs_per_s": runs / p.seconds,
        "decisions_per_run": p.decisions / runs,
        "decisions_per_s": p.decisions / p.seconds,
        "us_per_run": {
            "p50": percentile(p.per_run, 50) * 1e6,
            "p90": percentile(p.per_run, 90) * 1e6,
            "p99": percentile(p.per_run, 99) * 1e6,
            "max": max(p.per_run) * 1e6,
        },
    }


def measure(seeds: int, repeat: int) -> dict[str, Any]:
    base = counter.scenario.default_config()
    fixed = _measured_counter()
    rows = {
        "dst_cas_false": summarize(
            "dst counter cas=false (shared trio.run)",
            best_of(lambda s: dst_pass(fixed, {**base, "cas": False}, s), seeds, repeat),
            seeds,
        ),
        "dst_cas_true": summarize(
            "dst counter cas=true (shipped default)",
            best_of(lambda s: dst_pass(counter.scenario, base, s), seeds, repeat),
            seeds,
        ),
        "bare_per_seed": summarize(
            "bare trio, one trio.run per seed", best_of(bare_pass_per_seed, seeds, repeat), seeds
        ),
        "bare_shared": summarize(
            "bare trio, seeds share a trio.run", best_of(bare_pass_shared, seeds, repeat), seeds
        ),
    }
    # Ratio > 1: dst runs more seeds per second than the bare baseline does.
    dst = rows["dst_cas_false"]["runs_per_s"]
    ratios = {
        "dst_vs_bare_per_seed": dst / rows["bare_per_seed"]["runs_per_s"],
        "dst_vs_bare_shared": dst / rows["bare_shared"]["runs_per_s"],
        "dst_cas_true_vs_bare_per_seed": (
            rows["dst_cas_true"]["runs_per_s"] / rows["bare_per_seed"]["runs_per_s"]
        ),
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
        "rows": rows,
        "ratios": ratios,
    }


def render(result: dict[str, Any]) -> str:
    w = result["workload"]
    lines = [
        f"workload: {w['workers']} workers x {w['calls_per_worker']} choice points; "
        f"{w['seeds']} seeds, best of {w['repeat']}; dst chunks of {w['chunk']} seeds per "
        f"trio.run (python {result['python']}, trio {result['trio']})",
        "",
        f"{'':42} {'runs/s':>8} {'dec/run':>7} {'dec/s':>9} "
        f"{'p50 us':>7} {'p90 us':>7} {'p99 us':>7} {'max us':>7}",
    ]
    for row in result["rows"].values():
        pct = row["us_per_run"]
        lines.append(
            f"{row['name']:42} {row['runs_per_s']:8,.0f} {row['decisions_per_run']:7.1f} "
            f"{row['decisions_per_s']:9,.0f} {pct['p50']:7.0f} {pct['p90']:7.0f} "
            f"{pct['p99']:7.0f} {pct['max']:7.0f}"
        )
    r = result["ratios"]
    lines += [
        "",
        "runs/s ratio (above 1: dst is faster than the baseline)",
        f"  dst cas=false / bare, one trio.run per seed   {r['dst_vs_bare_per_seed']:.2f}",
        f"  dst cas=false / bare, shared trio.run         {r['dst_vs_bare_shared']:.2f}",
        f"  dst cas=true  / bare, one trio.run per seed   {r['dst_cas_true_vs_bare_per_seed']:.2f}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=2000, help="seeds per timed pass")
    parser.add_argument("--repeat", type=int, default=3, help="timed passes (best one counts)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.repeat < 1:
        parser.error("--seeds and --repeat must be at least 1")
    result = measure(args.seeds, args.repeat)
    print(json.dumps(result, indent=2) if args.json else render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
