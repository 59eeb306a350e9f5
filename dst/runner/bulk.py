"""Bulk runs: seeds in chunks, on this process or on worker processes.

A chunk of seeds shares one ``trio.run`` (see ``dst.sim.run``).  Workers get the
scenario by reference and a chunk of seeds, and send back one small summary per
seed plus the full trace text of failing seeds only: passing runs are never
rendered, which keeps the hot path free of JSON.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..registry import load
from .single import RunResult, run_seeds

#: Seeds per task sent to a worker: big enough to amortise ``trio.run`` and the
#: inter-process round trip, small enough for a smooth progress display and a
#: prompt stop when ``--for`` runs out.
CHUNK = 200


@dataclass(frozen=True)
class SeedOutcome:
    seed: int
    verdict: str
    violated: tuple[str, ...]
    steps: int
    trace_text: str | None  # only for failing seeds (or all, when asked)
    nondeterminism: str | None = None


@dataclass
class BulkSummary:
    runs: int = 0
    failures: list[SeedOutcome] = field(default_factory=list)
    by_invariant: dict[str, int] = field(default_factory=dict)
    nondeterministic: list[SeedOutcome] = field(default_factory=list)
    decisions: int = 0


def _outcome(r: RunResult, keep_trace: bool) -> SeedOutcome:
    text = r.trace().text() if (keep_trace or r.verdict == "fail") else None
    return SeedOutcome(r.seed, r.verdict, tuple(r.violated), r.steps, text)


def run_chunk(
    scenario_ref: str, config: Mapping[str, Any], seeds: list[int], check_determinism: bool
) -> list[SeedOutcome]:
    """Run one chunk (in a worker or in this process)."""
    scenario = load(scenario_ref)
    first: list[RunResult] = []
    run_seeds(scenario, config, seeds, first.append)
    outcomes = [_outcome(r, False) for r in first]
    if not check_determinism:
        return outcomes
    second: list[RunResult] = []
    run_seeds(scenario, config, seeds, second.append)
    checked = []
    for a, b, o in zip(first, second, outcomes, strict=True):
        diff = first_difference(a, b)
        if diff is not None:
            o = SeedOutcome(o.seed, o.verdict, o.violated, o.steps,
                            a.trace().text(), nondeterminism=diff)
        checked.append(o)
    return checked


def first_difference(a: RunResult, b: RunResult) -> str | None:
    """The first record where two runs of one seed differ, described; None if identical."""
    if a.sim.records == b.sim.records:
        return None
    la, lb = a.trace().record_lines(), b.trace().record_lines()
    for i, (x, y) in enumerate(zip(la, lb, strict=False)):
        if x != y:
            return f"record {i + 1} differs:\n    first run:  {x}\n    second run: {y}"
    if len(la) != len(lb):
        return f"first run has {len(la)} records, second run {len(lb)}"
    return None


def seed_chunks(start: int, stop: int | None) -> Iterator[list[int]]:
    seed = start
    while stop is None or seed < stop:
        end = seed + CHUNK if stop is None else min(seed + CHUNK, stop)
        yield list(range(seed, end))
        seed = end


def run_bulk(
    scenario_ref: str,
    config: Mapping[str, Any],
    start: int,
    stop: int | None,
    *,
    workers: int = 1,
    deadline: float | None = None,
    check_determinism: bool = False,
    on_chunk: Callable[[BulkSummary, list[SeedOutcome]], None] | None = None,
) -> BulkSummary:
    """Run seeds ``start..stop`` (open-ended until ``deadline`` when stop is None)."""
    summary = BulkSummary()

    def absorb(outcomes: list[SeedOutcome]) -> None:
        for o in outcomes:
            summary.runs += 1
            summary.decisions += o.steps
            if o.verdict == "fail":
                summary.failures.append(o)
                for name in o.violated:
                    summary.by_invariant[name] = summary.by_invariant.get(name, 0) + 1
            if o.nondeterminism:
                summary.nondeterministic.append(o)
        if on_chunk is not None:
            on_chunk(summary, outcomes)

    def expired() -> bool:
        return deadline is not None and time.monotonic() >= deadline

    chunks = seed_chunks(start, stop)
    if workers <= 1:
        for chunk in chunks:
            if expired():
                break
            absorb(run_chunk(scenario_ref, config, chunk, check_determinism))
        return summary

    ctx = multiprocessing.get_context("fork")
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        pending: list[cf.Future[list[SeedOutcome]]] = []
        exhausted = False
        while True:
            while not exhausted and len(pending) < workers * 2 and not expired():
                chunk = next(chunks, None)
                if chunk is None:
                    exhausted = True
                    break
                pending.append(pool.submit(run_chunk, scenario_ref, dict(config), chunk,
                                           check_determinism))
            if not pending:
                break
            # Results are absorbed in submission order, so the summary (and the
            # first failing seed it reports) does not depend on worker timing.
            absorb(pending.pop(0).result())
    return summary
