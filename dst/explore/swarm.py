"""Swarm testing: each seed runs under its own fault mix, drawn from the scenario's plan.

After Groce, Zhang, Eide, Chen and Regehr, "Swarm Testing" (ISSTA 2012).  One
fixed plan offers every fault kind in every run, and some bugs are found only
when a kind is *absent*: a crash budget spent early hides the lost reply that
needed the process alive, frequent drops keep the retry path from ever
completing, a preemption where a lock would have been taken masks the race
after it.  A swarm of plans, each switching some kinds off, reaches those
runs without anyone naming them.

Per seed, every fault kind the scenario's plan enables (crashes, drops,
duplicates, partitions, each service's ``fail``/``lose_reply``/``delay``/
``repeat``, preemptions at trio checkpoints, slow timers) is switched on with probability
1/2, given a budget drawn uniformly from 1 to the plan's, and its weight
multiplied by a factor drawn log-uniformly from 1/4 to 4.  Everything else of
the plan (per-process and per-link budgets, crash points, ``faults_until``,
durations) is kept: those describe the system, not the mix.  The run is then a
random walk.  The drawn plan is the one the run uses and the one its trace
header records, so ``dst replay`` rebuilds it from the header.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

from ..sim.faults import SERVICE_FAULTS, FaultPlan, ServiceFaults
from ..sim.strategy import RandomWalk

#: A kind's weight is the plan's times a factor in [1/SPREAD, SPREAD], log-uniform.
SPREAD = 4.0


class SwarmWalk(RandomWalk):
    """A seeded random walk under the seed's own plan; named so in trace headers."""

    name = "swarm"


def _factor(rng: random.Random) -> float:
    return math.exp(rng.uniform(-math.log(SPREAD), math.log(SPREAD)))


def _weight(rng: random.Random, weight: float) -> float:
    # Four significant digits, so that the trace header reads as a plan a person
    # would write (and a small weight never rounds to 0).
    return float(f"{weight * _factor(rng):.4g}")


def _budget(rng: random.Random, budget: int) -> int:
    """0 half the time (the kind is off), else uniform in 1..budget."""
    if budget <= 0 or rng.random() < 0.5:
        return 0
    return rng.randint(1, budget)


def swarm_plan(seed: int, base: FaultPlan) -> FaultPlan:
    """The plan seed ``seed`` runs under: ``base`` with its own mix of fault kinds.

    Draws happen in a fixed order (the kinds in the plan's field order, services
    by name), so the plan is a function of the seed and ``base`` alone.
    """
    rng = random.Random(f"dst-swarm/{seed}")
    changes: dict[str, object] = {}
    for budget, weight in (("max_crashes", "crash_weight"), ("max_drops", "drop_weight"),
                           ("max_dups", "dup_weight"), ("max_partitions", "partition_weight"),
                           ("preemptions", "preempt_weight"), ("max_slow", "slow_weight")):
        plan_budget = int(getattr(base, budget) or 0)  # max_slow=None: unbudgeted, kept
        if plan_budget > 0:
            changes[budget] = drawn = _budget(rng, plan_budget)
            scaled = _weight(rng, float(getattr(base, weight)))  # drawn either way
            if drawn:
                changes[weight] = scaled
    services: dict[str, ServiceFaults] = {}
    for name in sorted(base.services):
        sf = base.services[name]
        kinds = {kind: _budget(rng, sf.budget(kind)) for kind in SERVICE_FAULTS
                 if sf.budget(kind) > 0}
        scaled = _weight(rng, sf.weight)
        services[name] = replace(sf, **kinds, weight=scaled if any(kinds.values())
                                 else sf.weight)
    if services:
        changes["services"] = services
    return replace(base, **changes)  # type: ignore[arg-type]
