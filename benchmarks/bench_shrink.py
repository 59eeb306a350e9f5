"""Shrinking: how short the stories get, and how long it takes.

Part 1, every planted bug: the first failing seed (from seed 0) of each shipped
scenario's planted bug is shrunk with a budget of ``--budget`` seconds; the row
gives the original and the shrunk story in decisions (steps), the faults left,
and the seconds spent.

Part 2, the approval designs against the published model-checking result: for
spend-after (AtMostOnce checked alone, as the model checker was given it, and
NoResurrection with every invariant) and spend-before (the lost update), the
first ``--failures`` failing seeds are each shrunk; the row gives the shrunk
length in *protocol actions* (the runtime's events tagged ``action=``: restore,
check, spend, effect, record; ``dst.verdict_table``), the shortest and longest
over those seeds, beside the shortest any random seed of ``--seeds`` reached,
and the slowest shrink.

Part 3, the shipped failing traces (the pinned ones in ``traces/`` and the
regressions in ``traces/regressions/``): each is shrunk as ``dst shrink`` shrinks
it, and its story (in decisions) is set beside the shortest run that broke the
same invariant first among ``--seeds`` random-walk seeds of the same scenario,
config and fault plan (the runs ``dst run`` makes).

Run: ``.venv/bin/python benchmarks/bench_shrink.py [--part planted|designs|shipped|all]
[--budget 5] [--failures 20] [--seeds 1000] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dst.explore.shrink import ShrinkResult, shrink
from dst.registry import all_scenarios, load
from dst.runner.single import RunResult, plan_from_dict, run_seeds
from dst.scenario import Scenario
from dst.trace.codec import read_trace
from dst.trace.model import Trace
from dst.verdict_table import ACTIONS, only


def actions(trace: Trace) -> int:
    """Protocol actions in a trace, counted as ``dst.verdict_table`` counts them."""
    return sum(1 for r in trace.records
               if r["type"] == "event" and r["fields"].get("action") in ACTIONS)


def failing(scenario: Scenario, config: Mapping[str, Any], wanted: int,
            seeds: int) -> list[RunResult]:
    """The first ``wanted`` failing runs among seeds ``0..seeds-1``, in seed order."""
    found: list[RunResult] = []
    for start in range(0, seeds, 50):
        run_seeds(scenario, config, range(start, min(start + 50, seeds)),
                  lambda r: found.append(r) if r.verdict == "fail" else None)
        if len(found) >= wanted:
            break
    return found[:wanted]


def planted(budget: float) -> list[dict[str, Any]]:
    rows = []
    for scenario in all_scenarios():
        for bug in scenario.planted_bugs:
            config = scenario.config({k: str(v).lower() if isinstance(v, bool) else str(v)
                                      for k, v in bug.config.items()})
            first = failing(scenario, config, 1, 2000)
            row: dict[str, Any] = {"scenario": scenario.name, "config": dict(bug.config)}
            if not first:
                rows.append({**row, "seed": None})
                continue
            res = shrink(scenario, first[0].trace(), budget=budget)
            rows.append({**row, **_row(first[0].seed, res)})
    return rows


def _row(seed: int, res: ShrinkResult) -> dict[str, Any]:
    return {"seed": seed, "invariant": res.invariant, "steps": res.before.steps,
            "shrunk": res.after.steps, "faults": res.before.faults,
            "faults_left": res.after.faults, "lines": res.before.lines,
            "lines_left": res.after.lines, "seconds": round(res.seconds, 2),
            "runs": res.runs, "stopped": res.stopped}


#: (label, switches, invariants checked alone or None for all, published actions).
DESIGNS: Sequence[tuple[str, dict[str, str], list[str] | None, int]] = [
    ("spend after, AtMostOnce alone", {"spend_mode": "after"}, ["AtMostOnce"], 6),
    ("spend after, NoResurrection", {"spend_mode": "after"}, None, 3),
    ("spend before (lost update)", {"spend_mode": "before"}, None, 8),
]


def designs(budget: float, wanted: int, seeds: int) -> list[dict[str, Any]]:
    rows = []
    for label, switches, invariants, target in DESIGNS:
        scenario = load("approval")
        if invariants:
            scenario = only(scenario, invariants)
        config = scenario.config(switches)
        runs: list[RunResult] = []
        run_seeds(scenario, config, range(seeds), runs.append)
        fails = [r for r in runs if r.verdict == "fail"]
        random_best = min(actions(r.trace()) for r in fails)
        shrunk = [shrink(scenario, r.trace(), budget=budget) for r in fails[:wanted]]
        lengths = [actions(s.trace) for s in shrunk]
        rows.append({
            "design": label, "target": target, "random_shortest": random_best,
            "failing_seeds": len(fails), "shrunk": len(shrunk),
            "actions_min": min(lengths), "actions_max": max(lengths),
            "original_actions_max": max(actions(r.trace()) for r in fails[:wanted]),
            "steps": f"{_span([s.before.steps for s in shrunk])} -> "
                     f"{_span([s.after.steps for s in shrunk])}",
            "seconds_max": round(max(s.seconds for s in shrunk), 2),
            "seconds_mean": round(sum(s.seconds for s in shrunk) / len(shrunk), 2),
            "invariants": sorted({s.invariant for s in shrunk}),
        })
    return rows


def _span(values: list[int]) -> str:
    return f"{min(values)}..{max(values)}"


TRACES = Path(__file__).resolve().parent.parent / "traces"


def shipped_traces() -> list[Path]:
    """Every failing trace the repository ships: the pinned corpus and the regressions."""
    paths = sorted(TRACES.glob("*.jsonl")) + sorted((TRACES / "regressions").glob("*.jsonl"))
    return [p for p in paths if read_trace(p).footer.get("verdict") == "fail"]


def random_shortest(scenario: Scenario, trace: Trace, invariant: str,
                    seeds: int) -> dict[str, Any]:
    """The shortest run (in decisions) breaking ``invariant`` first among random-walk seeds
    ``0..seeds-1``, under the config and fault plan ``trace`` ran with."""
    config = scenario.checked_config(trace.header["config"])
    plan = scenario.fault_plan(config)
    recorded = trace.header.get("faults")
    if isinstance(recorded, dict) and recorded != plan.as_dict():
        plan = plan_from_dict(recorded)
    best: list[RunResult] = []
    breaking = [0]

    def keep(r: RunResult) -> None:
        if r.violated and r.violated[0] == invariant:
            breaking[0] += 1
            if not best or r.steps < best[0].steps:
                best[:] = [r]

    began = time.perf_counter()
    run_seeds(scenario, config, range(seeds), keep, faults=plan)
    return {"seeds": seeds, "breaking": breaking[0],
            "shortest": best[0].steps if best else None,
            "shortest_seed": best[0].seed if best else None,
            "seconds": round(time.perf_counter() - began, 1)}


def shipped(budget: float, seeds: int) -> list[dict[str, Any]]:
    rows = []
    for path in shipped_traces():
        trace = read_trace(path)
        scenario = load(trace.header["scenario"])
        res = shrink(scenario, trace, budget=budget, shown=str(path))
        rand = random_shortest(scenario, trace, res.invariant, seeds)
        rows.append({"trace": str(path.relative_to(TRACES.parent)),
                     "scenario": scenario.name, "invariant": res.invariant,
                     "steps": res.before.steps, "shrunk": res.after.steps,
                     "lines_left": res.after.lines, "shrink_seconds": round(res.seconds, 2),
                     "stopped": res.stopped, "random": rand,
                     "ok": rand["shortest"] is None or res.after.steps <= rand["shortest"]})
    return rows


def print_shipped(rows: list[dict[str, Any]]) -> None:
    print(f"{'shipped trace':<56} {'invariant':<20} {'steps':>12} {'shrink s':>8} "
          f"{'random shortest (seed, of N)':>30}  ok")
    for r in rows:
        rand = r["random"]
        best = ("none" if rand["shortest"] is None else
                f"{rand['shortest']} (seed {rand['shortest_seed']}, "
                f"{rand['breaking']} of {rand['seeds']})")
        print(f"{r['trace']:<56} {r['invariant']:<20} {r['steps']:>5} -> {r['shrunk']:<4} "
              f"{r['shrink_seconds']:>8.2f} {best:>30}  {'yes' if r['ok'] else 'NO'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=["planted", "designs", "shipped", "all"],
                        default="all")
    parser.add_argument("--budget", type=float, default=5.0)
    parser.add_argument("--failures", type=int, default=20)
    parser.add_argument("--seeds", type=int, default=1000,
                        help="random seeds each design (part 2) or shipped trace (part 3) "
                             "is set beside")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.part == "shipped":
        rows = shipped(args.budget, args.seeds)
        print(json.dumps(rows, indent=2)) if args.json else print_shipped(rows)
        return
    bugs = planted(args.budget) if args.part in ("planted", "all") else []
    table = designs(args.budget, args.failures, args.seeds) \
        if args.part in ("designs", "all") else []
    ships = shipped(args.budget, args.seeds) if args.part == "all" else []
    if args.json:
        print(json.dumps({"planted": bugs, "designs": table, "shipped": ships}, indent=2))
        return
    print(f"{'scenario':<22} {'planted bug':<44} {'seed':>4} {'steps':>12} "
          f"{'faults':>7} {'story lines':>12} {'seconds':>7}  stopped")
    for r in bugs:
        bug = " ".join(f"{k}={str(v).lower()}" for k, v in r["config"].items())
        if r["seed"] is None:
            print(f"{r['scenario']:<22} {bug:<44}  no failing seed in 2000")
            continue
        print(f"{r['scenario']:<22} {bug:<44} {r['seed']:>4} "
              f"{r['steps']:>5} -> {r['shrunk']:<4} {r['faults']:>2} -> {r['faults_left']:<2} "
              f"{r['lines']:>5} -> {r['lines_left']:<4} {r['seconds']:>7.2f}  {r['stopped']}")
    print()
    print(f"{'approval design':<32} {'target':>6} {'random best':>11} {'shrunk (actions)':>16} "
          f"{'steps':>18} {'max s':>6} {'mean s':>6}")
    for d in table:
        print(f"{d['design']:<32} {d['target']:>6} {d['random_shortest']:>11} "
              f"{d['actions_min']:>7}..{d['actions_max']:<7} {d['steps']:>18} "
              f"{d['seconds_max']:>6.2f} {d['seconds_mean']:>6.2f}")
    if ships:
        print()
        print_shipped(ships)


if __name__ == "__main__":
    main()
