"""What an asyncio process costs: ``counter_asyncio`` against ``counter``, in one run.

Usage::

    python benchmarks/bench_asyncio.py [--seeds 2000] [--repeat 3] [--json]

``counter_asyncio`` is ``counter`` written with asyncio and run as asyncio
processes (``sim.process(..., runtime="asyncio")``): the same workers, the
same store calls, the same decisions (its traces are ``counter``'s, record for
record: ``tests/test_asyncio.py``).  So the ratio between the two rows is what
running the code on dst's event loop costs over running it as trio tasks: the
loop's driver (a trio task) stepping the asyncio task, and a bridge (a trio
task) per store call.

Rows, each with the shipped fault plan (preemption at checkpoints on) and at
``preemptions=0``:

``counter cas=false`` / ``counter_asyncio cas=false``
    the planted lost update, its invariant's verdict ignored so that every run
    makes all of its 30 store calls (as ``bench_kernel.py`` measures it);
``counter`` / ``counter_asyncio`` (shipped default, ``cas=true``)
    passes; compare-and-set retries make the decisions per run vary.

Passes are interleaved (one pass of each row, then the next round); each row
gets a warm-up pass, then ``--repeat`` timed ones, and the best counts.  Seeds
per second are per CPU second of this process (``time.process_time``), the
steadier measure on a shared machine, and per wall second.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import time
from typing import Any

from dst.runner.single import RunResult, run_seeds
from dst.scenario import Scenario


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
    scenario: Scenario
    config: dict[str, Any]
    cpu: float = float("inf")
    wall: float = float("inf")
    decisions: int = 0
    runs: int = 0

    def run(self, seeds: int, offset: int) -> None:
        results: list[RunResult] = []
        wall, cpu = time.perf_counter(), time.process_time()
        run_seeds(self.scenario, self.config, range(offset, offset + seeds), results.append)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        self.cpu, self.wall = min(self.cpu, cpu), min(self.wall, wall)
        self.decisions, self.runs = sum(r.steps for r in results), len(results)


def _rows() -> list[Row]:
    rows = []
    for preemptions in (None, 0):
        tag = "" if preemptions is None else " preemptions=0"
        for module in ("counter", "counter_asyncio"):
            lost = _scenario(module, verdicts=False, preemptions=preemptions)
            rows.append(Row(f"{module} cas=false{tag}", lost, lost.checked_config({"cas": False})))
            shipped = _scenario(module, verdicts=True, preemptions=preemptions)
            rows.append(Row(f"{module}{tag}", shipped, shipped.checked_config({})))
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
        trio_row = by_name[row.name.replace("counter_asyncio", "counter")]
        out.append({
            "row": row.name, "seeds_per_cpu_s": row.runs / row.cpu,
            "seeds_per_wall_s": row.runs / row.wall, "decisions_per_run": row.decisions / row.runs,
            "us_per_decision": 1e6 * row.cpu / max(row.decisions, 1),
            "cost_vs_trio": row.cpu / trio_row.cpu,
        })
    if args.json:
        print(json.dumps({"seeds": args.seeds, "rows": out}, indent=2))
        return
    print(f"{'row':<40} {'seeds/cpu-s':>11} {'seeds/s':>9} {'decisions/run':>13} "
          f"{'us/decision':>11} {'x trio':>7}")
    for r in out:
        print(f"{r['row']:<40} {r['seeds_per_cpu_s']:>11,.0f} {r['seeds_per_wall_s']:>9,.0f} "
              f"{r['decisions_per_run']:>13.1f} {r['us_per_decision']:>11.1f} "
              f"{r['cost_vs_trio']:>7.2f}")


if __name__ == "__main__":
    main()
