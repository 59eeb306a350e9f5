"""Strategies: who picks among the enabled options at a choice point.

A strategy sees only labels and weights, never tasks or messages, so that the
same interface serves a seeded random walk, a replay of a recorded trace, and
(later) PCT or bounded exhaustive search: each of these is a different answer
to "which of these N options now?".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from ..errors import DivergenceError
from .seeding import seeded


class Strategy(Protocol):
    #: Name written to the trace header (``random``, ``replay``, ...).
    name: str

    def choose(
        self, step: int, labels: Sequence[str], weights: Sequence[float] | None
    ) -> int:
        """Index of the option to take.  ``weights`` is None when all are 1.0."""
        ...


class RandomWalk:
    """Seeded random walk: each step picks an enabled option in proportion to its weight."""

    name = "random"

    def __init__(self, seed: int) -> None:
        # A string seed is hashed with SHA-512 by ``random``: stable across
        # processes and PYTHONHASHSEED, unlike hashing a tuple.
        self._rng = seeded(f"dst-schedule/{seed}")
        #: One draw in [0, 1): ``choose`` with equal weights is ``int(uniform() * n)``.
        self.uniform = self._rng.random

    def choose(
        self, step: int, labels: Sequence[str], weights: Sequence[float] | None
    ) -> int:
        n = len(labels)
        if n == 1:
            return 0
        if weights is None:
            return int(self.uniform() * n)
        return weighted_index(self.uniform, weights)


def weighted_index(uniform: Callable[[], float], weights: Sequence[float]) -> int:
    """The random walk's weighted draw: one ``uniform()`` in [0, 1), walked over ``weights``.

    Shared by ``RandomWalk.choose`` and the scheduler's hot paths (which call it
    directly when the strategy is exactly ``RandomWalk``), so the draw a seed
    makes is written once.
    """
    total = 0.0
    for w in weights:
        total += w
    x = uniform() * total
    # A counter, not ``enumerate`` (no tuple per option), and ``x`` (a float)
    # compared with 0.0, not 0, which keeps the test on the interpreter's
    # float fast path: the same answers, a quarter fewer instructions.
    i = 0
    for w in weights:
        x -= w
        if x < 0.0:
            return i
        i += 1
    return len(weights) - 1


class Replay:
    """Forces the choices recorded in a trace, checking the enabled options first.

    A different enabled list at a step means the code under test (or its
    environment) no longer behaves as it did when the trace was recorded: that
    is a divergence, reported at its first step rather than as a confusing
    difference many records later.
    """

    name = "replay"

    def __init__(self, decisions: Sequence[tuple[Sequence[str], int]]) -> None:
        self._decisions = decisions

    def choose(
        self, step: int, labels: Sequence[str], weights: Sequence[float] | None
    ) -> int:
        if step > len(self._decisions):
            raise DivergenceError(
                f"diverged at step {step}: the trace ends after step "
                f"{len(self._decisions)}, but the run has more to do "
                f"(enabled: {', '.join(labels)})"
            )
        expected, chosen = self._decisions[step - 1]
        if list(expected) != list(labels):
            raise DivergenceError(
                f"diverged at step {step}: expected enabled [{', '.join(expected)}], "
                f"got [{', '.join(labels)}]"
            )
        return chosen
