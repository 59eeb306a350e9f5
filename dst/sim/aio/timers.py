"""The timers of a simulated loop, on virtual time.

``loop.time()`` is the run's virtual time.  The loop's next timer is one of
the kernel's sleepers (``Scheduler._sleepers``, ``_arm``), offered as
``timer@T`` exactly as a trio deadline is; performing it wakes the driver,
which moves the timers due to its ready queue (``_due``), or, when the
driver was held, runs them first (``timers_due``).
"""

from __future__ import annotations

import heapq
import math
from asyncio import events
from collections.abc import Callable
from typing import Any

import trio

from .. import trio_internals
from .state import LoopState


class Timers(LoopState):
    """The loop's clock and its timers (see the module docstring)."""

    def time(self) -> float:
        return trio.current_time()

    def call_at(self, when: float, callback: Callable[..., object], *args: Any,  # type: ignore[override]
                context: Any = None) -> Any:
        timer: Any = events.TimerHandle(when, callback, args, self, context)
        if self._dead:
            timer.cancel()
            return timer
        heapq.heappush(self._scheduled, timer)
        timer._scheduled = True
        if self._idle and trio_internals.is_blocked(self._driver):
            self._arm()  # a timer set from outside the loop's callbacks
        elif self._inline is not None:
            self._handoff()  # the driver waits for it again once the call is handed over
        return timer

    def _due(self) -> None:
        """Move the timers due now to the ready queue, as asyncio's ``_run_once`` does."""
        scheduled = self._scheduled
        if self._timer_cancelled_count > 100 and self._timer_cancelled_count * 2 > len(scheduled):
            kept = [h for h in scheduled if not h._cancelled]
            for h in scheduled:
                if h._cancelled:
                    h._scheduled = False
            heapq.heapify(kept)
            self._scheduled = scheduled = kept
            self._timer_cancelled_count = 0
        now = trio.current_time()
        while scheduled:
            handle = scheduled[0]
            if handle._cancelled:
                heapq.heappop(scheduled)
                handle._scheduled = False
                self._timer_cancelled_count -= 1
                continue
            if handle._when > now:
                break
            heapq.heappop(scheduled)
            handle._scheduled = False
            self._ready.append(handle)

    def _next_timer(self) -> float | None:
        scheduled = self._scheduled
        while scheduled and scheduled[0]._cancelled:
            handle = heapq.heappop(scheduled)
            handle._scheduled = False
            self._timer_cancelled_count -= 1
        return scheduled[0]._when if scheduled else None

    def _arm(self) -> None:
        """Tell the kernel when the loop's next timer is due (a sleeper of its own)."""
        sim = self._sim
        sleepers = sim._sleepers
        when = self._next_timer()
        if when is None or not math.isfinite(when):
            if sleepers:
                sleepers.pop(self._driver, None)
            return
        if sleepers is None:
            sleepers = sim._sleepers = {}
        sleepers[self._driver] = when

    def timers_due(self) -> None:
        """The kernel fired the loop's timer while its driver was held (``_wake_sleepers``):
        the callbacks due go first, as a trio task woken by its deadline would."""
        scheduled = self._scheduled
        now = trio.current_time()
        while scheduled and (scheduled[0]._cancelled or scheduled[0]._when <= now):
            handle = heapq.heappop(scheduled)
            handle._scheduled = False
            if handle._cancelled:
                self._timer_cancelled_count -= 1
                continue
            self._ready.append(handle)
            self._urgent.append(handle)
        if self._urgent:
            self._wakeup()
