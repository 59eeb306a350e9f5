"""Seeds to the first failure under ``random`` and ``pct``, for every shipped planted bug.

```
python benchmarks/bench_pct.py [--ranges 20] [--budget 500] [--only SCENARIO,...]
    [--pct "pct pct:actors=task"] [--workers 2] [--json]
```

For every planted bug of every shipped scenario (``dst list --json`` lists them:
a switch setting and the invariants it must break), each strategy searches
``--ranges`` disjoint ranges of ``--budget`` seeds (range ``r`` is seeds
``r*budget ..``) and counts the seeds run up to and including the first that
breaks one of the bug's invariants, as ``dst check SCENARIO`` would find it.
Per cell: the median over the ranges (``>budget`` when most ranges found
nothing) and the failure rate per run those searches imply (ranges that found
it / seeds run).

Each pct column also says what pct ran as: its parameters as estimated (``k``
contested steps, ``n`` actors that contended), whether it fell back to the
random walk (the line ``dst run`` prints), and how many of the seeds
``0..SAME_SEEDS-1`` ran with a trace body identical to ``random``'s for the
same seed (0 is PCT proper; all of them is the random walk).

Seeds, not seconds: a run costs about the same under either strategy (pct's
estimate, five runs per worker process and config, is not counted).
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

from dst.explore.strategies import estimate, explore, parse
from dst.registry import all_scenarios, load
from dst.runner.single import RunResult, run_seeds

#: Seeds whose trace bodies are compared with the random walk's.
SAME_SEEDS = 5


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


def what_ran(name: str, bug_index: int, spec: str) -> dict[str, Any]:
    """pct's estimate, its fallback line, and its seeds that ran exactly as random's."""
    scenario = load(name)
    config = scenario.checked_config(scenario.planted_bugs[bug_index].config)
    params = spec.partition(":")[2]
    world = "actor" if "world=actor" in params else "weighted"
    actors = "task" if "actors=task" in params else "process"
    k, n = estimate(scenario, config, world, actors)
    how = explore(spec, scenario, config)
    traces: dict[str, list[list[str]]] = {}
    for s, strategy, plan in (("pct", how.strategy, how.plan),
                              ("random", explore("random", scenario, config).strategy, None)):
        out: list[RunResult] = []
        run_seeds(scenario, config, range(SAME_SEEDS), out.append, strategy=strategy, plan=plan)
        traces[s] = [r.trace().record_lines()[1:] for r in out]
    same = sum(a == b for a, b in zip(traces["pct"], traces["random"], strict=True))
    return {"k": k, "n": n, "fallback": how.fallback, "same": same}


def _job(args: tuple[str, int, str, int, int]) -> tuple[tuple[str, int, str], int]:
    name, index, spec, start, budget = args
    return (name, index, spec), seeds_to_failure(name, index, spec, start, budget)


def _what(args: tuple[str, int, str]) -> tuple[tuple[str, int, str], dict[str, Any]]:
    return args, what_ran(*args)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--ranges", type=int, default=20)
    ap.add_argument("--budget", type=int, default=500)
    ap.add_argument("--pct", default="pct",
                    help="pct specs to set beside random, separated by spaces "
                         "(e.g. \"pct pct:actors=task\")")
    ap.add_argument("--only", default=None, help="only these scenarios (comma-separated)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    pcts = [parse(s) for s in args.pct.split()]
    if not pcts or not all(s.startswith("pct") for s in pcts):
        ap.error("--pct takes pct specs")
    specs = ["random", *pcts]
    only = set(args.only.split(",")) if args.only else None
    bugs = [(s.name, i, b) for s in all_scenarios() if only is None or s.name in only
            for i, b in enumerate(s.planted_bugs)]
    jobs = [(name, i, spec, r * args.budget, args.budget)
            for name, i, _ in bugs for spec in specs for r in range(args.ranges)]
    began = time.monotonic()
    counts: dict[tuple[str, int, str], list[int]] = {}
    with ProcessPoolExecutor(args.workers) as pool:
        ran = dict(pool.map(_what, [(name, i, spec) for name, i, _ in bugs for spec in pcts]))
        for key, n in pool.map(_job, jobs, chunksize=1):
            counts.setdefault(key, []).append(n)
    seconds = time.monotonic() - began
    rows: list[dict[str, Any]] = []
    for name, i, bug in bugs:
        row: dict[str, Any] = {"scenario": name, "config": dict(bug.config),
                               "breaks": list(bug.breaks)}
        for spec in specs:
            got = counts[(name, i, spec)]
            found = sum(n <= args.budget for n in got)
            run = sum(min(n, args.budget) for n in got)
            row[spec] = {"median": statistics.median(got), "found": found,
                         "rate": round(found / run, 4), "counts": got}
            if spec != "random":
                row[spec].update(ran[(name, i, spec)])
        rows.append(row)
    if args.json:
        json.dump({"ranges": args.ranges, "budget": args.budget, "same_seeds": SAME_SEEDS,
                   "seconds": round(seconds, 1), "rows": rows}, sys.stdout, indent=1)
        print()
        return 0
    print(table(rows, specs, args.budget))
    print(f"\nseeds to the first failure: median over {args.ranges} ranges of {args.budget} "
          f"seeds, and the failure rate per run; k,n: pct's estimate; same: of seeds "
          f"0..{SAME_SEEDS - 1}, those whose trace body is random's; {seconds:.0f}s")
    for row in rows:
        for spec in pcts:
            if row[spec]["fallback"]:
                print(f"{_bug(row)} under {spec}: {row[spec]['fallback']}")
    return 0


def table(rows: list[dict[str, Any]], specs: list[str], budget: int) -> str:
    """A Markdown table: one row per planted bug, median and rate per strategy."""
    head = ["scenario", "config"]
    for spec in specs:
        head += [f"{spec} median", f"{spec} rate"]
        if spec != "random":
            head += [f"{spec} k,n", "same"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row["scenario"], _config(row["config"])]
        for spec in specs:
            cell = row[spec]
            median = cell["median"]
            cells += [f">{budget}" if median > budget else f"{median:g}",
                      f"{100 * cell['rate']:.1f}%"]
            if spec != "random":
                fell = " (fell back)" if cell["fallback"] else ""
                cells += [f"{cell['k']},{cell['n']}{fell}", f"{cell['same']}/{SAME_SEEDS}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _config(config: dict[str, Any]) -> str:
    return " ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}"
                    for k, v in config.items())


def _bug(row: dict[str, Any]) -> str:
    return f"{row['scenario']} {_config(row['config'])}"


if __name__ == "__main__":
    sys.exit(main())
