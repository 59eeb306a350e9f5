"""TLA+ specs of the shipped protocols, checked by TLC (``dst specs check``).

The specs in ``specs/`` model the designs the runtimes implement, with the same
switches as the scenarios, so that the verdict of a design can be had two ways:
exhaustively on the model (here: every interleaving of two turns, in seconds)
and by search on the real code (``dst run``, ``dst table``).  Each spec's map
file says which constant is which scenario switch and which invariant is
which, so the two tables can be compared row by row: ``dst conformance``
(:mod:`dst.specs.conformance`) does that, and replays each spec counterexample
on the code (:mod:`dst.specs.steer`).

:func:`check` runs TLC once per row and invariant: TLC stops at the first
invariant it finds broken, so one run per invariant is the only way to get
every invariant's verdict and its own shortest counterexample.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from .catalog import Spec, Value, available, find, load, row_cfg, rows
from .tlc import Outcome, SpecError, Tlc, locate
from .tlc import run as run_tlc


@dataclass(frozen=True)
class RowResult:
    """One row of a spec's table: its constants and TLC's answer per invariant."""

    row: Mapping[str, Value]
    outcomes: Mapping[str, Outcome]

    @property
    def seconds(self) -> float:
        return sum(o.seconds for o in self.outcomes.values())


def check(spec: Spec, tlc: Tlc, selected: Sequence[Mapping[str, Value]] | None = None,
          invariants: Sequence[str] = (), jobs: int = 1,
          on_row: Callable[[RowResult], None] | None = None) -> list[RowResult]:
    """TLC's verdict on every row of ``spec`` (or ``selected``) for each invariant.

    With ``jobs`` > 1 that many TLC processes run at once (each with one
    worker, so the verdicts and counterexamples are those of a lone run);
    rows are still reported, and ``on_row`` called, in row order.
    """
    todo = list(rows(spec)) if selected is None else [dict(r) for r in selected]
    names = tuple(invariants) or spec.invariants
    work = [(row, inv, row_cfg(spec, row, inv)) for row in todo for inv in names]
    results: list[RowResult] = []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(run_tlc, tlc, spec.tla, cfg, inv) for _, inv, cfg in work]
        for i, row in enumerate(todo):
            mine = futures[i * len(names):(i + 1) * len(names)]
            try:
                outcomes = {inv: f.result() for inv, f in zip(names, mine, strict=True)}
            except BaseException:
                for f in futures:
                    f.cancel()
                raise
            result = RowResult(row, outcomes)
            results.append(result)
            if on_row is not None:
                on_row(result)
    return results


__all__ = ["Outcome", "RowResult", "Spec", "SpecError", "Tlc", "available", "check", "find",
           "load", "locate", "row_cfg", "rows"]
