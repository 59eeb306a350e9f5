"""What bounded exhaustive exploration (`dst explore`) costs, and what reduction saves.

Usage::

    python benchmarks/bench_explore.py [--part counter|approval|all] [--json]

``counter``
    ``counter -c workers=2 -c increments=3``, with compare-and-set (proven) and
    with a blind put (the lost update found), each explored with sleep-set
    reduction and with plain depth-first search: schedules run, seconds, and the
    share of schedules reduction saved.  The baseline for the cost of one
    schedule is a random walk over the same config in the same process
    (``dst run``'s seeds/s).
``approval``
    ``approval -c llm=happy`` (two turns, faults off, the good model) for every
    ``spend_mode`` x ``fresh_view`` x ``serialize``, every check at once; a
    check left unproven because another one broke first is then explored alone
    (``--invariant``), as a model checker given one invariant would.  One row is
    also explored with the adversarial model, to show what its data choices add.

Wall-clock figures depend on the machine and its load; the schedule counts do
not (the search is deterministic).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from typing import Any

from dst.explore.exhaustive import Bounds, Exploration, explore, record
from dst.registry import load
from dst.runner.single import run_seeds
from dst.scenario import Scenario
from dst.verdict_table import only, protocol_actions


def _row(result: Exploration, scenario: Scenario | None = None) -> dict[str, Any]:
    """The figures of one search; with ``scenario``, each shortest violation is also
    counted in protocol actions (restore, check, spend, effect, record), the unit of
    the published model-checking table (``docs/approval.md``)."""
    row = {"schedules": result.schedules, "exhausted": result.exhausted,
           "proof": result.proof, "seconds": round(result.seconds, 2),
           "sleep_blocked": result.ended["sleep"], "max_depth": result.max_depth,
           "violations": {n: v.steps for n, v in sorted(result.violations.items())}}
    if scenario is not None:
        row["actions"] = {n: protocol_actions(record(scenario, result, v))
                          for n, v in sorted(result.violations.items())}
    return row


def _random_rate(name: str, switches: dict[str, str], seeds: int = 500) -> float:
    scenario = load(name)
    config = scenario.config(switches)
    start = time.perf_counter()
    run_seeds(scenario, config, range(seeds), lambda r: None)
    return seeds / (time.perf_counter() - start)


def bench_counter() -> dict[str, Any]:
    scenario = load("counter")
    out: dict[str, Any] = {}
    for cas in ("true", "false"):
        switches = {"workers": "2", "increments": "3", "cas": cas}
        config = scenario.config(switches)
        bounds = Bounds(max_steps=scenario.max_steps, max_schedules=None)
        reduced = explore(scenario, config, bounds)
        plain = explore(scenario, config, bounds, por=False)
        out[f"cas={cas}"] = {
            "reduced": _row(reduced), "plain": _row(plain),
            "saved": 1 - reduced.schedules / plain.schedules,
            "random_walk_seeds_per_s": round(_random_rate("counter", switches)),
        }
    return out


def bench_approval() -> dict[str, Any]:
    scenario = load("approval")
    bounds = Bounds(max_steps=scenario.max_steps, max_schedules=None)
    rows = []
    for mode, fresh, serial in itertools.product(("after", "before", "cas"),
                                                 ("false", "true"), ("false", "true")):
        switches = {"spend_mode": mode, "fresh_view": fresh, "serialize": serial,
                    "llm": "happy"}
        config = scenario.config(switches)
        result = explore(scenario, config, bounds)
        verdicts: dict[str, Any] = {}
        alone: dict[str, Any] = {}
        for name in scenario.all_checks:
            verdict, proven = result.verdict(name)
            if not proven and name == "AtMostOnce":
                single_scenario = only(scenario, [name])
                single = explore(single_scenario, config, bounds)
                alone[name] = _row(single, single_scenario)
                verdict, proven = single.verdict(name)
            verdicts[name] = verdict if proven else f"{verdict} (unproven)"
        row = _row(result, scenario)
        rows.append({"config": switches, **row, "verdicts": verdicts, "alone": alone})
        print(f"{mode:<7}{fresh:<7}{serial:<7}{result.schedules:>8,}"
              f"{result.seconds:>9.2f}s  {row['violations']} {row['actions']}  alone={alone}",
              file=sys.stderr, flush=True)
    adversarial = {"spend_mode": "after", "fresh_view": "false", "serialize": "true",
                   "llm": "adversarial"}
    adv = explore(scenario, scenario.config(adversarial), bounds)
    return {"rows": rows, "adversarial": {"config": adversarial, **_row(adv)},
            "random_walk_seeds_per_s": round(_random_rate(
                "approval", {"llm": "happy", "crashes": "0", "drops": "0", "dups": "0"}))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["counter", "approval", "all"], default="all")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out: dict[str, Any] = {}
    if args.part in ("counter", "all"):
        out["counter"] = bench_counter()
    if args.part in ("approval", "all"):
        out["approval"] = bench_approval()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
