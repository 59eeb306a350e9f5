"""Seeds that take a schedule an earlier seed already took are not run again.

A run is a pure function of its decisions: the kernel's determinism contract
(``dst.sim.kernel``) makes every choice the strategy's, and the seed reaches a
run only through its strategy, its seeded generators (``env.rng``, fakes,
virtualised reads) and ``sim.seed``.  Under the seeded random walk, a seed's
decisions are the walk's answers to the questions the run asks (which of these
options now?), and the questions depend only on the answers before them.  So
the questions and answers of the runs done so far form a tree, and a new seed
can walk that tree with its own random walk, asking each recorded question in
turn, without running any code: where its walk ends on a recorded run, the seed
*is* that run, record for record; where it leaves the tree, the seed runs.

Small scenarios have few schedules (a lost update across one checkpoint has
six, a retried charge over a lossy link three), and a bulk run of thousands of
seeds would otherwise run each of them hundreds of times.  Hypothesis keeps the
same kind of tree of the choice sequences it has tried, for the same reason.

What keeps it honest:

- Only runs that drew nothing from their seed but through the random walk are
  recorded: a run that read ``sim.seed`` or drew from a seeded generator
  (``dst.sim.seeding.first_draws``) is never stood in for another seed's, nor is
  a run that dst or its strategy stopped with an error (``sim.error``; an exception
  in the code under test is part of the run's story), or that diverged.  Any other
  strategy than the plain random walk, or a fault plan of its own per seed, turns
  the memo off.
- A schedule is trusted once two seeds have run it and told the same story: the
  second seed whose walk ends on a recorded run runs for real, and its records
  are compared with the first's; so are the 4th, 8th, 16th... seeds' to arrive
  there, so that state a process builds up over many runs is caught too, at a
  cost of a run per doubling.  Code that keeps state between runs (a module
  global), records what differs from run to run (an object's address), or
  depends on something dst does not control then differs, the memo turns
  itself off for the rest of the pass, and says why (``disagreement``).
- It gives up, and every later seed runs, when new schedules keep coming (most
  seeds of a large scenario take one of their own): walking costs a little.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..sim import seeding
from ..sim.kernel import Sim
from ..sim.strategy import RandomWalk
from ..trace.model import canonical, record_to_dict

#: New schedules recorded before the memo asks whether it pays (see ``MemoStats.paying``).
WARMUP = 64
#: Schedules kept at most (each holds its run: 30-70 KiB for the shipped scenarios).
MAX_PATHS = 1024
#: Records and questions kept at most, all schedules together (a few hundred bytes each):
#: a scenario whose runs take thousands of steps reaches it long before ``MAX_PATHS``.
MAX_KEPT = 250_000


class RecordingWalk(RandomWalk):
    """The random walk of a seed, keeping each question it was asked and its answer.

    A subclass, so that the scheduler's inlined draws (taken only when the
    strategy is exactly ``RandomWalk``) give way to ``choose``, where the
    options and weights are seen; the answers are the random walk's own, draw
    for draw, so the run and its trace are those of ``RandomWalk(seed)``.
    """

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.asked: list[tuple[tuple[str, ...], tuple[float, ...] | None, int]] = []

    def choose(
        self, step: int, labels: Sequence[str], weights: Sequence[float] | None
    ) -> int:
        index = RandomWalk.choose(self, step, labels, weights)
        self.asked.append((tuple(labels), None if weights is None else tuple(weights), index))
        return index


class _Node:
    """A question the runs through here were asked next, and where each answer led."""

    __slots__ = ("labels", "next", "weights")

    def __init__(self, labels: tuple[str, ...], weights: tuple[float, ...] | None) -> None:
        self.labels = labels
        self.weights = weights
        self.next: dict[int, _Node | _Leaf] = {}


class _Leaf:
    """A recorded run's result: the end of a schedule, whether a second seed confirmed it,
    and how many seeds' walks have ended on it since it was recorded."""

    __slots__ = ("arrivals", "confirmed", "result")

    def __init__(self, result: Any) -> None:
        self.result = result
        self.confirmed = False
        self.arrivals = 0


@dataclass
class MemoStats:
    """What the memo did in one pass over seeds."""

    #: Seeds answered from a recorded run, without running.
    reused: int = 0
    #: Seeds run (a new schedule, a confirmation, or one the memo cannot record).
    ran: int = 0
    #: Distinct schedules recorded.
    paths: int = 0
    #: Why the memo stopped early, if it did: two runs of one schedule that differed.
    disagreement: str | None = None
    #: The seed whose run showed the disagreement (the later of the two).
    disagreed_at: int | None = None
    #: Whether it still walks and records.
    on: bool = True

    def paying(self) -> bool:
        """Still worth walking: few schedules so far, or as many reuses as schedules."""
        return self.paths < WARMUP or self.reused >= self.paths


class PathMemo:
    """The schedules one pass of seeds has run, for the seeds after them to reuse.

    ``lookup(seed)`` is the recorded result the seed's walk ends on, or None (the
    seed must run: ``strategy(seed)`` is what it runs under, ``mark()`` taken as
    it starts); as it ends, ``clean(sim, mark)`` and then ``ran(sim, result,
    clean)`` record it.  One memo serves one scenario, config, fault
    plan and step bound: the caller makes a new one for anything else.
    """

    def __init__(self) -> None:
        self.stats = MemoStats()
        self._root: _Node | _Leaf | None = None
        #: The leaf a seed's walk ended on unconfirmed: its run is compared with it.
        self._checking: dict[int, _Leaf] = {}
        #: Records and questions the recorded schedules hold (``MAX_KEPT``).
        self._held = 0

    @property
    def on(self) -> bool:
        return self.stats.on

    def lookup(self, seed: int) -> Any | None:
        """The result of the confirmed run ``seed`` would repeat (as the caller recorded
        it, ``ran``), or None when the seed must run."""
        node = self._root
        if node is None or not self.stats.on:
            return None
        walk = RandomWalk(seed)
        step = 0
        while type(node) is _Node:
            step += 1
            got = node.next.get(walk.choose(step, node.labels, node.weights))
            if got is None:
                return None
            node = got
        assert type(node) is _Leaf
        node.arrivals = n = node.arrivals + 1
        if n & (n - 1) == 0:  # the 1st, 2nd, 4th, 8th... seed to arrive runs, and is compared
            self._checking[seed] = node
            return None
        if not node.confirmed:
            return None
        self.stats.reused += 1
        return node.result

    def strategy(self, seed: int) -> RandomWalk:
        """The strategy ``seed`` runs under: recording while the memo is on."""
        return RecordingWalk(seed) if self.stats.on else RandomWalk(seed)

    def mark(self) -> int:
        """What ``clean`` compares to tell whether a run drew from its seed: taken as it starts."""
        return seeding.first_draws

    def clean(self, sim: Sim, mark: int) -> bool:
        """Whether the run ``sim`` (started when ``mark`` was taken) drew nothing from its
        seed but through its recording walk, and ended without an error: asked as it
        ends, before anything reads its ``seed``."""
        return (type(sim.strategy) is RecordingWalk and not sim.seed_read
                and seeding.first_draws == mark and sim.error is None
                and sim.divergence is None)

    def ran(self, sim: Sim, result: Any, clean: bool) -> None:
        """Count the run ``sim`` and, if ``clean``, record ``result`` as its schedule's."""
        stats = self.stats
        stats.ran += 1
        checking = self._checking.pop(sim._seed, None)
        if not stats.on or not clean:
            return
        if checking is not None:
            if same_story(checking.result.sim, sim):
                checking.confirmed = True
            else:
                self._disagree(checking.result.sim, sim)
            return
        walk = sim.strategy
        assert isinstance(walk, RecordingWalk)
        size = len(walk.asked) + len(sim.records)
        if stats.paths >= MAX_PATHS or self._held + size > MAX_KEPT or not stats.paying():
            stats.on = False
            self._root = None
            return
        self._insert(walk.asked, sim, _kept(result, sim))
        self._held += size
        walk.asked = []  # in the tree now: nothing reads it again

    def _insert(self, asked: list[tuple[tuple[str, ...], tuple[float, ...] | None, int]],
                sim: Sim, result: Any) -> None:
        parent: _Node | None = None
        answer = 0
        node = self._root
        for labels, weights, index in asked:
            if node is None:
                node = _Node(labels, weights)
                self._attach(parent, answer, node)
            elif type(node) is not _Node or node.labels != labels or node.weights != weights:
                self._disagree_at(node, labels, sim)
                return
            parent, answer, node = node, index, node.next.get(index)
        if node is not None:  # the same answers led to a run, or to more questions, before
            if type(node) is _Leaf:
                if not same_story(node.result.sim, sim):
                    self._disagree(node.result.sim, sim)
            else:
                self._disagree_at(node, None, sim)
            return
        self._attach(parent, answer, _Leaf(result))
        self.stats.paths += 1

    def _attach(self, parent: _Node | None, answer: int, node: _Node | _Leaf) -> None:
        if parent is None:
            self._root = node
        else:
            parent.next[answer] = node

    def _disagree_at(self, node: _Node | _Leaf, labels: tuple[str, ...] | None,
                     sim: Sim) -> None:
        """Two runs answered the same questions the same way and were then asked different
        ones (or one ended where the other went on)."""
        was = node.labels if type(node) is _Node else None
        self._stop(f"seed {sim._seed} took the decisions of an earlier seed, then "
                   f"{_enabled(labels)} where the earlier run had {_enabled(was)}", sim._seed)

    def _disagree(self, first: Sim, then: Sim) -> None:
        a, b = _lines(first), _lines(then)
        at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                  min(len(a), len(b)))
        self._stop(f"seeds {first._seed} and {then._seed} took the same decisions but their "
                   f"records differ from record {at + 1}", then._seed)

    def _stop(self, why: str, seed: int) -> None:
        self.stats.on = False
        self.stats.disagreed_at = seed
        self.stats.disagreement = (
            f"{why}: the code under test keeps state between runs, records what differs from "
            "run to run (an object's address, an order by id()) or reads something dst does "
            "not control (dst run --check-determinism tells more); every later seed ran")
        self._root = None
        self._checking.clear()


def _enabled(labels: tuple[str, ...] | None) -> str:
    return "the run ended" if labels is None else f"[{', '.join(labels)}] enabled"


def same_story(a: Sim, b: Sim) -> bool:
    """Whether two runs recorded the same trace records (as written, when a record holds
    a value that does not compare equal to its copy, an exception say)."""
    return a.records == b.records or _lines(a) == _lines(b)


def _lines(sim: Sim) -> list[str]:
    return [canonical(record_to_dict(r)) for r in sim.records]


#: What a recorded run keeps of its ``Sim``: what is read of the result of a seed it stands
#: for (its trace's records, plan and bound, its failure signature, how it ended), not the
#: world its setup built, which its processes, checks and fingerprint hold, and which may be
#: large: a memo keeps up to ``MAX_PATHS`` runs for as long as its pass lasts.
_KEPT = ("records", "faults", "max_steps", "_seed", "step", "ended", "error", "divergence",
         "violated", "strategy")
#: The types of what a run's ``__dict__`` holds that a kept run keeps (a ``@dst.test``'s
#: skip reason, whether the run read its seed): values, never the world.
_VALUES = (str, int, float, bool, type(None))


def _kept(result: Any, sim: Sim) -> Any:
    """A copy of ``result`` (of the run ``sim``) holding only what a reuse of it reads."""
    kept = Sim.__new__(type(sim))
    for name in _KEPT:
        setattr(kept, name, getattr(sim, name))
    for name, value in sim.__dict__.items():
        if type(value) in _VALUES:
            kept.__dict__[name] = value
    out = copy.copy(result)
    out.sim = kept
    return out


def reuse(result: Any, seed: int) -> Any:
    """The recorded ``result`` (a ``RunResult``) as the run of ``seed``: its run is that
    seed's, record for record, only the seed differs.

    Copied field by field, not with ``copy.copy``, whose generic protocol (a reduce, a
    state of every slot) cost half of a reused seed."""
    out = object.__new__(type(result))
    out.__dict__.update(result.__dict__)
    out.seed = seed
    out.reused = True
    out.violated = list(result.violated)
    out.sim = _as_seed(result.sim, seed)
    return out


def _as_seed(template: Sim, seed: int) -> Sim:
    """A copy of the kept run ``template`` (``_kept``: only ``_KEPT`` is set), of ``seed``."""
    sim = Sim.__new__(type(template))
    for name in _KEPT:
        setattr(sim, name, getattr(template, name))
    sim.__dict__.update(template.__dict__)
    sim._seed = seed
    return sim
