"""Seeds to the first failure, per planted bug and strategy: random, pct, swarm.

```
.venv/bin/python benchmarks/bench_strategies.py [--ranges 20] [--budget 500]
    [--strategies "random pct swarm"] [--only SCENARIO] [--workers 2] [--json]
```

For every planted bug of every shipped scenario (its switch setting and the
invariants it must break), each strategy searches ``--ranges`` disjoint seed
ranges of ``--budget`` seeds each (range ``r`` is seeds ``r*budget ..``), and
counts the seeds run up to and including the first one that breaks one of the
bug's invariants.  The table gives the median over the ranges (lower is better;
a range that did not find the bug counts as ``budget + 1``, and a median that
large is printed as ``>budget``) and the failure rate per run those searches
imply (ranges that found it / seeds run in all ranges: the estimate of a
geometric distribution's parameter, steadier than the median of 20 draws).

Seeds, not seconds: a strategy's worth is how few runs it needs, and a run
costs about the same under every strategy (PCT's one-off estimate of a run's
length, five runs per scenario and config, is not counted).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from dst.explore.strategies import explore, parse
from dst.registry import all_scenarios, load
from dst.runner.single import RunResult, run_seeds


def seeds_to_failure(name: str, bug_index: int, spec: str, start: int, budget: int) -> int:
    """Seeds from ``start`` up to and including the first that breaks the bug (budget+1: none)."""
    scenario = load(name)
    bug = scenario.planted_bugs[bug_index]
    config = scenario.checked_config(bug.config)
    how = explore(spec, scenario, config)
    breaks = set(bug.breaks)
    found: list[int] = []

    def seeds() -> Iterator[int]:
        for seed in range(start, start + budget):
            if found:
                return
            yield seed

    def note(r: RunResult) -> None:
        if not found and breaks & set(r.violated):
            found.append(r.seed)

    run_seeds(scenario, config, seeds(), note, strategy=how.strategy, plan=how.plan)
    return found[0] - start + 1 if found else budget + 1


def _job(args: tuple[str, int, str, int, int]) -> tuple[tuple[str, int, str], int]:
    name, index, spec, start, budget = args
    return (name, index, spec), seeds_to_failure(name, index, spec, start, budget)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranges", type=int, default=20)
    ap.add_argument("--budget", type=int, default=500)
    ap.add_argument("--strategies", default="random pct swarm",
                    help="strategy specs, separated by spaces (pct:d=3,k=40 is one)")
    ap.add_argument("--only", default=None, help="only these scenarios (comma-separated)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    specs = [parse(s) for s in args.strategies.split()]
    only = set(args.only.split(",")) if args.only else None
    bugs = [(s.name, i, b) for s in all_scenarios() if only is None or s.name in only
            for i, b in enumerate(s.planted_bugs)]
    jobs = [(name, i, spec, r * args.budget, args.budget)
            for name, i, _ in bugs for spec in specs for r in range(args.ranges)]
    began = time.monotonic()
    counts: dict[tuple[str, int, str], list[int]] = {}
    with ProcessPoolExecutor(args.workers) as pool:
        for key, n in pool.map(_job, jobs, chunksize=1):
            counts.setdefault(key, []).append(n)
    rows: list[dict[str, Any]] = []
    for name, i, bug in bugs:
        row: dict[str, Any] = {"scenario": name, "bug": dict(bug.config),
                               "breaks": list(bug.breaks)}
        for spec in specs:
            got = counts[(name, i, spec)]
            found = sum(n <= args.budget for n in got)
            run = sum(min(n, args.budget) for n in got)
            row[spec] = {"median": statistics.median(got), "found": found,
                         "rate": round(found / run, 4), "counts": got}
        rows.append(row)
    seconds = time.monotonic() - began
    if args.json:
        json.dump({"ranges": args.ranges, "budget": args.budget, "seconds": round(seconds, 1),
                   "rows": rows}, sys.stdout, indent=1)
        print()
        return 0
    width = max(len(_label(r)) for r in rows)
    print(f"{'planted bug':<{width}}  " + "  ".join(f"{s:>16}" for s in specs))
    for row in rows:
        cells = []
        for spec in specs:
            cell = row[spec]
            median = cell["median"]
            shown = f">{args.budget}" if median > args.budget else f"{median:g}"
            cells.append(f"{shown:>6} {100 * cell['rate']:>7.2f}%")
        print(f"{_label(row):<{width}}  " + "  ".join(f"{c:>16}" for c in cells))
    print(f"median seeds to the first failure over {args.ranges} ranges of {args.budget} "
          f"seeds, and the failure rate per run; {seconds:.0f}s")
    return 0


def _label(row: dict[str, Any]) -> str:
    bug = " ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}"
                   for k, v in row["bug"].items())
    return f"{row['scenario']} {bug}"


if __name__ == "__main__":
    sys.exit(main())
