"""Approval scenarios: how fast dst finds each planted bug, and how fast it runs.

Seeds to first failure: for each planted bug of the approval scenarios, 20
disjoint ranges of seeds (range i starts at i * 1000) are searched from their
start until the bug's first violation; the median of those 20 counts is the
figure (goal: at most 50).  Throughput: seeds/s of ``approval`` with its
default (passing) config, beside ``counter`` (the kernel's smallest scenario)
measured in the same run, so the ratio survives a slower or busier machine.

Run: ``.venv/bin/python benchmarks/bench_approval.py [--ranges 20] [--seeds 2000]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

from dst.registry import load
from dst.runner.single import RunResult, run_seeds

SCENARIOS = ["approval", "approval_params", "approval_surface", "approval_disclosure"]
#: Seeds per range; a range with no failure counts as this many (a lower bound).
RANGE = 1000


def seeds_to_first_failure(name: str, config: dict, wanted: set[str], start: int) -> int:
    scenario = load(name)
    hits: list[int] = []

    class Found(Exception):
        pass

    def note(r: RunResult) -> None:
        if wanted & set(r.violated):
            hits.append(r.seed)
            raise Found

    for chunk in range(start, start + RANGE, 25):
        try:
            run_seeds(scenario, config, range(chunk, chunk + 25), note)
        except Found:
            return hits[0] - start + 1
    return RANGE


def throughput(name: str, seeds: int) -> float:
    scenario = load(name)
    began = time.perf_counter()
    run_seeds(scenario, scenario.default_config(), range(seeds), lambda r: None)
    return seeds / (time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranges", type=int, default=20)
    parser.add_argument("--seeds", type=int, default=2000, help="seeds for the throughput run")
    args = parser.parse_args()
    print(f"seeds to first failure (median over {args.ranges} disjoint ranges of {RANGE})")
    for name in SCENARIOS:
        scenario = load(name)
        for bug in scenario.planted_bugs:
            config = {**scenario.default_config(), **bug.config}
            counts = [seeds_to_first_failure(name, config, set(bug.breaks), i * RANGE)
                      for i in range(args.ranges)]
            setting = " ".join(f"{k}={v}" for k, v in bug.config.items())
            print(f"  {name:<20} {setting:<45} median {statistics.median(counts):>5}"
                  f"  max {max(counts):>4}  ({', '.join(bug.breaks)})")
    base = throughput("counter", args.seeds)
    rate = throughput("approval", args.seeds)
    print(f"throughput: approval {rate:,.0f} seeds/s, counter {base:,.0f} seeds/s "
          f"(ratio {rate / base:.2f}) on one core")


if __name__ == "__main__":
    main()
