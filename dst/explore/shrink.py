"""Shrinking: the shortest failing story that still breaks the same invariant.

A random walk finds a bug in a story padded with everything else that happened
on the way: a crash that changed nothing, a duplicate nobody read, a turn that
ran to its end before the racing one started.  A reader has to find the race in
it.  Shrinking removes the padding, so that what is left is the bug.

It works on the run's *decisions*, the only thing that varies between two runs
of one seed: a candidate is a mutation of the chosen labels, run under
:class:`~dst.explore.follow.Follow` (which takes each label where it is still
enabled, and the calm default elsewhere).  A candidate is accepted when its run
breaks the same invariant first (the first one the original broke) and is
smaller: fewer decisions, then fewer faults, then lexicographically smaller
choice indices.  After each acceptance the search goes on from the accepted
run's own decisions, so positions always mean what that run did.  The mutations,
tried in this order until none helps (a fixpoint) or the budget runs out:

* drop a fault: the fault choice replaced by the option it is a variant of (the
  message delivered rather than dropped or duplicated, the service call going
  through, a fake's ``NAME.fault`` data choice answered ``none``), or by the calm
  default (a crash, a partition);
* delete decisions, delta-debugging style: halves, quarters, ... single ones
  (the rest of the recording shifts up, so a deleted step's task waits until the
  recording or the default gets to it: work that did not matter moves past the
  violation and out of the story);
* shorten a wait: a timer chosen while something else could run, replaced by
  the default;
* lower a choice: an option replaced by each earlier one, towards index 0.

Mutations only take away, so they cannot get from one shape of story to
another: a second turn started by a duplicated click never becomes a second
turn started by a second user, although that story may be shorter, and a
retry after a timeout never becomes the duplicated request that needs one
step less.  So at the first fixpoint the search also runs ``RESTARTS`` random
walks of other seeds (drawn from the trace's seed, the same ones every time).
Those that break the same invariant first are sorted by their *shape*: the
kinds of fault they chose, and whether they took a task held at a trio
checkpoint (a preemption's other side).  The shortest walk of each of the
``SHAPES`` shortest shapes the best story does not have is shrunk in turn, by
the same mutations; whichever story ends smallest wins, and a walk shorter
than the best story of its own shape becomes the run to shrink too.  (The same
idea as a test-case reducer that also tries fresh inputs: cheap next to the
mutations, and it escapes a local minimum no deletion can leave.)

A ``Deadlock`` is judged at rest, after every other process has done all its work,
so its runs are all about as long: there, "smaller" means first that the deadlock
formed earlier (the last step of the processes it names, ``dst.explore.stuck``),
and "the same failure" that the same tasks wait in the same places.  The other
processes' work then follows the deadlocked tasks' own story instead of being
woven into it, and ``dst shrink`` tells the story to where the deadlock formed.

The restarts' generator is seeded from the trace: the same trace and scenario
give the same result, unless the wall-clock budget cuts the search short (then
the result is the best found so far).  The output trace is the accepted run's own, rendered
from its records, so ``dst replay`` reproduces it byte for byte.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import DivergenceError, UsageError
from ..runner.single import RunResult, plan_from_dict, run_seeds
from ..scenario import Scenario
from ..sim.faults import FaultPlan
from ..trace.causes import data_fault
from ..trace.compare import first_divergence
from ..trace.model import Trace
from ..trace.render import story
from .follow import Follow, is_fault, is_timer, without_fault
from .stuck import deadlock, rows_of_records, rows_of_trace

#: The strategy name the shrunk trace's header carries.
STRATEGY = "shrink"

#: Random walks of other seeds tried at the first fixpoint (see the module docstring).
RESTARTS = 200
#: Shapes of story other than the best one's, each shrunk from its shortest walk.
SHAPES = 3

#: A candidate: the label to take at each position (None: the default there).
Script = tuple[str | None, ...]
#: Where a pass resumes after an acceptance (its own meaning per pass).
Token = Any
#: A kind of mutation: the candidates made from a run, from where the last one resumes.
Mutation = Callable[["_Run", Token], Iterable[tuple[Token, Script]]]


@dataclass(frozen=True)
class Measure:
    """How long a failing story is."""

    steps: int  # decisions, the scheduler's and the fakes'
    faults: int  # faults chosen (crashes, drops, duplicates, partitions, service faults,
    #             slow timers, and a fake's data choice `NAME.fault` other than `none`)
    lines: int  # lines of its story (runtime events, faults, checks)
    virtual_time: float
    #: A ``Deadlock``'s: the last step of the processes it names (``dst.explore.stuck``);
    #: None for any other failure.
    formed: int | None = None


@dataclass
class ShrinkResult:
    #: The invariant the original broke first, which every accepted run breaks first.
    invariant: str
    #: The shortest failing trace found: a real run's, replayable as it is.
    trace: Trace
    before: Measure
    after: Measure
    #: Candidate runs made (the run that checks the original reproduces included).
    runs: int
    #: Candidates accepted, each one smaller than the one before.
    accepted: int
    seconds: float
    #: "fixpoint" (no mutation helps any more), "budget" (time or runs ran out)
    #: or "interrupted" (Ctrl-C): the last two return the best found so far.
    stopped: str

    @property
    def improved(self) -> bool:
        return self.accepted > 0


@dataclass
class _Run:
    """An accepted run, with what the search mutates and compares."""

    result: RunResult
    labels: tuple[str, ...]
    enabled: tuple[tuple[str, ...], ...]
    indices: tuple[int, ...]
    faults: int
    #: Each decision's kind: ``schedule``, or ``data`` (a fake's ``sim.choose``).
    kinds: tuple[str, ...]
    #: A ``Deadlock``'s waits (what makes it the same one), and the step it formed at;
    #: None and 0 for any other failure.
    waits: tuple[str, ...] | None = None
    formed: int = 0

    @property
    def key(self) -> tuple[int, int, int, tuple[int, ...]]:
        return (self.formed, len(self.labels), self.faults, self.indices)

    @property
    def shape(self) -> tuple[frozenset[str], bool]:
        """The kinds of fault it chose, and whether it ran a task held at a checkpoint."""
        pairs = zip(self.kinds, self.labels, strict=True)
        return (frozenset(_fault_kind(label) for kind, label in pairs if _is_fault(kind, label)),
                any(label.endswith("@run") for label in self.labels))


def _is_fault(kind: str, label: str) -> bool:
    """Whether a decision of ``kind`` choosing ``label`` injects a fault: a scheduler's
    fault option, or a fake's data choice ``NAME.fault`` other than ``none``."""
    return data_fault(label) is not None if kind == "data" else is_fault(label)


def _fault_kind(label: str) -> str:
    """``crash``, ``drop``, ``dup``, ``partition``, a service fault (``fail``, ...), or a
    fake's (``openai.fault:server_error``)."""
    if data_fault(label) is not None:
        return label
    head, colon, _ = label.partition(":")
    if colon and head in ("crash", "drop", "dup", "partition"):
        return head
    return label.rpartition("!")[2]


def _as_run(result: RunResult) -> _Run:
    decisions = [(rec[3], rec[4], rec[5]) for rec in result.sim.records if rec[0] == "decision"]
    labels = tuple(enabled[chosen] for _, enabled, chosen in decisions)
    kinds = tuple(kind for kind, _, _ in decisions)
    stuck = deadlock(rows_of_records(result.sim.records))
    return _Run(result, labels, tuple(tuple(e) for _, e, _ in decisions),
                tuple(c for _, _, c in decisions),
                sum(map(_is_fault, kinds, labels)), kinds,
                None if stuck is None else stuck.waits, 0 if stuck is None else stuck.formed)


def measure(trace: Trace) -> Measure:
    decisions = [r for r in trace.records if r["type"] == "decision"]
    faults = sum(_is_fault(r["kind"], r["enabled"][r["chosen"]]) for r in decisions)
    stuck = deadlock(rows_of_trace(trace))
    return Measure(len(decisions), faults, len(story(trace)),
                   float(trace.footer.get("virtual_time", 0.0)),
                   None if stuck is None else stuck.formed)


class _Search:
    """The candidates run so far, the best run, and the budget."""

    def __init__(self, scenario: Scenario, config: dict[str, Any], plan: FaultPlan, seed: int,
                 target: str, deadline: float, max_runs: int | None) -> None:
        self.scenario, self.config, self.plan = scenario, config, plan
        self.seed, self.target = seed, target
        self.deadline, self.max_runs = deadline, max_runs
        self.tried: set[Script] = set()
        self.runs = 0
        self.accepted = 0
        self.stopped: str | None = None
        self.best: _Run | None = None
        #: The original's deadlock waits, which every accepted run must have (None: no
        #: deadlock); set from the original's run.
        self.waits: tuple[str, ...] | None = None

    def same(self, result: RunResult) -> _Run | None:
        """``result`` as a run, when it broke the target first (the same deadlock, for a
        ``Deadlock``); else None."""
        if not result.violated or result.violated[0] != self.target:
            return None
        run = _as_run(result)
        return run if run.waits == self.waits else None

    def _spent(self) -> bool:
        if self.stopped is None and (time.monotonic() >= self.deadline or (
                self.max_runs is not None and self.runs >= self.max_runs)):
            self.stopped = "budget"
        return self.stopped is not None

    def run(self, script: Script) -> RunResult:
        """One run of ``script``, whatever the budget (the original's check)."""
        self.runs += 1
        out: list[RunResult] = []
        run_seeds(self.scenario, self.config, [self.seed], out.append,
                  strategy=lambda _seed: Follow(script, name=STRATEGY), faults=self.plan)
        return out[0]

    def first_better(self, candidates: Iterable[tuple[Token, Script]]) -> tuple[Token, _Run] | None:
        """Run candidates in order until one beats the best; it and its token, or None.

        Candidates share one ``trio.run`` until the first acceptance (which ends
        the batch: later ones were made from the old best).  A candidate whose run
        makes a check or the setup raise is rejected, and the rest go on.
        """
        best = self.best
        assert best is not None
        todo = iter(candidates)
        current: list[tuple[Token, Script]] = []
        found: list[tuple[Token, _Run]] = []

        def seeds() -> Iterator[int]:
            for token, script in todo:
                if found or self._spent():
                    return
                if script in self.tried:
                    continue
                self.tried.add(script)
                current[:] = [(token, script)]
                self.runs += 1
                yield self.seed

        def judge(result: RunResult) -> None:
            run = self.same(result)
            if run is not None and run.key < best.key:
                found.append((current[0][0], run))

        def follow(_seed: int) -> Follow:
            return Follow(current[0][1], name=STRATEGY)

        while True:
            try:
                run_seeds(self.scenario, self.config, seeds(), judge, strategy=follow,
                          faults=self.plan)
            except KeyboardInterrupt:
                self.stopped = "interrupted"
            except Exception:
                continue  # that candidate broke the scenario: rejected, the rest go on
            break
        return found[0] if found else None

    def walks(self, seeds: list[int]) -> list[_Run]:
        """Random walks of ``seeds`` that break the target first: the shortest of each
        shape, shortest first (see the module docstring)."""
        found: dict[tuple[frozenset[str], bool], _Run] = {}

        def feed() -> Iterator[int]:
            for seed in seeds:
                if self._spent():
                    return
                self.runs += 1
                yield seed

        def judge(result: RunResult) -> None:
            run = self.same(result)
            if run is not None:
                known = found.get(run.shape)
                if known is None or run.key < known.key:
                    found[run.shape] = run

        try:
            run_seeds(self.scenario, self.config, feed(), judge, faults=self.plan)
        except KeyboardInterrupt:
            self.stopped = "interrupted"
        except Exception:
            pass  # a seed broke the scenario: no restart, the best stands
        return sorted(found.values(), key=lambda run: run.key)

    def follow(self, run: _Run) -> None:
        """Go on shrinking from ``run`` (a walk of another seed)."""
        self.best = run
        self.seed = run.result.seed
        self.tried.clear()  # scripts were tried under the old seed
        self.accepted += 1

    def fixpoint(self, mutations: Sequence[Mutation] | None = None) -> None:
        """Apply the mutations until none helps (or the budget runs out)."""
        while self.stopped is None:
            if not any([self.improve(mutation) for mutation in mutations or MUTATIONS]):
                return

    def improve(self, candidates: Mutation) -> bool:
        """Apply one kind of mutation until it stops helping; whether it helped."""
        helped = False
        token: Token = None
        while self.stopped is None:
            assert self.best is not None
            found = self.first_better(candidates(self.best, token))
            if found is None:
                break
            token, self.best = found
            self.accepted += 1
            helped = True
        return helped


def _restart(search: _Search) -> None:
    """Shrink the shortest walk of other shapes of story too, and keep the smallest story
    (see the module docstring)."""
    best = search.best
    assert best is not None
    walks = search.walks(_restart_seeds(search.seed, RESTARTS))
    others = [w for w in walks if w.shape != best.shape][:SHAPES]
    same = [w for w in walks if w.shape == best.shape and w.key < best.key]
    state = (best, search.seed, set(search.tried))
    for walk in same[:1] + others:
        if search.stopped is not None:
            break
        search.follow(walk)
        search.fixpoint(IN_SHAPE)
        assert search.best is not None
        if search.best.key < state[0].key:
            state = (search.best, search.seed, set(search.tried))
    search.best, search.seed, search.tried = state


def _restart_seeds(seed: int, n: int) -> list[int]:
    """``n`` other seeds, the same for the same ``seed``: what restarts run."""
    draw = random.Random(f"dst/shrink/{seed}")
    return sorted({draw.randrange(2**31) for _ in range(n)} - {seed})


# -- the mutations ------------------------------------------------------------------


def _with(run: _Run, i: int, label: str | None) -> Script:
    return (*run.labels[:i], label, *run.labels[i + 1:])


def drop_faults(run: _Run, resume: Token) -> Iterator[tuple[Token, Script]]:
    """Each fault chosen, replaced by the option it is a variant of (a message's delivery,
    the plain service call), or by the calm default (a crash, a partition)."""
    for i in range(resume or 0, len(run.labels)):
        label = run.labels[i]
        if run.kinds[i] == "data":
            if data_fault(label) is not None:
                calm = label.rpartition(":")[0] + ":none"
                yield i, _with(run, i, calm if calm in run.enabled[i] else None)
        elif is_fault(label):
            yield i, _with(run, i, without_fault(label, run.enabled[i]))


def delete_chunks(run: _Run, resume: Token) -> Iterator[tuple[Token, Script]]:
    """Stretches of decisions deleted: halves, quarters, ... single ones."""
    n = len(run.labels)
    size, start = resume if resume is not None else (max(n // 2, 1), 0)
    while size >= 1:
        for i in range(start, n, size):
            yield (size, i), (*run.labels[:i], *run.labels[i + size:])
        size, start = size // 2, 0


def shorten_waits(run: _Run, resume: Token) -> Iterator[tuple[Token, Script]]:
    """Each timer chosen while something else could run, replaced by the default."""
    for i in range(resume or 0, len(run.labels)):
        if is_timer(run.labels[i]) and any(
                not is_timer(label) and not is_fault(label) for label in run.enabled[i]):
            yield i, _with(run, i, None)


def lower_choices(run: _Run, resume: Token) -> Iterator[tuple[Token, Script]]:
    """Each choice replaced by each earlier option, the first one first."""
    for i in range(resume or 0, len(run.labels)):
        for j in range(run.indices[i]):
            yield i, _with(run, i, run.enabled[i][j])


MUTATIONS = (drop_faults, delete_chunks, shorten_waits, lower_choices)
#: The same, faults dropped last: a walk of another shape is shrunk within its shape
#: first (a duplicated request dropped at once would leave the retry it replaced).
IN_SHAPE = (delete_chunks, shorten_waits, lower_choices, drop_faults)


# -- the entry point ----------------------------------------------------------------


def target_invariant(trace: Trace, shown: str = "the trace") -> str:
    """The invariant ``trace`` broke first; a passing trace is refused."""
    if trace.footer.get("verdict") != "fail" or not trace.violated:
        ended = trace.footer.get("ended", "?")
        raise UsageError(f"{shown} is a passing run (ended {ended}, nothing violated); only "
                         "a failing trace can be shrunk")
    first = next((r["invariant"] for r in trace.records if r["type"] == "violation"), None)
    return first if first is not None else trace.violated[0]


def shrink(scenario: Scenario, trace: Trace, *, budget: float = 30.0,
           max_runs: int | None = None, shown: str = "the trace") -> ShrinkResult:
    """The shortest failing run found that breaks ``trace``'s first invariant first.

    ``budget`` bounds wall-clock seconds and ``max_runs`` candidate runs; both
    are checked between runs, and running out returns the best found so far.
    The original is run once first, whatever the budget, to check that it
    reproduces under ``scenario`` as it is now: a passing trace is refused
    (``UsageError``), one that no longer reproduces is a ``DivergenceError``.
    """
    began = time.monotonic()
    target = target_invariant(trace, shown)
    if trace.header["scenario"] != scenario.name:
        raise UsageError(f"{shown} is a trace of {trace.header['scenario']!r}, "
                         f"not of {scenario.name!r}")
    config = scenario.checked_config(trace.header["config"])
    # The plan the header records is what ran (a strategy may draw one per seed).
    plan = scenario.fault_plan(config)
    recorded = trace.header.get("faults")
    if isinstance(recorded, dict) and recorded != plan.as_dict():
        plan = plan_from_dict(recorded)
    search = _Search(scenario, config, plan, int(trace.header["seed"]), target,
                     began + budget, max_runs)
    original = search.run(tuple(enabled[chosen] for enabled, chosen in trace.decisions))
    differs = first_divergence(trace, original.trace())
    if differs is not None:
        raise DivergenceError(f"{shown} does not reproduce under the scenario as it is now "
                              f"({differs}); shrinking needs a trace that replays")
    search.best = _as_run(original)
    search.waits = search.best.waits
    try:
        search.fixpoint()
        if search.stopped is None:
            _restart(search)
        if search.stopped is None:
            search.stopped = "fixpoint"
    except KeyboardInterrupt:
        search.stopped = "interrupted"
    final = search.best.result.trace()
    # The seed the story was found under, whichever walk the shortest run came from
    # (its own ``seed`` stays: the run draws from it); and where its scenario lives.
    final.header["shrunk_from"] = trace.header.get("shrunk_from", trace.header["seed"])
    if "scenario_file" in trace.header:
        final.header["scenario_file"] = trace.header["scenario_file"]
    return ShrinkResult(
        invariant=target, trace=final, before=measure(trace), after=measure(final),
        runs=search.runs, accepted=search.accepted, seconds=time.monotonic() - began,
        stopped=search.stopped or "fixpoint")
