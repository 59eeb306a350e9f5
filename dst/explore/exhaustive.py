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

Depth-first search (:mod:`dst.explore.search`; this module drives it, deepens it
and records what it found) with **sleep sets** (Godefroid) skips schedules that differ
from explored ones only in the order of independent options
(:mod:`dst.explore.independence`, which weighs each option's label and the
*footprint* of its step, :mod:`dst.explore.footprint`; two tasks of one
process also by what each can reach, :mod:`dst.explore.views`).  Sleep sets
alone visit every reachable state and never run two schedules that are
reorderings of each other to the end; a run whose every enabled option is
asleep stops there (*sleep-blocked*).  Which option is tried first is learnt
as the search goes (:mod:`dst.explore.ordering`): it changes how many runs the
search takes, not what it finds.  Reduction applies only at decisions taken at rest with no
preemption left: while the preemption budget lasts every option can spend it,
and a data choice or a decision taken while a task still runs happens inside
some option's code, so those decisions explore every option and pass on an
empty sleep set.

**States.** A scenario with ``@scenario.fingerprint`` has its distinct states
counted (:mod:`dst.explore.states`).  With state caching (``prune_states``; by
default when the fingerprint is exact) the key also holds every task's memory
(:mod:`dst.explore.memory`), and a state already explored is skipped when it
was explored with a sleep set contained in the current one (Godefroid's
condition for combining state caching with sleep sets), with no fewer steps
left or with no run below it cut at the bound, and with no more checks already
broken on the way there.  What its branches found counts from the revisit: the
shortest violation of each check below it, appended to the current path, so
the shortest violations stay the shortest.

**Checks.** The explorer checks the invariants itself, after every step, so
that a run goes on past one invariant's violation and every invariant gets its
own verdict and its own shortest violation in one search; a run stops at a
violation only when every invariant is broken on it (and the scenario has no
end checks or eventually properties), or when the kernel stops it at a built-in
finding.

**Bounds.** A run still having something to do after ``max_steps`` decisions is
*cut*; any cut makes "no violation" a statement about runs of that length only,
and the result says so.  A search stopped by its schedule or time budget is not
a proof at all.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import UsageError
from ..runner.single import RunResult, replay_trace
from ..scenario import Scenario
from ..sim.kernel import Sim
from ..sim.run import run_sims
from ..sim.strategy import Replay
from ..trace.model import Trace
from .findings import BUILT_IN, Bounds, Exploration, Violation, fault_plan
from .search import _Run, _Search

__all__ = ["BUILT_IN", "Bounds", "Exploration", "Violation", "deepen", "explore", "fault_plan",
           "record", "replays"]

_clock = time.perf_counter


def explore(
    scenario: Scenario,
    config: Mapping[str, Any],
    bounds: Bounds,
    *,
    por: bool = True,
    prune_states: bool | None = None,
    seed: int = 0,
    progress: Callable[[Exploration, float], None] | None = None,
) -> Exploration:
    """Run every schedule of ``scenario`` within ``bounds`` (see the module docstring).

    ``por=False`` is plain depth-first search (every interleaving), for
    comparison.  ``prune_states`` skips states explored before: ``None`` (the
    default) does so when the scenario's fingerprint is exact
    (``@scenario.fingerprint(exact=True)``), ``True`` needs a fingerprint, and
    ``False`` never does.  ``seed`` fixes the draws fakes make from ``sim.rng``
    and ``env.rng``; only recorded choices are explored.  ``progress(result,
    seconds)`` is called between schedules, about every 50.  Errors raised by
    the scenario propagate.
    """
    if prune_states and scenario.fingerprint_of is None and scenario.state_of is None:
        raise UsageError(f"{scenario.name} declares no @scenario.fingerprint, so its "
                         "states cannot be compared; explore without pruning states")
    if prune_states is None:
        prune_states = scenario.state_of is not None
    cfg = dict(config)
    plan = fault_plan(scenario, cfg, bounds)
    # An ``eventually`` property is met the first time it holds, so whether it is
    # met depends on the states a run passed through, not only on where it is:
    # two orders of independent steps reach the same state with different
    # verdicts.  Reduction stays on for the safety checks; such a property is then
    # reported only when a schedule run breaks it, never as holding.
    result = Exploration(scenario.name, cfg, bounds, plan, por, prune_states,
                         list(scenario.all_checks), declared=scenario.fault_plan(cfg), seed=seed,
                         order_blind=tuple(scenario.eventual_checks) if por else ())
    search = _Search(result, scenario, memory=prune_states)
    # The explorer checks the invariants and names states itself; the kernel
    # keeps the end checks, the eventually properties and its built-in findings.
    runs = dataclasses.replace(scenario, fingerprint_of=None, invariants={})
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
            run = _Run(search, runs, cfg)
            # One step past the bound, so that the search (not the kernel) sees
            # whether anything was left to do: only then is the run cut.
            sim = Sim(seed, run, faults=plan, max_steps=bounds.max_steps + 1)
            run.sim = sim
            yield sim, run.build

    try:
        run_sims(jobs(), search.after)
    finally:
        search.tap.remove()
    result.seconds = _clock() - start
    result.exhausted = search.finished
    if search.fingerprint is not None:
        result.states = len(search.seen)
    return result


def deepen(scenario: Scenario, config: Mapping[str, Any], bounds: Bounds, *,
           first: int = 8, **options: Any) -> Exploration:
    """:func:`explore` by iterative deepening: every schedule of up to ``first`` steps,
    then twice as many, up to ``bounds.max_steps``, within the one schedule and time
    budget of ``bounds``.  A search stopped by its budget still says the depth it
    covered completely (``complete_depth``), and the shortest violations come from
    the shallowest level that found them.  A level none of whose runs reached its
    bound covers every depth: the search ends there."""
    start = _clock()
    depth = min(bounds.max_steps, first)
    total = 0
    found: dict[str, Violation] = {}
    complete = None
    while True:
        left_time = None if bounds.budget is None else max(0.0, bounds.budget - (_clock() - start))
        left_runs = (None if bounds.max_schedules is None
                     else max(1, bounds.max_schedules - total))
        level = explore(scenario, config, dataclasses.replace(
            bounds, max_steps=depth, budget=left_time, max_schedules=left_runs), **options)
        total += level.schedules
        for name, v in level.violations.items():
            if name not in found or found[name].steps > v.steps:
                found[name] = v
        if level.exhausted:
            complete = depth
            if level.cut == 0:  # no run reached the bound: deeper levels are the same
                level.bounds = bounds
                break
        if not level.exhausted or depth >= bounds.max_steps:
            break
        depth = min(bounds.max_steps, depth * 2)
    if not level.exhausted:
        level.bounds = dataclasses.replace(level.bounds, budget=bounds.budget,
                                           max_schedules=bounds.max_schedules)
    level.violations = found
    level.schedules = total
    level.complete_depth = complete
    level.seconds = _clock() - start
    return level


class _Recorded(Replay):
    """Forces a schedule found by the search (the trace header names the explorer)."""

    name = "explore"


def record(scenario: Scenario, exploration: Exploration, violation: Violation,
           *, seed: int = 0) -> RunResult:
    """Run ``violation``'s schedule again, keeping its records: an ordinary trace.

    The run checks ``violation``'s check alone: the search saw each check's
    violations past the others', and the schedule may pass another check's
    violation on its way (``dst replay``, which checks every one, then stops
    there: :func:`replays` says so).
    """
    cfg = dict(exploration.config)
    name = violation.name
    alone = dataclasses.replace(
        scenario, invariants={k: v for k, v in scenario.invariants.items() if k == name},
        end_checks={k: v for k, v in scenario.end_checks.items() if k == name})
    steps = max(scenario.max_steps, exploration.bounds.max_steps + 1)
    out: list[Sim] = []
    sim = Sim(seed, _Recorded(violation.decisions), faults=exploration.plan, max_steps=steps)
    run_sims([(sim, lambda s: alone.build(s, cfg))], out.append)
    return RunResult(
        seed=seed, verdict=sim.verdict, violated=list(sim.violated), steps=sim.step,
        virtual_time=sim.now, ended=sim.ended or "quiescent", sim=sim,
        scenario=scenario.name, config=cfg, strategy=_Recorded.name,
        divergence=str(sim.divergence) if sim.divergence else None)


def replays(scenario: Scenario, trace: Trace) -> str | None:
    """None when ``dst replay`` reproduces ``trace`` record for record, else why not.

    ``dst replay`` runs the fault plan the trace's header records, so a schedule
    found under other budgets than the scenario's replays; it runs every check
    of ``scenario``, so a schedule that passes another check's violation on its
    way (or was found checking fewer, ``--invariant``) stops earlier there.
    """
    return replay_trace(scenario, trace).divergence
