"""Virtual time, and the hook that tells the scheduler the system is quiescent.

trio calls ``Clock.deadline_to_sleep_time`` exactly when its run queue is empty,
i.e. when every task is blocked: parked at a dst choice point, waiting on a trio
primitive (``Lock``, ``Event``, a memory channel, a sleep), or finished.  That is
the definition of quiescence, and it is sound where counting only the tasks
parked at choice points is not (a task blocked on a ``trio.Lock`` held by a
parked task is not runnable either).  At that moment the clock hands control
to the scheduler, which reschedules exactly one thing (a task, a message, a
timer, a fault) and returns 0 so trio runs it at once.

Why not ``trio.testing.MockClock(rate=0)``: its ``current_time`` reads the real
``perf_counter`` on every call, it cannot be reset between seeds that share one
``trio.run`` (so the floating-point times of seed 7 would depend on the seeds
before it), and it has no hook for quiescence; driving it from a task with
``wait_all_tasks_blocked`` costs an extra trip through trio's loop per choice.
This clock keeps time as an exact float that the scheduler sets, and jumps
straight to a deadline, so a 30-day wait costs one loop pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from trio.abc import Clock

#: What to tell trio when nothing is scheduled and no deadline is pending.  Only
#: reached outside a simulated step (the hook always schedules something or
#: stops the run), so it is a guard against a real sleep, not a tuning knob.
_NOTHING_TO_DO = 0.0


class VirtualClock(Clock):
    """A trio clock whose time moves only when the scheduler says so."""

    def __init__(self) -> None:
        self.now = 0.0
        #: Called with trio's next deadline when every task is blocked; returns
        #: the time trio may sleep (0 after scheduling something).
        self.on_quiescence: Callable[[float], float] | None = None

    def start_clock(self) -> None:
        pass

    def current_time(self) -> float:
        return self.now

    def deadline_to_sleep_time(self, deadline: float) -> float:
        hook = self.on_quiescence
        if hook is not None:
            return hook(deadline)
        if math.isinf(deadline):
            return _NOTHING_TO_DO
        if deadline > self.now:
            self.now = deadline
        return 0.0

    def reset(self) -> None:
        """Start a new seed at time 0 (only valid when no deadline is pending)."""
        self.now = 0.0
