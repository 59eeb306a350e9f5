"""Fault plans: how often, and how many times, the world misbehaves in one run.

A plan is a frozen, printable value.  Each fault is offered to the strategy as
one more enabled option with a weight relative to the ordinary options (weight
1.0: resume a task, deliver a message, fire a timer), and only while its budget
lasts, so a run with ``max_crashes=1`` explores "crash here" at every step but
never crashes twice.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class FaultPlan:
    #: Hard crashes of crashable processes per run.
    max_crashes: int = 0
    #: Weight of "crash P" against 1.0 for an ordinary option.  Small, because
    #: it is offered at every step: 0.05 over ~40 steps crashes about one run in
    #: two when the budget allows.
    crash_weight: float = 0.05
    #: Messages dropped per run.
    max_drops: int = 0
    drop_weight: float = 0.2
    #: Messages duplicated per run.
    max_dups: int = 0
    dup_weight: float = 0.2
    #: Weight of "fire the next timer" while a task or a message could go first
    #: (alone, a timer always has weight 1.0).  Below 1.0 for systems whose work
    #: is quick next to their timeouts: a timeout still fires first sometimes,
    #: but a run is not spent mostly on premature timeouts and resends.
    timer_weight: float = 1.0
    #: Preemptions at trio checkpoints per run.  While any are left, every task
    #: of the system that trio would run next (after ``trio.sleep(0)``, a lock,
    #: an event, a channel operation, a new task, a cancellation) is held at a
    #: choice point instead, and running anything but the task that just
    #: yielded spends one.  0 makes checkpoints ordinary again: only ``Env``
    #: calls, messages, timers and faults are choices.
    preemptions: int = 2
    #: Weight of each preempting option, relative to its usual weight, against
    #: 1.0 for letting the task that yielded go on.
    preempt_weight: float = 0.2

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)

    def describe(self) -> str:
        parts = []
        if self.max_crashes:
            parts.append(f"crashes<={self.max_crashes}")
        if self.max_drops:
            parts.append(f"drops<={self.max_drops}")
        if self.max_dups:
            parts.append(f"dups<={self.max_dups}")
        if self.preemptions:
            parts.append(f"preemptions<={self.preemptions}")
        return ", ".join(parts) or "no faults"


NO_FAULTS = FaultPlan()
