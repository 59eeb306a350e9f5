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
    ``spend_mode`` x ``fresh_view`` x ``serialize``: one search with the
    model's two invariants (AtMostOnce, NoResurrection), each with its own
    verdict and its shortest violation (in decisions, and in protocol actions,
    the unit of the published model-checking table), beside TLC's verdict on
    ``specs/approval.tla`` for the same row (``docs/approval.md``); then one
    search with every check.  Seconds are wall time and CPU time of the
    process (the search is single-threaded, so CPU time is what it costs on a
    machine shared with other work).

Wall-clock figures depend on the machine and its load; the schedule counts do
not (the search is deterministic).
"""

from __future__ import annotations

import argparse
import itertools
import json
import resource
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


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def bench_counter() -> dict[str, Any]:
    scenario = load("counter")
    out: dict[str, Any] = {}
    for cas in ("true", "false"):
        switches = {"workers": "2", "increments": "3", "cas": cas}
        config = scenario.config(switches)
        bounds = Bounds(max_steps=scenario.max_steps, max_schedules=None)
        before = _cpu()
        reduced = explore(scenario, config, bounds)
        reduced_cpu = _cpu() - before
        before = _cpu()
        plain = explore(scenario, config, bounds, por=False)
        plain_cpu = _cpu() - before
        out[f"cas={cas}"] = {
            "reduced": {**_row(reduced), "cpu_seconds": round(reduced_cpu, 2)},
            "plain": {**_row(plain), "cpu_seconds": round(plain_cpu, 2)},
            "saved": 1 - reduced.schedules / plain.schedules,
            "random_walk_seeds_per_s": round(_random_rate("counter", switches)),
        }
    return out


#: TLC's verdicts on ``specs/approval.tla`` without a crash (``dst specs check approval``,
#: ``docs/approval.md``), in states (one more than the protocol actions) where an
#: invariant breaks.
TLC = {
    ("after", "false", "false"): {"AtMostOnce": 7, "NoResurrection": 4},
    ("after", "false", "true"): {"NoResurrection": 4},
    ("after", "true", "false"): {"AtMostOnce": 7, "NoResurrection": 4},
    ("after", "true", "true"): {"NoResurrection": 4},
    ("before", "false", "false"): {"AtMostOnce": 9},
    ("before", "false", "true"): {},
    ("before", "true", "false"): {"AtMostOnce": 9},
    ("before", "true", "true"): {},
    ("cas", "false", "false"): {}, ("cas", "false", "true"): {},
    ("cas", "true", "false"): {}, ("cas", "true", "true"): {},
}
SPEC_INVARIANTS = ("AtMostOnce", "NoResurrection")


def _cell(v: dict[str, Any]) -> str:
    if v["verdict"] == "violated":
        return f"violated {v['actions']} ({v['decisions']})"
    return str(v["verdict"])


def bench_approval() -> dict[str, Any]:
    full = load("approval")
    model = only(full, SPEC_INVARIANTS)
    bounds = Bounds(max_steps=full.max_steps, max_schedules=None)
    rows = []
    print(f"{'row':<20}{'schedules':>10}{'states':>8}{'wall':>7}{'cpu':>7}  "
          f"{'AtMostOnce':<22}{'NoResurrection':<22}{'TLC':<26}{'every check: cpu':>12}",
          file=sys.stderr)
    for mode, fresh, serial in itertools.product(("after", "before", "cas"),
                                                 ("false", "true"), ("false", "true")):
        switches = {"spend_mode": mode, "fresh_view": fresh, "serialize": serial,
                    "llm": "happy"}
        config = model.config(switches)
        before = _cpu()
        result = explore(model, config, bounds)
        cpu = _cpu() - before
        row = _row(result, model)
        tlc = TLC[(mode, fresh, serial)]
        verdicts = {}
        for name in SPEC_INVARIANTS:
            verdict, proven = result.verdict(name)
            verdicts[name] = {"verdict": verdict, "proof": proven,
                              "decisions": row["violations"].get(name),
                              "actions": row["actions"].get(name),
                              "tlc": "violated" if name in tlc else "holds",
                              "tlc_actions": tlc[name] - 1 if name in tlc else None}
        before = _cpu()
        every = explore(full, config, bounds)
        every_cpu = _cpu() - before
        rows.append({"config": switches, **row, "cpu_seconds": round(cpu, 2),
                     "verdicts": verdicts,
                     "every_check": {**_row(every), "cpu_seconds": round(every_cpu, 2),
                                     "verdicts": {n: every.verdict(n)[0]
                                                  for n in every.checks}}})

        print(f"{mode:<7}{fresh:<7}{serial:<6}{result.schedules:>10,}{result.states or 0:>8,}"
              f"{result.seconds:>7.2f}{cpu:>7.2f}  {_cell(verdicts['AtMostOnce']):<22}"
              f"{_cell(verdicts['NoResurrection']):<22}{tlc!s:<26}{every_cpu:>12.2f}",
              file=sys.stderr, flush=True)
    return {"rows": rows, "random_walk_seeds_per_s": round(_random_rate(
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
