"""What an exhaustive search ranges over, and what it found.

:class:`Bounds` say what "every schedule" means (decisions per run, fault
budgets); :class:`Exploration` is what a search ran and shows, with the
verdict of every check and the sentence that says under which bounds a "no
violation" is a proof; :class:`Violation` is the shortest schedule found that
breaks one check.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..scenario import Scenario
from ..sim.faults import FaultPlan

#: Findings the kernel reports without a declaration.
BUILT_IN = ("Deadlock", "Livelock", "NoUncaughtError", "Nondeterminism")


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
    partitions: int = 0
    #: Timers firing while other work could run (``FaultPlan.max_slow``; None:
    #: unbudgeted, every timer may, as a plan with ``max_slow=None`` says).
    slow: int | None = 0
    max_schedules: int | None = 100_000
    #: Seconds of wall time for the whole search.
    budget: float | None = None

    def describe(self) -> str:
        def n(count: int, one: str, many: str) -> str:
            return f"1 {one}" if count == 1 else f"{count} {many}"

        parts = [f"at most {self.max_steps} steps", n(self.crashes, "crash", "crashes"),
                 n(self.drops, "drop", "drops"), n(self.dups, "duplicate", "duplicates"),
                 n(self.preemptions, "preemption", "preemptions"),
                 n(self.partitions, "partition", "partitions"),
                 "every timer early when it may" if self.slow is None
                 else n(self.slow, "slow timer", "slow timers")]
        if self.service_faults:
            parts.append("the scenario's service faults")
        return ", ".join(parts)


def fault_plan(scenario: Scenario, config: Mapping[str, Any], bounds: Bounds) -> FaultPlan:
    """The scenario's plan with the budgets of ``bounds``: faults off unless asked."""
    base = scenario.fault_plan(config)
    return dataclasses.replace(
        base, max_crashes=bounds.crashes, max_drops=bounds.drops, max_dups=bounds.dups,
        preemptions=bounds.preemptions, max_partitions=bounds.partitions, max_slow=bounds.slow,
        services=base.services if bounds.service_faults else {})


@dataclass
class Violation:
    """The shortest schedule found that breaks one check."""

    name: str
    message: str
    #: Decisions of that schedule, as ``Trace.decisions`` lists them.
    decisions: list[tuple[tuple[str, ...], int]]
    #: Schedules that reached a violation of this check.
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
    #: Check -> runs that stopped at its violation before their end (a built-in
    #: finding; or every invariant broken, when the scenario has no end checks):
    #: what the other checks did not see.
    stops: Counter[str] = field(default_factory=Counter)
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
    #: Why states stopped being cached although asked for, if they did.
    no_pruning: str | None = None
    #: The scenario's own fault plan (what ``dst run`` explores), to say what the
    #: search left out of it; and the seed of the fakes' own draws.
    declared: FaultPlan | None = None
    seed: int = 0
    #: ``eventually`` properties -> schedules that ended (cut at the bound, or stopped
    #: by the search) before the property's deadline came: it was not checked there.
    unchecked: Counter[str] = field(default_factory=Counter)
    #: ``eventually`` properties whose verdict reduction cannot give (it keeps no order
    #: of the states a run passes through): only a violation found is reported.
    order_blind: tuple[str, ...] = ()
    #: With iterative deepening: the largest step bound every schedule of which ran.
    complete_depth: int | None = None

    def limits(self) -> list[str]:
        """What the search left out of what ``dst run`` explores: budgets below the
        scenario's plan, fault kinds left out, draws fixed to one seed."""
        out = []
        plan, b = self.declared, self.bounds
        if plan is not None:
            for have, allowed, one, many in (
                    (b.crashes, plan.max_crashes, "crash", "crashes"),
                    (b.drops, plan.max_drops, "drop", "drops"),
                    (b.dups, plan.max_dups, "duplicate", "duplicates"),
                    (b.partitions, plan.max_partitions, "partition", "partitions"),
                    (b.preemptions, plan.preemptions, "preemption", "preemptions")):
                if have < allowed:
                    out.append(f"{have} {one if have == 1 else many} (the plan allows {allowed})")
            if b.slow is not None and (plan.max_slow is None or b.slow < plan.max_slow):
                allowed_slow = ("every timer early" if plan.max_slow is None
                                else str(plan.max_slow))
                out.append(f"{b.slow} slow timer{'' if b.slow == 1 else 's'} "
                           f"(the plan allows {allowed_slow})")
            if not b.service_faults and any(
                    sf.fail or sf.lose_reply or sf.delay or sf.repeat
                    for sf in plan.services.values()):
                out.append("no service faults (the plan has some: --service-faults)")
        out.append(f"sim.rng and env.rng seed {self.seed} only")
        return out

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
        if name in self.order_blind or self.unchecked.get(name):
            return "not checked", False
        if self.proof and not self._masked(name):
            return "holds", True
        return "not violated", False

    def caveat(self, name: str) -> str:
        if name in self.violations:
            return ""
        if name in self.order_blind:
            return ("partial-order reduction keeps no order of the states a run passes "
                    "through, which an eventually property depends on: check it with --no-por")
        if self.unchecked.get(name):
            return (f"{_schedules(self.unchecked[name])} cut at {self.bounds.max_steps} steps "
                    "before its deadline came: raise --max-steps")
        if not self.exhausted:
            return (f"the search stopped ({self.stopped_text()}) before every schedule ran: "
                    "not a proof")
        if self.cut:
            return (f"{_schedules(self.cut)} cut at {self.bounds.max_steps} steps: "
                    "a proof for runs that long only")
        masked = self._masked(name)
        if masked:
            first = ", ".join(sorted(n for n in self.stops if n != name))
            return (f"{_schedules(masked)} stopped at another finding first ({first}): "
                    "what came after it was not checked")
        return ""

    def _masked(self, name: str) -> int:
        return sum(n for check, n in self.stops.items() if check != name)

    def stopped_text(self) -> str:
        if self.stopped == "budget":
            return f"time budget of {self.bounds.budget:g}s"
        if self.stopped == "max_schedules":
            return f"--max-schedules {self.bounds.max_schedules:,}"
        return "complete"

    def statement(self) -> str:
        """The sentence that says what the search proves, and what it does not."""
        space = (f"every schedule of {self.scenario} with {self.bounds.describe()}"
                 + (" (up to reordering of independent steps)" if self.por else "")
                 + " [" + "; ".join(self.limits()) + "]")
        if not self.exhausted:
            depth = ("" if not self.complete_depth else
                     f"; every schedule of up to {self.complete_depth} steps ran: "
                     + ("no violation" if not self.violations else "violations above"))
            return (f"not a proof: the search stopped at {self.stopped_text()} after "
                    f"{self.schedules:,} schedules, before {space} had run{depth}")
        if self.cut:
            return (f"{space} was run, but {_schedules(self.cut)} cut at the step bound: "
                    f"a proof for runs of at most {self.bounds.max_steps} steps, "
                    "not for the unbounded system")
        return f"{space} was run to its end: what holds above is proven within these bounds"


def _schedules(n: int) -> str:
    return "1 schedule was" if n == 1 else f"{n:,} schedules were"
