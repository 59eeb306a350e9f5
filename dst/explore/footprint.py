"""What one step actually did: which processes' code ran, and whether it read the clock.

A label says what an option starts with (a store write, a delivery, a timer);
the code it then runs, until every task is blocked again, is known only by
running it.  The explorer watches each step as it runs and keeps its
*footprint*, so that independence can rest on what happened rather than on
what might:

* ``procs``: the processes whose tasks took a step (trio's
  ``before_task_step``), each task tied to its process's incarnation by the
  context variable the kernel sets.  Code of a process runs in its memory
  only; two steps that ran code of one process are dependent.
* ``clock``: code inside a task read virtual time (``trio.current_time``,
  ``env.clock.now()``, a ``sleep`` or ``move_on_after`` computing its
  deadline).  A step that never read the clock does the same whenever it runs,
  so it commutes with a timer that wakes another process.
* ``foreign``: a task that belongs to no process ran (a kernel task), or the
  step made a data choice or was decided while a task still ran: the step is
  not one atomic transition, and it is dependent with everything.

The clock is watched by replacing ``current_time`` on the run's clock object
for the length of the search; reads outside a task (trio's own loop, the
kernel) are not the code under test observing time and are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import trio
import trio.lowlevel as ll

from ..sim.process import _CURRENT


@dataclass(frozen=True, slots=True)
class Footprint:
    """What one step did (see the module docstring)."""

    procs: frozenset[str] = frozenset()
    clock: bool = False
    foreign: bool = False


#: The footprint of a step that is dependent with everything.
FOREIGN = Footprint(foreign=True)


class StepWatch(trio.abc.Instrument):
    """Collects the footprint of each step of one run; installed inside the run."""

    def __init__(self) -> None:
        self.current: ll.Task | None = None
        self._procs: set[str] = set()
        self._clock = False
        self._foreign = False

    def before_task_step(self, task: ll.Task) -> None:
        self.current = task
        inc = task.context.get(_CURRENT)
        if inc is None:
            self._foreign = True
        else:
            self._procs.add(inc.process.name)

    def after_task_step(self, task: ll.Task) -> None:
        self.current = None

    def taint(self) -> None:
        """The step is not atomic (a data choice, a decision taken while a task ran)."""
        self._foreign = True

    def take(self) -> Footprint:
        """The footprint since the last ``take``, and start the next."""
        fp = (FOREIGN if self._foreign
              else Footprint(frozenset(self._procs), self._clock) if self._procs or self._clock
              else _EMPTY)
        self._procs = set()
        self._clock = self._foreign = False
        return fp


_EMPTY = Footprint()


class ClockTap:
    """Reports reads of a clock's time to the watch of the run in progress.

    ``install`` replaces ``current_time`` on the clock object itself (trio
    looks it up on every call); ``remove`` puts the class's method back.
    """

    def __init__(self) -> None:
        self.watch: StepWatch | None = None
        self._clock: Any = None

    def install(self, clock: Any) -> None:
        if self._clock is clock:
            return
        self.remove()
        self._clock = clock
        tap = self

        def current_time() -> float:
            watch = tap.watch
            if watch is not None and watch.current is not None:
                watch._clock = True
            return float(clock.now)

        clock.current_time = current_time

    def remove(self) -> None:
        clock, self._clock = self._clock, None
        if clock is not None and "current_time" in vars(clock):
            del clock.current_time
