"""The depth-first search over schedules that :func:`dst.explore.exhaustive.explore` drives.

One :class:`_Run` is the strategy of one run: it forces the search's current
path and asks :class:`_Search` for each new decision.  The search keeps the
path as a stack of :class:`_Node` (the options of each decision, its sleep set,
the footprint of each option's step, the shortest violations found below it),
checks the invariants after every step, caches explored states
(:class:`_Explored`), and backtracks between runs.  Why it is built this way
(stateless model checking, sleep sets, state caching, per-check verdicts,
bounds) is the essay at the top of :mod:`dst.explore.exhaustive`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import trio
import trio.lowlevel as ll

from ..errors import DivergenceError
from ..scenario import Check, Scenario
from ..sim.findings import violation_message
from ..sim.kernel import Sim
from .findings import Exploration, Violation
from .footprint import FOREIGN, ClockTap, Footprint, StepWatch, watch_stores
from .independence import Independence
from .memory import MET, Reads, Unreadable, modules_of, modules_state
from .ordering import Ordering
from .states import process_memory, state_key, task_labels
from .views import commute_in_process, sharing, views, views_after


class _Stop(DivergenceError):
    """Raised by the search strategy to end a run early (not a divergence of a replay)."""


#: Decisions as ``Trace.decisions`` lists them: (enabled labels, index chosen).
Decisions = tuple[tuple[tuple[str, ...], int], ...]
_NONE: frozenset[str] = frozenset()


@dataclass(slots=True)
class _Node:
    """One decision on the current path of the depth-first search."""

    labels: tuple[str, ...]
    reducible: bool
    #: Options asleep here, with the footprint each had when it was explored.
    sleep: dict[str, Footprint | None]
    chosen: int
    depth: int
    key: bytes | None = None
    done: set[int] = field(default_factory=set)
    #: The footprint of each option's step from this state, once it ran.
    prints: dict[int, Footprint] = field(default_factory=dict)
    #: Checks broken on the path up to and in this node's state.
    broken: frozenset[str] = _NONE
    #: A run below this node was cut at the step bound.
    cut: bool = False
    #: Check -> (the shortest decisions found from this node to its violation, message).
    best: dict[str, tuple[Decisions, str]] = field(default_factory=dict)
    #: Digest of each process's memory in this node's state, and of the globals
    #: (under ``""``), when Python state is watched.
    memory: dict[str, bytes] | None = None
    #: The order in which its options are tried (indices into ``labels``).
    order: tuple[int, ...] = ()
    #: The tasks of each process with options of two or more of its tasks here, and
    #: their views in this state (:mod:`dst.explore.views`; state caching only).
    groups: dict[str, list[str]] | None = None
    views: dict[str, bytes] | None = None
    #: Option taken -> the views of the other tasks of its group in the state it led to.
    after: dict[int, dict[str, bytes]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Explored:
    """A state whose every branch was explored: what a revisit may rely on."""

    depth: int
    sleep: frozenset[str]
    broken: frozenset[str]
    cut: bool
    best: dict[str, tuple[Decisions, str]]


class _Run:
    """The strategy of one run: forces the search's current path, then extends it."""

    name = "explore"

    def __init__(self, search: _Search, scenario: Scenario, config: dict[str, Any]) -> None:
        self.search = search
        self.scenario = scenario
        self.config = config
        self.sim: Sim | None = None
        self.world: Any = None
        #: Why this run was ended early by the search (``cut``, ``sleep``, ``state``,
        #: ``violation``).
        self.stop: str | None = None
        #: The stores the watch sees (a store made during the run is watched from then on).
        self.stores = 0
        self.watch = search.watch
        self.independence = search.independence

    def build(self, sim: Sim) -> None:
        self.search.watching(self, sim)
        self.world = self.scenario.build(sim, self.config)
        watch_stores(sim.stores.values(), self.watch)
        self.stores = len(sim.stores)

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


@functools.lru_cache(maxsize=4096)
def _owner(label: str) -> str | None:
    """Whose step a chosen option is, for counting each task's steps."""
    if label.startswith("deliver:"):
        return "->" + label.rpartition("->")[2]
    head, at, _ = label.partition("@")
    return head if at and head != "timer" else None


def _not_due(sim: Sim, names: Sequence[str]) -> list[str]:
    """The ``eventually`` properties whose verdict a run stopped now would not have:
    every one while faults have not stopped, else those still waiting to hold."""
    if not names:
        return []
    if sim.calm_at is None:
        return list(names)
    return [name for name, _, _ in getattr(sim, "_pending", ())]


def _touched(fp: Footprint, before: Mapping[str, bytes], after: Mapping[str, bytes]) -> Footprint:
    """``fp`` with the processes whose memory differs between the two states (``""``:
    the globals) as what it touched."""
    names = before.keys() | after.keys()
    return dataclasses.replace(
        fp, touched=frozenset(n for n in names if before.get(n) != after.get(n)))


class _Search:
    def __init__(self, result: Exploration, scenario: Scenario, memory: bool) -> None:
        self.result = result
        self.exact = scenario.state_of is not None
        self.fingerprint = scenario.state_of or scenario.fingerprint_of
        #: Keys hold every task's memory (state caching); off once a state is unreadable.
        self.memory = memory
        #: Python memory is read at every state, so that a step's footprint says whose
        #: memory and which globals it changed (reduction needs it); off once unreadable.
        self.python = result.por
        #: The watched modules whose globals are read: every one seen in this search,
        #: so that two states' digests cover the same modules.
        self.modules: set[str] = set()
        # Modules an earlier search's writer met and left (it stopped at a violation
        # before reading them) belong to that search, not this one.
        MET.clear()
        self.invariants: dict[str, Check] = dict(scenario.invariants)
        self.eventual = tuple(scenario.eventual_checks)
        #: A run may stop once every invariant is broken on it: nothing is left to see.
        self.stop_when_broken = bool(self.invariants) and not (
            scenario.end_checks or scenario.eventual_checks)
        self.stack: list[_Node] = []
        self.finished = False
        #: State digest -> what each full exploration of it found.
        self.explored: dict[bytes, list[_Explored]] = {}
        self.seen: set[bytes] = set()
        self.diverged: str | None = None
        #: One watch for every run of the search.
        self.watch = StepWatch()
        self.tap = ClockTap()
        self.sim: Sim | None = None
        #: One relation for every run (it keeps what it learnt of each label).
        self.independence = Independence(lambda: self._sim().processes,
                                         lambda: self._sim().stores)
        self.ordering = Ordering()
        #: What was read of the state the search is in (see :data:`dst.explore.memory.Reads`).
        self.reads: Reads = {}

    def _sim(self) -> Sim:
        assert self.sim is not None
        return self.sim

    def watching(self, run: _Run, sim: Sim) -> None:
        """Inside a run: make sure the watch sees its new steps and the clock's reads.

        A run first replays the search's path, whose footprints are known: the
        watch is installed only from the last decision of that path on.
        """
        self.sim = sim
        watch = self.watch
        watch.labels = sim._task_labels
        watch.owners = sim._incarnation_of
        self.tap.watch = watch
        self.tap.install(ll.current_clock())
        if self.stack:
            watch.uninstall()
        else:
            watch.install()
        watch.take()  # what ran before the run's first step is no step

    # -- inside a run -------------------------------------------------------

    def _check(self, run: _Run) -> list[tuple[str, str]]:
        """The invariants the state the last step left breaks, with their messages."""
        world = run.world
        out = []
        for name, fn in self.invariants.items():
            verdict = fn(world)
            if verdict is not True:
                out.append((name, violation_message(name, verdict, fn, None)))
        return out

    def choose(self, run: _Run, step: int, labels: tuple[str, ...]) -> int:
        stack = self.stack
        rest = _at_rest()
        watch = run.watch
        sim = run.sim
        assert sim is not None
        if len(sim.stores) != run.stores:
            # A store made by the step just taken: what that step did with it went unseen.
            watch_stores(sim.stores.values(), watch)
            run.stores = len(sim.stores)
            watch.taint()
        # The step just taken ends here; one that made a data choice, or is decided
        # while a task runs, is no single transition.
        fp = watch.take() if rest else FOREIGN
        if not rest:
            watch.taint()
        if 2 <= step <= len(stack) + 1:
            prev = stack[step - 2]
            if prev.chosen not in prev.prints:
                # (A step replayed unwatched had its footprint taken when it was new.)
                prev.prints[prev.chosen] = fp if watch.installed else FOREIGN
        if step <= len(stack):
            # A state an earlier run checked already (checks only read the world).
            node = stack[step - 1]
            if node.labels != labels:
                self.diverged = (f"step {step}: expected [{', '.join(node.labels)}], "
                                 f"got [{', '.join(labels)}]")
                raise _Stop("diverged")
            if step == len(stack):
                watch.install()  # the next step is new: watch it
            return node.chosen
        # What is read of this state (for its key and the tasks' views), read once.
        self.reads = {}
        memory = self._memory(sim) if rest else None
        if stack and memory is not None:
            parent = stack[-1]
            if parent.memory is not None and step == len(stack) + 1:
                fp = _touched(parent.prints.get(parent.chosen, fp), parent.memory, memory)
                parent.prints[parent.chosen] = fp
        if stack:
            parent = stack[-1]
            self.ordering.learn(parent.labels[parent.chosen], parent.labels, labels)
            if parent.groups is not None and rest:
                left = views_after(self.independence, parent.groups,
                                   parent.labels[parent.chosen], sim, self.reads)
                if left is not None:
                    parent.after[parent.chosen] = left
        # The kernel checks invariants exactly here: at rest, before each decision.
        broken = self._check(run) if rest and self.invariants else []
        result = self.result
        before = stack[-1].broken if stack else _NONE
        if broken:
            path = self._decisions()
            for name, message in broken:
                self._found(name, message, path)
            before = before | {name for name, _ in broken}
            if self.stop_when_broken and before.issuperset(self.invariants):
                run.stop = "violation"
                raise _Stop("violation")
        if step > result.bounds.max_steps:
            for node in stack:
                node.cut = True
            for name in _not_due(sim, self.eventual):
                result.unchecked[name] += 1
            run.stop = "cut"
            raise _Stop("cut")
        # A state at rest with no preemption left: its options are the ordinary ones,
        # and whatever is taken, the next state depends on the state and that option.
        settled = rest and sim.preemptions_left <= 0
        reducible = settled and result.por
        sleep: dict[str, Footprint | None] = {}
        if reducible and stack and stack[-1].reducible:
            parent = stack[-1]
            taken = parent.labels[parent.chosen]
            candidates = dict(parent.sleep)
            for i in parent.done:
                candidates[parent.labels[i]] = parent.prints.get(i)
            independent = self.independence.independent
            enabled = set(labels)
            for x, fx in candidates.items():
                if x in enabled and (independent(x, taken, fx, fp) or (
                        parent.views is not None and commute_in_process(
                            self.independence, parent.labels, parent.chosen, parent.views,
                            parent.after, x, fx, fp))):
                    sleep[x] = fx
        key = None
        if self.fingerprint is not None and rest:
            key = self._key(run, sim, labels, memory)
            if key is not None:
                self.seen.add(key)
            if key is not None and result.prune_states and settled:
                for seen in self.explored.get(key, ()):
                    if (seen.sleep <= sleep.keys() and seen.broken <= before
                            and (seen.depth <= step or not seen.cut)):
                        self._reuse(seen)
                        run.stop = "state"
                        raise _Stop("state")
        order = self.ordering.order(labels)
        first = next((i for i in order if labels[i] not in sleep), None)
        if first is None:
            run.stop = "sleep"
            raise _Stop("sleep")
        node = _Node(labels, reducible, sleep, first, step, key if settled else None,
                     broken=before, memory=memory if self.python else None, order=order)
        if reducible and self.python:
            groups = sharing(self.independence, labels, sleep)
            if groups:
                node.groups = groups
                node.views = views(sim, [t for tasks in groups.values() for t in tasks],
                                   self.reads)
        stack.append(node)
        return first

    def _memory(self, sim: Sim) -> dict[str, bytes] | None:
        """The digest of each process's memory, and of the globals under ``""`` (None when
        Python state is not watched, or cannot be read)."""
        if not (self.python or self.memory):
            return None
        try:
            memory = process_memory(sim, reads=self.reads)
            label = task_labels(sim)
            modules = self.modules
            modules |= modules_of(t for p in sim.processes.values() for t in p.live.tasks)
            while True:
                modules |= MET
                MET.clear()
                state = modules_state(modules, label, self.reads)
                if MET <= modules:  # the globals read reach no module not read yet
                    break
            memory[""] = hashlib.blake2b(state, digest_size=16).digest()
            return memory
        except Unreadable as exc:
            # Not a state this search can read: explore on without caching states
            # or reordering steps (slower, never wrong).
            self._unreadable(str(exc))
            return None

    def _unreadable(self, why: str) -> None:
        result = self.result
        if self.python:
            self.python = False
            result.no_reduction = (f"Python state could not be read ({why}), so no two "
                                   "steps were taken as independent")
        if self.memory:
            self.memory = False
            result.prune_states = False
            result.no_pruning = f"states were not cached: {why}"
            self.fingerprint = None if self.exact else self.fingerprint

    def _key(self, run: _Run, sim: Sim, labels: tuple[str, ...],
             memory: dict[str, bytes] | None) -> bytes | None:
        """The state's key (None once states cannot be read); ``memory`` is what
        :meth:`_memory` read of it (state caching only)."""
        assert self.fingerprint is not None
        result = self.result
        if not self.memory:
            return state_key(sim, run.world, self.fingerprint, labels, result.scenario,
                             exact=self.exact)
        assert memory is not None
        steps: Counter[str] = Counter()
        for node in self.stack:
            owner = _owner(node.labels[node.chosen])
            if owner is not None:
                steps[owner] += 1
        try:
            value = self.fingerprint(run.world)
            return state_key(sim, run.world, self.fingerprint, labels, result.scenario,
                             processes=memory, steps=steps, value=value, reads=self.reads)
        except Unreadable as exc:
            self._unreadable(str(exc))
            return None

    def _decisions(self) -> Decisions:
        return tuple((n.labels, n.chosen) for n in self.stack)

    def _reuse(self, seen: _Explored) -> None:
        """A state explored before: what its branches found counts from here too."""
        if seen.cut:
            for node in self.stack:
                node.cut = True
        if seen.best:
            path = self._decisions()
            for name, (suffix, message) in seen.best.items():
                self._found(name, message, path + suffix, reached=False)

    def _found(self, name: str, message: str, decisions: Decisions, *,
               reached: bool = True) -> None:
        """A schedule reaching a violation of ``name``: keep it if it is the shortest, and
        tell every node on the path how far the violation is from it."""
        found = self.result.violations
        v = found.get(name)
        if v is not None and reached:
            v.schedules += 1
        if v is None or v.steps > len(decisions):
            found[name] = Violation(name, message, list(decisions),
                                    v.schedules if v is not None else 1)
        for i, node in enumerate(self.stack):
            known = node.best.get(name)
            if known is None or len(known[0]) > len(decisions) - i:
                node.best[name] = (decisions[i:], message)

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
        if run.stop is None:
            if self.stack:
                last = self.stack[-1]
                if last.chosen not in last.prints:
                    fp = run.watch.take()
                    self.reads = {}
                    memory = self._memory(sim) if last.memory is not None else None
                    if memory is not None and last.memory is not None:
                        fp = _touched(fp, last.memory, memory)
                    last.prints[last.chosen] = fp
            decisions = self._decisions()
            # The state the run ended in (the kernel checks it too), then what the
            # kernel found: its built-in findings and the end checks.
            broken = self._check(run) if self.invariants and sim.ended != "violation" else []
            for name, message in broken:
                self._found(name, message, decisions)
            for name in sim.violated:
                message = next((r[4] for r in sim.records
                                if r[0] == "violation" and r[3] == name), "")
                self._found(name, message, decisions)
                if sim.ended == "violation":
                    result.stops[name] += 1
            run.stop = "violation" if broken or sim.violated else "rest"
        elif run.stop == "violation":
            result.stops["every invariant"] += 1
        result.ended[run.stop] += 1
        self._backtrack()

    def _backtrack(self) -> None:
        stack = self.stack
        while stack:
            node = stack[-1]
            node.done.add(node.chosen)
            for i in node.order:
                if i not in node.done and node.labels[i] not in node.sleep:
                    node.chosen = i
                    return
            stack.pop()
            self.result.pruned_branches += sum(1 for label in node.labels if label in node.sleep)
            if node.key is not None and self.result.prune_states:
                self.explored.setdefault(node.key, []).append(_Explored(
                    node.depth, frozenset(node.sleep), node.broken, node.cut, node.best))
        self.finished = True
