"""Replenisher and durable-runtime performance, as ratios against baselines measured here.

1. seeds/s of ``replenish_crash`` (defaults: crashes, drops, dups on), against
   ``ping`` (the smallest shipped scenario) in the same run;
2. wall time of one simulated replenishment with no faults (quote to goods
   received: one to three weeks of virtual time), how much faster than real
   time that is, and the wall time that rate gives 30 simulated days (goal:
   a 30-day replenishment under 20 ms, i.e. more than 10^8 x real time);
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
from pathlib import Path
from typing import Any

import structlog
import trio
import trio.testing

from dst.env import Json, Store
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
    calm = {"crashes": "0", "drops": "0", "dups": "0"}
    rate, virtual, steps = seeds_per_second("replenish_crash", calm, n)
    ms = 1000 / rate
    speed = virtual / (ms / 1000)
    print(f"one replenishment, no faults: {ms:.1f} ms wall for {virtual / 86400:.1f} simulated "
          f"days ({steps:.0f} steps), {speed:.2e} x real time, i.e. "
          f"{30 * 86400 / speed * 1000:.1f} ms per 30 simulated days (goal: < 20 ms); "
          f"with faults: {1000 / crash:.1f} ms, {crash_virtual / 86400:.1f} days")
    sizes = [10, 100, 1000] if quick else [10, 100, 1000, 5000]
    for label, make in [("memory", lambda d: MemoryStore()),
                        ("sqlite", lambda d: SQLiteStore(Path(d) / "bench.db"))]:
        for size in sizes:
            if label == "sqlite" and size > 1000:
                continue  # each logged step is an fsync'd commit while writing it
            with tempfile.TemporaryDirectory() as d:
                full = wake_up_seconds(make(d), size)
            with tempfile.TemporaryDirectory() as d:
                bounded = wake_up_seconds(make(d), size, limit=40)
            print(f"wake-up {label:6} after {size:5} steps: {full * 1000:8.2f} ms "
                  f"({full / size * 1e6:6.1f} us/step); with continue-as-new every 40: "
                  f"{bounded * 1000:7.2f} ms")


if __name__ == "__main__":
    main()
