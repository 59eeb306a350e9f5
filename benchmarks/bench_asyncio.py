"""What an asyncio process costs: ``counter_asyncio`` against ``counter``, in one run.

Usage::

    python benchmarks/bench_asyncio.py [--seeds 2000] [--repeat 3] [--json]

``counter_asyncio`` is ``counter`` written with asyncio and run as asyncio
processes (``sim.process(..., runtime="asyncio")``): the same workers, the
same store calls, the same decisions (its traces are ``counter``'s, record for
record: ``tests/test_asyncio.py``).  So the ratio between the two rows is what
running the code on dst's event loop costs over running it as trio tasks: the
loop's driver (a trio task) stepping the asyncio task, and the store calls it
makes for it (the driver parks at the call itself when its loop has nothing
else to do, as each call here finds it; otherwise a bridge task makes it).

Rows, each with the shipped fault plan (preemption at checkpoints on) and at
``preemptions=0``:

``counter cas=false`` / ``counter_asyncio cas=false``
    the planted lost update, its invariant's verdict ignored so that every run
    makes all of its 30 store calls (as ``bench_kernel.py`` measures it);
``counter`` / ``counter_asyncio`` (shipped default, ``cas=true``)
    passes; compare-and-set retries make the decisions per run vary.

With detangle installed (``pip install detangle``; the interpreter of
``bench_peers.py``), one more row: ``detangle counter`` and ``detangle counter
cas=false``, the same asyncio workers over a dict store that yields
(``asyncio.sleep(0)``) at each call, run by ``detangle.execute`` with its default
strategy as ``detangle.explore`` runs them (every seed runs, failing or not), an
``assert`` of the count at the end; ``x trio`` is then its cost over dst's trio
``counter`` row, and ``vs detangle`` (on the ``counter_asyncio`` rows) is dst's
asyncio seeds/s over detangle's.

Passes are interleaved (one pass of each row, then the next round); each row
gets a warm-up pass, then ``--repeat`` timed ones, and the best counts.  Seeds
per second are per CPU second of this process (``time.process_time``), the
steadier measure on a shared machine, and per wall second.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib
import json
import time
from typing import Any

from dst.runner.single import RunResult, run_seeds
from dst.scenario import Scenario

try:  # not a dependency of dst: its rows are added when it is installed
    import detangle  # type: ignore[import-not-found,unused-ignore]
    from detangle.strategies import (  # type: ignore[import-not-found,unused-ignore]
        make_strategy,
    )
except ImportError:
    detangle = None


def _ignoring(check: Any) -> Any:
    def ignored(world: Any) -> bool:
        check(world)
        return True

    return ignored


def _scenario(module: str, *, verdicts: bool, preemptions: int | None) -> Scenario:
    """The shipped scenario; its invariant's verdict ignored unless ``verdicts``."""
    shipped: Scenario = importlib.import_module(f"scenarios.{module}").scenario
    bench = Scenario(shipped.name, doc=shipped.doc, max_steps=shipped.max_steps)
    bench.switches = dict(shipped.switches)
    setup = importlib.import_module(f"scenarios.{module}").setup
    bench.setup(setup)
    for name, check in shipped.invariants.items():
        bench.invariant(name)(check if verdicts else _ignoring(check))
    if preemptions is not None:
        bench.faults = dataclasses.replace(shipped.fault_plan({}), preemptions=preemptions)
    return bench


@dataclasses.dataclass
class Row:
    name: str
    scenario: Scenario | None  # None: a peer's row
    config: dict[str, Any]
    cpu: float = float("inf")
    wall: float = float("inf")
    decisions: int = 0
    runs: int = 0

    def run(self, seeds: int, offset: int) -> None:
        results: list[RunResult] = []
        wall, cpu = time.perf_counter(), time.process_time()
        assert self.scenario is not None
        run_seeds(self.scenario, self.config, range(offset, offset + seeds), results.append)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        self.cpu, self.wall = min(self.cpu, cpu), min(self.wall, wall)
        self.decisions, self.runs = sum(r.steps for r in results), len(results)


class _DictStore:
    """counter's store calls over a dict, each a yield to the loop first."""

    def __init__(self) -> None:
        self.data: dict[str, int] = {}
        self.calls = 0

    async def get(self, key: str) -> int | None:
        await asyncio.sleep(0)
        self.calls += 1
        return self.data.get(key)

    async def put(self, key: str, value: int) -> None:
        await asyncio.sleep(0)
        self.calls += 1
        self.data[key] = value

    async def cas(self, key: str, expected: int | None, new: int) -> bool:
        await asyncio.sleep(0)
        self.calls += 1
        if self.data.get(key) != expected:
            return False
        self.data[key] = new
        return True


def _detangle_counter(cas: bool, workers: int, increments: int) -> Any:
    """counter_asyncio's workers as a plain asyncio program, for detangle."""

    async def worker(store: _DictStore) -> None:
        for _ in range(increments):
            while True:
                value = await store.get("n") or 0
                if not cas:
                    await store.put("n", value + 1)
                    break
                if await store.cas("n", value or None, value + 1):
                    break
        await store.get("n")

    async def program() -> None:
        store = _DictStore()
        await asyncio.gather(*(worker(store) for _ in range(workers)))
        assert store.data["n"] == workers * increments, "an increment was lost"

    return program


@dataclasses.dataclass
class DetangleRow(Row):
    """The same workload under detangle: run ``i`` of ``detangle.explore(fn, seed=0)``."""

    def run(self, seeds: int, offset: int) -> None:
        program = _detangle_counter(**self.config)
        strategy = make_strategy("auto", 0)
        config = detangle.SimConfig()
        wall, cpu = time.perf_counter(), time.process_time()
        steps = 0
        for i in range(offset, offset + seeds):
            strategy.start(i)  # what explore's loop does for run i
            result = detangle.execute(program, config=config, strategy=strategy)
            strategy.finish(result.decisions, result.failure is not None)
            steps += result.steps
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        self.cpu, self.wall = min(self.cpu, cpu), min(self.wall, wall)
        self.decisions, self.runs = steps, seeds


def _rows() -> list[Row]:
    rows = []
    for preemptions in (None, 0):
        tag = "" if preemptions is None else " preemptions=0"
        for module in ("counter", "counter_asyncio"):
            lost = _scenario(module, verdicts=False, preemptions=preemptions)
            rows.append(Row(f"{module} cas=false{tag}", lost, lost.checked_config({"cas": False})))
            shipped = _scenario(module, verdicts=True, preemptions=preemptions)
            rows.append(Row(f"{module}{tag}", shipped, shipped.checked_config({})))
    if detangle is not None:
        config = _scenario("counter", verdicts=True, preemptions=None).default_config()
        sizes = {"workers": config["workers"], "increments": config["increments"]}
        rows.append(DetangleRow("detangle counter cas=false", None, {"cas": False, **sizes}))
        rows.append(DetangleRow("detangle counter", None, {"cas": True, **sizes}))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = _rows()
    for row in rows:  # warm-up
        row.run(min(args.seeds, 200), 10_000_000)
        row.cpu = row.wall = float("inf")
    for _ in range(args.repeat):
        for row in rows:
            row.run(args.seeds, 0)
    by_name = {row.name: row for row in rows}
    out = []
    for row in rows:
        trio_name = row.name.replace("counter_asyncio", "counter").replace("detangle ", "")
        trio_row = by_name[trio_name]
        peer = by_name.get(row.name.replace("counter_asyncio", "detangle counter"))
        out.append({
            "row": row.name, "seeds_per_cpu_s": row.runs / row.cpu,
            "seeds_per_wall_s": row.runs / row.wall, "decisions_per_run": row.decisions / row.runs,
            "us_per_decision": 1e6 * row.cpu / max(row.decisions, 1),
            "cost_vs_trio": row.cpu / trio_row.cpu,
            "vs_detangle": (peer.cpu / peer.runs) / (row.cpu / row.runs)
            if peer is not None and row.name.startswith("counter_asyncio") else None,
        })
    if args.json:
        print(json.dumps({"seeds": args.seeds, "rows": out}, indent=2))
        return
    print(f"{'row':<40} {'seeds/cpu-s':>11} {'seeds/s':>9} {'decisions/run':>13} "
          f"{'us/decision':>11} {'x trio':>7} {'vs detangle':>11}")
    for r in out:
        print(f"{r['row']:<40} {r['seeds_per_cpu_s']:>11,.0f} {r['seeds_per_wall_s']:>9,.0f} "
              f"{r['decisions_per_run']:>13.1f} {r['us_per_decision']:>11.1f} "
              f"{r['cost_vs_trio']:>7.2f} "
              + (f"{r['vs_detangle']:>11.2f}" if r["vs_detangle"] is not None else f"{'':>11}"))


if __name__ == "__main__":
    main()
