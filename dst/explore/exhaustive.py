"""Bounded exhaustive exploration: every schedule of a scenario, up to reordering.

A seeded random walk samples schedules; this module runs *all* of them within
bounds (decisions per run, crashes, drops, duplicates, preemptions), so that "no
violation" is a proof within those bounds rather than a failure to find one.

It is stateless model checking, as in CHESS, loom and Shuttle: a run is a pure
function of (scenario, config, seed, strategy), so a schedule is just the list
of indices chosen at its decisions, and the search re-runs the scenario from
scratch for each one, forcing a prefix and exploring from there.  Nothing is
snapshotted; the kernel gives the same enabled options for the same prefix
(and the search checks that it does: a scenario that does not is reported as
nondeterministic, not explored wrongly).

Depth-first search with **sleep sets** (Godefroid) skips schedules that differ
from explored ones only in the order of independent options
(:mod:`dst.explore.independence`).  Sleep sets alone visit every reachable
state and never run two schedules that are reorderings of each other to the
end; a run whose every enabled option is asleep stops there (*sleep-blocked*).
Reduction applies only at decisions taken at rest with no preemption left:
while the preemption budget lasts every option can spend it, and a data choice
or a decision taken while a task still runs happens inside some option's code,
so those decisions explore every option and pass on an empty sleep set.

**States.** A scenario with ``@scenario.fingerprint`` has its distinct states
counted: the fingerprint of the world together with the kernel's own state
(stores, messages in flight and in mailboxes, budgets, virtual time, the
enabled options), compared by a 128-bit digest of its canonical text.  With
``prune_states`` a state already explored is skipped, when it was explored at a
depth no greater (so with no fewer steps left) and with a sleep set contained in
the current one: Godefroid's condition for combining state caching with sleep
sets.  That is sound only if the fingerprint determines everything the tasks
hold in memory, so it is asked for, never implied.

**Bounds.** A run still having something to do after ``max_steps`` decisions is
*cut*; any cut makes "no violation" a statement about runs of that length only,
and the result says so.  A search stopped by its schedule or time budget is not
a proof at all.  A run stops at its first violation, so an invariant that only
breaks after another one has is reported as unproven, not as holding.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from ..errors import DivergenceError, ScenarioError, UsageError
from ..runner.single import RunResult, replay_trace
from ..scenario import Scenario
from ..sim.faults import FaultPlan
from ..sim.kernel import Sim
from ..sim.run import run_sims
from ..sim.strategy import Replay
from ..trace.model import Trace
from .independence import Independence

#: Findings the kernel reports without a declaration.
BUILT_IN = ("Deadlock", "Livelock", "NoUncaughtError", "Nondeterminism")

_clock = time.perf_counter


@dataclass(frozen=True)
class Bounds:
    """What "every schedule" ranges over, and when the search gives up."""

    max_steps: int
    crashes: int = 0
    drops: int = 0
    dups: int = 0
    preemptions: int = 0
    #: Keep the scenario's service fault budgets (otherwise no service fails).
    service_faults: bool = False
    max_schedules: int | None = 100_000
    #: Seconds of wall time for the whole search.
    budget: float | None = None

    def describe(self) -> str:
        def n(count: int, one: str, many: str) -> str:
            return f"1 {one}" if count == 1 else f"{count} {many}"

        parts = [f"at most {self.max_steps} steps", n(self.crashes, "crash", "crashes"),
                 n(self.drops, "drop", "drops"), n(self.dups, "duplicate", "duplicates"),
                 n(self.preemptions, "preemption", "preemptions")]
        if self.service_faults:
            parts.append("the scenario's service faults")
        return ", ".join(parts)


def fault_plan(scenario: Scenario, config: Mapping[str, Any], bounds: Bounds) -> FaultPlan:
    """The scenario's plan with the budgets of ``bounds``: faults off unless asked."""
    base = scenario.fault_plan(config)
    return dataclasses.replace(
        base, max_crashes=bounds.crashes, max_drops=bounds.drops, max_dups=bounds.dups,
        preemptions=bounds.preemptions, max_partitions=0,
        services=base.services if bounds.service_faults else {})


@dataclass
class Violation:
    """The shortest schedule found that breaks one check."""

    name: str
    message: str
    #: Decisions of that schedule, as ``Trace.decisions`` lists them.
    decisions: list[tuple[tuple[str, ...], int]]
    #: Schedules that stopped at a violation of this check.
    schedules: int = 1

    @property
    def steps(self) -> int:
        return len(self.decisions)


@dataclass
class Exploration:
    """What a search ran and what it shows."""

    scenario: str
    config: dict[str, Any]
    bounds: Bounds
    plan: FaultPlan
    por: bool
    prune_states: bool
    checks: list[str]
    schedules: int = 0
    #: How runs ended: at rest (``rest``), at a ``violation``, ``cut`` at the step
    #: bound, stopped because every option was asleep (``sleep``) or the state
    #: was explored before (``state``).
    ended: Counter[str] = field(default_factory=Counter)
    #: Options at explored decisions never taken because they were asleep.
    pruned_branches: int = 0
    #: Distinct states seen (None: the scenario declares no fingerprint).
    states: int | None = None
    max_depth: int = 0
    seconds: float = 0.0
    #: True when every branch within the bounds was run.
    exhausted: bool = False
    #: Why the search stopped early: ``max_schedules`` or ``budget``.
    stopped: str | None = None
    violations: dict[str, Violation] = field(default_factory=dict)
    #: Why reduction was not used although asked for, if it was not.
    no_reduction: str | None = None

    @property
    def cut(self) -> int:
        return self.ended["cut"]

    @property
    def proof(self) -> bool:
        """Every schedule within the bounds ran to its end, none cut at the step bound."""
        return self.exhausted and self.cut == 0

    def verdict(self, name: str) -> tuple[str, bool]:
        """(``violated`` | ``holds`` | ``not violated``, whether that is proven).

        ``holds`` means proven within the bounds; ``not violated`` is what was
        seen, with the reason it is not a proof in :meth:`caveat`.
        """
        if name in self.violations:
            return "violated", True
        if self.proof and not self._masked(name):
            return "holds", True
        return "not violated", False

    def caveat(self, name: str) -> str:
        if name in self.violations:
            return ""
        if not self.exhausted:
            return (f"the search stopped ({self.stopped_text()}) before every schedule ran: "
                    "not a proof")
        if self.cut:
            return (f"{_schedules(self.cut)} cut at {self.bounds.max_steps} steps: "
                    "a proof for runs that long only")
        masked = self._masked(name)
        if masked:
            return (f"{_schedules(masked)} stopped at another violation first: "
                    f"check it alone with --invariant {name}")
        return ""

    def _masked(self, name: str) -> int:
        return sum(v.schedules for n, v in self.violations.items() if n != name)

    def stopped_text(self) -> str:
        if self.stopped == "budget":
            return f"time budget of {self.bounds.budget:g}s"
        if self.stopped == "max_schedules":
            return f"--max-schedules {self.bounds.max_schedules:,}"
        return "complete"

    def statement(self) -> str:
        """The sentence that says what the search proves, and what it does not."""
        space = (f"every schedule of {self.scenario} with {self.bounds.describe()}"
                 + (" (up to reordering of independent steps)" if self.por else ""))
        if not self.exhausted:
            return (f"not a proof: the search stopped at {self.stopped_text()} after "
                    f"{self.schedules:,} schedules, before {space} had run")
        if self.cut:
            return (f"{space} was run, but {_schedules(self.cut)} cut at the step bound: "
                    f"a proof for runs of at most {self.bounds.max_steps} steps, "
                    "not for the unbounded system")
        return f"{space} was run to its end: what holds above is proven within these bounds"


def _schedules(n: int) -> str:
    return "1 schedule was" if n == 1 else f"{n:,} schedules were"


class _Stop(DivergenceError):
    """Raised by the search strategy to end a run early (not a divergence of a replay)."""


@dataclass(slots=True)
class _Node:
    """One decision on the current path of the depth-first search."""

    labels: tuple[str, ...]
    reducible: bool
    sleep: frozenset[str]
    chosen: int
    depth: int
    key: bytes | None = None
    done: set[int] = field(default_factory=set)


class _Run:
    """The strategy of one run: forces the search's current path, then extends it."""

    name = "explore"

    def __init__(self, search: _Search, scenario: Scenario, config: dict[str, Any]) -> None:
        self.search = search
        self.scenario = scenario
        self.config = config
        self.sim: Sim | None = None
        self.world: Any = None
        #: Why this run was ended early by the search (``cut``, ``sleep``, ``state``).
        self.stop: str | None = None
        self.independence = Independence(lambda: self._sim().processes,
                                         lambda: self._sim().stores)

    def _sim(self) -> Sim:
        assert self.sim is not None
        return self.sim

    def build(self, sim: Sim) -> None:
        self.world = self.scenario.build(sim, self.config)

    def choose(self, step: int, labels: Sequence[str], weights: Sequence[float] | None) -> int:
        return self.search.choose(self, step, tuple(labels))


def _at_rest() -> bool:
    """Whether the kernel decides at quiescence (no task running): not a data choice made
    inside a task's code, nor a decision taken while a task keeps trio busy."""
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        return True
    return False


class _Search:
    def __init__(self, result: Exploration, fingerprint: Callable[[Any], Any] | None) -> None:
        self.result = result
        self.fingerprint = fingerprint
        self.stack: list[_Node] = []
        self.finished = False
        #: State digest -> (depth, sleep set) of each time it was fully explored.
        self.explored: dict[bytes, list[tuple[int, frozenset[str]]]] = {}
        self.seen: set[bytes] = set()
        self.diverged: str | None = None

    # -- inside a run -------------------------------------------------------

    def choose(self, run: _Run, step: int, labels: tuple[str, ...]) -> int:
        stack = self.stack
        if step <= len(stack):
            node = stack[step - 1]
            if node.labels != labels:
                self.diverged = (f"step {step}: expected [{', '.join(node.labels)}], "
                                 f"got [{', '.join(labels)}]")
                raise _Stop("diverged")
            return node.chosen
        result = self.result
        if step > result.bounds.max_steps:
            run.stop = "cut"
            raise _Stop("cut")
        sim = run.sim
        assert sim is not None
        rest = _at_rest()
        # A state at rest with no preemption left: its options are the ordinary ones,
        # and whatever is taken, the next state depends on the state and that option.
        settled = rest and sim.preemptions_left <= 0
        reducible = settled and result.por
        sleep: frozenset[str] = frozenset()
        if reducible and stack and stack[-1].reducible:
            parent = stack[-1]
            taken = parent.labels[parent.chosen]
            candidates = parent.sleep.union(parent.labels[i] for i in parent.done)
            independent = run.independence.independent
            enabled = set(labels)
            sleep = frozenset(x for x in candidates if x in enabled and independent(x, taken))
        key = None
        if self.fingerprint is not None and rest:
            key = _state_key(sim, run.world, self.fingerprint, labels, result.scenario)
            self.seen.add(key)
            if result.prune_states and settled:
                for depth, slept in self.explored.get(key, ()):
                    if depth <= step and slept <= sleep:
                        run.stop = "state"
                        raise _Stop("state")
        first = next((i for i, label in enumerate(labels) if label not in sleep), None)
        if first is None:
            run.stop = "sleep"
            raise _Stop("sleep")
        stack.append(_Node(labels, reducible, sleep, first, step, key if settled else None))
        return first

    # -- between runs -------------------------------------------------------

    def after(self, sim: Sim) -> None:
        run = sim.strategy
        assert isinstance(run, _Run)
        result = self.result
        if self.diverged is None and run.stop is None and sim.step < len(self.stack):
            self.diverged = (f"the run ended after {sim.step} decisions, but the same "
                             f"choices made {len(self.stack)} before")
        if self.diverged is not None:
            path = " ".join(str(n.chosen) for n in self.stack[:sim.step])
            raise DivergenceError(
                f"{result.scenario} does not repeat itself: forcing the same choices again "
                f"gave other options at {self.diverged} (choices {path}); the scenario "
                "reads something dst does not control (`dst run --check-determinism` "
                "tells what)")
        result.schedules += 1
        result.max_depth = max(result.max_depth, sim.step)
        if run.stop is not None:
            result.ended[run.stop] += 1
        elif sim.violated:
            result.ended["violation"] += 1
            self._violated(sim)
        else:
            result.ended["rest"] += 1
        self._backtrack()

    def _violated(self, sim: Sim) -> None:
        found = self.result.violations
        for name in sim.violated:
            v = found.get(name)
            if v is not None:
                v.schedules += 1
                if v.steps <= sim.step:
                    continue
            message = next((r[4] for r in sim.records if r[0] == "violation" and r[3] == name),
                           "")
            decisions = [(n.labels, n.chosen) for n in self.stack]
            found[name] = Violation(name, message, decisions,
                                    v.schedules if v is not None else 1)

    def _backtrack(self) -> None:
        stack = self.stack
        while stack:
            node = stack[-1]
            node.done.add(node.chosen)
            for i, label in enumerate(node.labels):
                if i not in node.done and label not in node.sleep:
                    node.chosen = i
                    return
            stack.pop()
            self.result.pruned_branches += sum(1 for label in node.labels if label in node.sleep)
            if node.key is not None and self.result.prune_states:
                self.explored.setdefault(node.key, []).append((node.depth, node.sleep))
        self.finished = True


def explore(
    scenario: Scenario,
    config: Mapping[str, Any],
    bounds: Bounds,
    *,
    por: bool = True,
    prune_states: bool = False,
    seed: int = 0,
    progress: Callable[[Exploration, float], None] | None = None,
) -> Exploration:
    """Run every schedule of ``scenario`` within ``bounds`` (see the module docstring).

    ``por=False`` is plain depth-first search (every interleaving), for
    comparison.  ``prune_states`` needs ``@scenario.fingerprint``.  ``seed``
    fixes the draws fakes make from ``sim.rng`` and ``env.rng``; only recorded
    choices are explored.  ``progress(result, seconds)`` is called between
    schedules, about every 50.  Errors raised by the scenario propagate.
    """
    if prune_states and scenario.fingerprint_of is None:
        raise UsageError(f"{scenario.name} declares no @scenario.fingerprint, so its "
                         "states cannot be compared; explore without pruning states")
    cfg = dict(config)
    plan = fault_plan(scenario, cfg, bounds)
    # An ``eventually`` property is met the first time it holds, so whether it is
    # met depends on the states a run passed through, not only on where it is:
    # two orders of independent steps reach the same state with different
    # verdicts, and reordering them is no longer harmless.
    why_not = ("the scenario has eventually properties, whose verdict depends on the "
               "order of the states a run passes through") if (
                   por and scenario.eventual_checks) else None
    result = Exploration(scenario.name, cfg, bounds, plan, por and why_not is None,
                         prune_states, list(scenario.all_checks), no_reduction=why_not)
    search = _Search(result, scenario.fingerprint_of)
    start = _clock()

    def jobs() -> Any:
        while not search.finished:
            if bounds.max_schedules is not None and result.schedules >= bounds.max_schedules:
                result.stopped = "max_schedules"
                return
            if bounds.budget is not None and _clock() - start >= bounds.budget:
                result.stopped = "budget"
                return
            if progress is not None and result.schedules % 50 == 0:
                progress(result, _clock() - start)
            run = _Run(search, scenario, cfg)
            # One step past the bound, so that the search (not the kernel) sees
            # whether anything was left to do: only then is the run cut.
            sim = Sim(seed, run, faults=plan, max_steps=bounds.max_steps + 1)
            run.sim = sim
            yield sim, run.build

    run_sims(jobs(), search.after)
    result.seconds = _clock() - start
    result.exhausted = search.finished
    if scenario.fingerprint_of is not None:
        result.states = len(search.seen)
    return result


class _Recorded(Replay):
    """Forces a schedule found by the search (the trace header names the explorer)."""

    name = "explore"


def record(scenario: Scenario, exploration: Exploration, violation: Violation,
           *, seed: int = 0) -> RunResult:
    """Run ``violation``'s schedule again, keeping its records: an ordinary trace."""
    cfg = dict(exploration.config)
    steps = max(scenario.max_steps, exploration.bounds.max_steps + 1)
    out: list[Sim] = []
    sim = Sim(seed, _Recorded(violation.decisions), faults=exploration.plan, max_steps=steps)
    run_sims([(sim, lambda s: scenario.build(s, cfg))], out.append)
    return RunResult(
        seed=seed, verdict=sim.verdict, violated=list(sim.violated), steps=sim.step,
        virtual_time=sim.now, ended=sim.ended or "quiescent", sim=sim,
        scenario=scenario.name, config=cfg, strategy=_Recorded.name,
        divergence=str(sim.divergence) if sim.divergence else None)


def replays(scenario: Scenario, trace: Trace) -> str | None:
    """None when ``dst replay`` reproduces ``trace`` record for record, else why not.

    ``dst replay`` runs the fault plan the trace's header records, so a schedule
    found under other budgets than the scenario's replays; it runs every check
    of ``scenario``, so a schedule found checking fewer (``--invariant``) may
    stop earlier there, at another violation.
    """
    return replay_trace(scenario, trace).divergence


# -- state digests ----------------------------------------------------------------


def _state_key(sim: Sim, world: Any, fingerprint: Callable[[Any], Any],
               labels: tuple[str, ...], scenario: str) -> bytes:
    """A digest of everything that decides what can happen next, as far as dst can see it."""
    kernel: dict[str, Any] = {
        "enabled": labels,
        "now": sim.now,
        "budgets": [sim.crashes_left, sim.drops_left, sim.dups_left, sim.preemptions_left,
                    sim.partitions_left, sim.cut_off, sorted(sim.crashed), sim.calm_at,
                    [name for name, _, _ in getattr(sim, "_pending", ())],
                    getattr(sim, "_service_faults", None), getattr(sim, "_process_crashes", None),
                    getattr(sim, "_link_drops", None), getattr(sim, "_link_dups", None)],
        "stores": {name: sorted(store.data.items()) for name, store in sim.stores.items()},
        "in_flight": [[m.id, m.source, m.dest, m.body] for m in sim.net.in_flight.values()],
        "processes": {name: [p.state, p.incarnation, [[m.source, m.body] for m in p.mailbox]]
                      for name, p in sim.processes.items()},
    }
    try:
        text = json.dumps([fingerprint(world), kernel], sort_keys=True,
                          separators=(",", ":"), default=_encode)
    except (TypeError, ValueError) as exc:
        raise ScenarioError(
            f"the fingerprint of {scenario} returned a value with no stable text ({exc}); "
            "return JSON values, tuples, frozensets, strings and numbers") from None
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def _encode(value: Any) -> Any:
    if isinstance(value, (set, frozenset)):
        return sorted(json.dumps(v, sort_keys=True, default=_encode) for v in value)
    raise TypeError(f"{type(value).__name__} is not JSON")
