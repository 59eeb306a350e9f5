"""Bulk runs: seeds in chunks, on this process or on worker processes.

A chunk of seeds shares one ``trio.run`` (see ``dst.sim.run``).  Workers get the
scenario by reference and a chunk of seeds, and send back one small summary per
seed plus the full trace text of failing seeds only: passing runs are never
rendered, which keeps the hot path free of JSON.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import signal
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
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
    #: Why the run ended; "bound" means it hit its step bound, so its end-of-run
    #: checks did not run (a summary says how many did).
    ended: str = "quiescent"


@dataclass
class BulkSummary:
    runs: int = 0
    failures: list[SeedOutcome] = field(default_factory=list)
    by_invariant: dict[str, int] = field(default_factory=dict)
    nondeterministic: list[SeedOutcome] = field(default_factory=list)
    decisions: int = 0
    #: Runs that hit the scenario's step bound (end-of-run checks not run), and
    #: the first few of their seeds in this invocation.
    bounded: int = 0
    bounded_seeds: list[int] = field(default_factory=list)
    #: True when Ctrl-C stopped the run early (the chunks done so far count).
    interrupted: bool = False
    #: Keep each failure's trace text in ``failures``.  Off when the caller writes
    #: traces to disk as chunks come back: a long run with a planted bug switched
    #: on must not hold thousands of traces in memory.
    keep_traces: bool = True

    def add_bounded(self, seed: int) -> None:
        """Count a run cut at the step bound (from this invocation or a resumed one)."""
        self.bounded += 1
        if len(self.bounded_seeds) < 3:
            self.bounded_seeds.append(seed)

    def absorb(self, outcomes: list[SeedOutcome]) -> None:
        for o in outcomes:
            self.runs += 1
            self.decisions += o.steps
            if o.ended == "bound":
                self.add_bounded(o.seed)
            if o.verdict == "fail":
                self.failures.append(o if self.keep_traces else replace(o, trace_text=None))
                for name in o.violated:
                    self.by_invariant[name] = self.by_invariant.get(name, 0) + 1
            if o.nondeterminism:
                self.nondeterministic.append(o)


def _outcome(r: RunResult, keep_trace: bool) -> SeedOutcome:
    # Failing runs and runs cut at the step bound keep their traces: both are
    # what a user has to look at.
    text = r.trace().text() if (keep_trace or r.verdict == "fail" or r.ended == "bound") \
        else None
    return SeedOutcome(r.seed, r.verdict, tuple(r.violated), r.steps, text, ended=r.ended)


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
                            a.trace().text(), nondeterminism=diff, ended=o.ended)
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


def seed_chunks(seeds: Iterable[int]) -> Iterator[list[int]]:
    """Cut ``seeds`` into chunks of at most ``CHUNK`` *contiguous* seeds.

    Contiguous, so that the results database can mark a chunk done as one range.
    """
    chunk: list[int] = []
    for seed in seeds:
        if chunk and (len(chunk) >= CHUNK or seed != chunk[-1] + 1):
            yield chunk
            chunk = []
        chunk.append(seed)
    if chunk:
        yield chunk


def _ignore_sigint() -> None:
    """Workers leave Ctrl-C to the parent, which stops cleanly and summarises."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def run_bulk(
    scenario_ref: str,
    config: Mapping[str, Any],
    seeds: Iterable[int],
    *,
    workers: int = 1,
    deadline: float | None = None,
    check_determinism: bool = False,
    on_chunk: Callable[[BulkSummary, list[SeedOutcome]], None] | None = None,
    summary: BulkSummary | None = None,
) -> BulkSummary:
    """Run ``seeds`` (possibly endless: then until ``deadline``) in chunks.

    ``on_chunk(summary, outcomes)`` runs after each chunk is absorbed into
    ``summary`` (a fresh one unless given).  Ctrl-C stops the run after the
    chunks already finished, sets ``summary.interrupted`` and returns.
    """
    summary = summary if summary is not None else BulkSummary()

    def absorb(outcomes: list[SeedOutcome]) -> None:
        summary.absorb(outcomes)
        if on_chunk is not None:
            on_chunk(summary, outcomes)

    def expired() -> bool:
        return deadline is not None and time.monotonic() >= deadline

    chunks = seed_chunks(seeds)
    if workers <= 1:
        try:
            for chunk in chunks:
                if expired():
                    break
                absorb(run_chunk(scenario_ref, config, chunk, check_determinism))
        except KeyboardInterrupt:
            summary.interrupted = True
        return summary

    ctx = multiprocessing.get_context("fork")
    pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx,
                                  initializer=_ignore_sigint)
    pending: list[cf.Future[list[SeedOutcome]]] = []
    try:
        exhausted = False
        while True:
            while not exhausted and len(pending) < workers * 2 and not expired():
                todo = next(chunks, None)
                if todo is None:
                    exhausted = True
                    break
                pending.append(pool.submit(run_chunk, scenario_ref, dict(config), todo,
                                           check_determinism))
            if not pending:
                break
            # Results are absorbed in submission order, so the summary (and the
            # first failing seed it reports) does not depend on worker timing.
            absorb(pending.pop(0).result())
    except KeyboardInterrupt:
        summary.interrupted = True
    finally:
        pool.shutdown(wait=not summary.interrupted, cancel_futures=True)
    return summary
