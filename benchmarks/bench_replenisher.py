"""Replenisher and durable-runtime performance, as ratios against baselines measured here.

1. seeds/s of ``replenish_crash`` (defaults: crashes, drops, dups on), against
   ``ping`` (the smallest shipped scenario) in the same run;
2. wall time of one simulated replenishment with no faults that spans at
   least 30 simulated days (the manager answers on day 3, the goods take 27
   days), timed run by run, and how much faster than real time that is (goal:
   under 10 ms, i.e. more than 10^8 x real time).  A waiting workflow costs
   nothing per simulated day (the clock jumps to the next deadline), so the
   wall time follows the steps taken, not the days spanned;
3. wake-up cost after a crash as a function of log length: a workflow has N
   logged steps; a fresh worker loads the log and replays to the first
   unrecorded step.  Reported per logged step, on MemoryStore and SQLiteStore,
   and for an entity that continues as new every 40 steps (whose wake-up cost
   stays flat however long it has lived).

Run: ``.venv/bin/python benchmarks/bench_replenisher.py [--quick]``.
"""

from __future__ import annotations

import logging
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from itertools import pairwise
from pathlib import Path
from typing import Any

import structlog
import trio
import trio.testing

from dst import FaultPlan, Scenario, Sim
from dst.agents.replenisher import Options
from dst.env import Json, Store
from dst.fakes.replenisher import Kit, WorldConfig, build
from dst.fakes.replenisher.kit import every_replenishment_ends
from dst.registry import load
from dst.runner.single import RunResult, run_seeds
from dst.runtime import LocalNetwork, LocalServices, MemoryStore, SQLiteStore, TrioClock, make_env
from dst.runtime.durable import Context, StepCall, Worker, WorkflowType


def seeds_per_second(name: str, config: dict[str, str], seeds: int) -> tuple[float, float, float]:
    scenario = load(name)
    results: list[RunResult] = []
    t0 = time.perf_counter()
    run_seeds(scenario, scenario.config(config), range(seeds), results.append)
    wall = time.perf_counter() - t0
    virtual = sum(r.virtual_time for r in results) / len(results)
    steps = sum(r.steps for r in results) / len(results)
    return seeds / wall, virtual, steps


def month_long_replenishments(seeds: int) -> list[tuple[RunResult, float]]:
    """``(run, wall seconds)`` of fault-free replenishments spanning a month or more.

    A run's wall time is the time between two consecutive results, so the first
    run of each chunk of seeds also pays for starting its ``trio.run``.
    """
    month = Scenario("replenish_month", doc="one replenishment spanning 30+ simulated days",
                     faults=FaultPlan(), max_steps=3000)

    @month.setup
    def setup(sim: Sim, config: Mapping[str, Any]) -> Kit:
        return build(sim, Options(), WorldConfig(approval_days=(3,), lead_days=(27,)))

    month.at_end("EveryReplenishmentEnds")(every_replenishment_ends)
    results: list[RunResult] = []
    config = month.config({})
    run_seeds(month, config, range(20), results.append)  # warm-up
    results.clear()
    stamps: list[float] = []

    def on_result(result: RunResult) -> None:
        stamps.append(time.perf_counter())
        results.append(result)

    stamps.append(time.perf_counter())
    run_seeds(month, config, range(seeds), on_result)
    return [(result, t1 - t0) for result, (t0, t1) in zip(results, pairwise(stamps), strict=True)]


async def _noop(_: StepCall) -> Json:
    return "x"


def wake_up_seconds(store: Store, steps: int, *, limit: int | None = None) -> float:
    """Seconds for a fresh worker to replay a workflow that has taken ``steps`` steps."""
    reached = trio.Event

    async def wf(ctx: Context) -> Json:
        count: Any = ctx.carried or 0
        while True:
            if count >= steps and not ctx.replaying:
                done.set()
                await trio.sleep_forever()
            await ctx.step("tick", _noop, {"n": count})
            count += 1
            if limit is not None and ctx.steps >= limit:
                ctx.continue_as_new(count)

    async def boot() -> float:
        env = make_env("p", stores={"main": store}, network=LocalNetwork(),
                       services=LocalServices(), seed=0, clock=TrioClock(start=0.0))
        worker = Worker(env, [WorkflowType("wf", wf)])
        t0 = time.perf_counter()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker.run, [("w", "wf", None)])
            await done.wait()
            elapsed = time.perf_counter() - t0
            nursery.cancel_scope.cancel()
        return elapsed

    done = reached()
    trio.run(boot, clock=trio.testing.MockClock(autojump_threshold=0))  # first life: write
    done = reached()
    return trio.run(boot, clock=trio.testing.MockClock(autojump_threshold=0))  # wake up


def main() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    quick = "--quick" in sys.argv
    n = 100 if quick else 400
    ping, _, ping_steps = seeds_per_second("ping", {}, n)
    crash, crash_virtual, crash_steps = seeds_per_second("replenish_crash", {}, n)
    print(f"replenish_crash: {crash:,.0f} seeds/s ({crash_steps:.0f} steps/run), "
          f"ping: {ping:,.0f} seeds/s ({ping_steps:.0f} steps/run); "
          f"ratio {crash / ping:.2f}")
    timed = month_long_replenishments(n)
    runs = [r for r, _ in timed]
    failed = [r.seed for r in runs if r.verdict != "pass" or r.ended == "bound"]
    walls = sorted(wall for _, wall in timed)
    days = sorted(r.virtual_time / 86400 for r in runs)
    mean_ms = 1000 * sum(walls) / len(walls)
    mean_days = sum(days) / len(days)
    print(f"one replenishment, no faults, spanning {days[0]:.1f}-{days[-1]:.1f} simulated days "
          f"(mean {mean_days:.1f}; {sum(r.steps for r in runs) / len(runs):.0f} steps): "
          f"mean {mean_ms:.1f} ms wall, p90 {1000 * walls[int(0.9 * len(walls))]:.1f} ms, "
          f"max {1000 * walls[-1]:.1f} ms (goal: < 10 ms); "
          f"{mean_days * 86400 / (mean_ms / 1000):.2e} x real time"
          + (f"; FAILED seeds {failed}" if failed else ""))
    print(f"replenish_crash with faults: {1000 / crash:.1f} ms per run, "
          f"{crash_virtual / 86400:.1f} simulated days")
    sizes = [10, 100, 1000] if quick else [10, 100, 1000, 5000]
    def memory(_: str) -> Store:
        return MemoryStore()

    def sqlite(directory: str) -> Store:
        return SQLiteStore(Path(directory) / "bench.db")

    makers: list[tuple[str, Callable[[str], Store]]] = [("memory", memory), ("sqlite", sqlite)]
    for label, make in makers:
        for size in sizes:
            if label == "sqlite" and size > 1000:
                continue  # each logged step is an fsync'd commit while writing it
            full = _in_fresh_store(make, size)
            bounded = _in_fresh_store(make, size, limit=40)
            print(f"wake-up {label:6} after {size:5} steps: {full * 1000:8.2f} ms "
                  f"({full / size * 1e6:6.1f} us/step); with continue-as-new every 40: "
                  f"{bounded * 1000:7.2f} ms")


def _in_fresh_store(make: Callable[[str], Store], steps: int, *,
                    limit: int | None = None) -> float:
    """:func:`wake_up_seconds` on a store made in a fresh directory, closed after."""
    with tempfile.TemporaryDirectory() as d:
        store = make(d)
        try:
            return wake_up_seconds(store, steps, limit=limit)
        finally:
            if isinstance(store, SQLiteStore):
                store.close()  # now, not when the collector gets to it


if __name__ == "__main__":
    main()
