"""Runs that never come to rest, and tasks of dead incarnations: trio's loop hooks.

Quiescence is where the scheduler usually decides; code that keeps trio's run
queue busy (polling a flag with ``trio.sleep(0)``) never gets there.  Passes of
trio's loop are counted between decisions; past ``BUSY_PASSES`` a step watcher
sees which tasks keep running and lets the scheduler decide between two of
their steps, or reports a ``Livelock`` when nothing else could happen.  The
same file holds the watch that interrupts tasks of a crashed incarnation
whenever they block.  Both watches are trio instruments installed only while
they are needed, so the common path pays one hook call per loop pass.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import trio.lowlevel as ll
from trio.abc import Instrument

from ..errors import ProcessCrashed
from . import trio_internals
from .blocked import task_name
from .options import INF
from .state import SimState

if TYPE_CHECKING:
    pass

#: Passes of trio's run loop between two decisions before the scheduler steps in.
#: Code that keeps trio's run queue busy (``while not flag: await trio.sleep(0)``)
#: never lets the system come to rest, so quiescence never comes; past this
#: many passes the scheduler decides anyway (another task, a message, a timer, a
#: fault may go next), and when nothing else could go the run is a ``Livelock``.
#: Far above what any shipped scenario does between two choice points.
BUSY_PASSES = 1000

#: Task steps watched, once a run is busy, to see which tasks keep running.
_WATCHED_STEPS = 64


class BusyWatch(SimState):
    """The part of :class:`~dst.sim.kernel.Sim` that trio's loop calls between steps."""

    def loop_pass(self, batch: object = None) -> None:
        """One pass of trio's loop: count the passes since the last decision.

        Counting passes, not task steps, keeps the common path to one call per
        decision.  Past BUSY_PASSES a step watcher is installed to see which
        tasks keep running and to step in between two of their steps.
        """
        self._busy += 1
        if self._busy >= BUSY_PASSES and self._watch is None:
            self._watch = _StepWatch(self)
            self._watched = 0
            ll.add_instrument(self._watch)

    def watched_step(self, task: ll.Task) -> None:
        """A task step while the run is busy (see loop_pass)."""
        self._watched += 1
        spins = self._spin_counts
        spins[task] = spins.get(task, 0) + 1
        self._spinning.add(self._task_labels.get(task) or task_name(task))
        if self._watched < _WATCHED_STEPS:
            return
        try:
            self._busy_decision(task)
        except BaseException as exc:  # never into trio's loop: see on_quiescence
            self.error = exc
            self._stop("error")

    def _unwatch(self) -> None:
        if self._watch is not None:
            ll.remove_instrument(self._watch)
            self._watch = None
        self._busy = 0
        self._spinning.clear()
        self._spin_counts.clear()

    def doomed_step(self, task: ll.Task) -> None:
        """After a step of any task while some are doomed: interrupt one that blocked."""
        doomed = self._doomed
        if task in doomed and trio_internals.is_blocked(task):
            trio_internals.interrupt(task, ProcessCrashed("its process has crashed"))
        if not doomed and self._doom_watch is not None:
            ll.remove_instrument(self._doom_watch)
            self._doom_watch = None

    def _doom(self, task: ll.Task) -> None:
        self._doomed.add(task)
        if self._doom_watch is None:
            self._doom_watch = _DoomWatch(self)
            ll.add_instrument(self._doom_watch)

    def _busy_decision(self, task: ll.Task) -> None:
        """trio's run queue has not emptied for BUSY_STEPS task steps.

        Some code keeps trio busy without coming to rest (polling a flag with
        ``trio.sleep(0)``).  If anything else could happen (a parked call, a
        message, a timer, a fault), the strategy decides now, as at quiescence;
        otherwise nothing dst can do will ever change what the spinning tasks
        see, and that is the built-in violation ``Livelock``.
        """
        if self._stopping:
            # Still spinning after the run stopped: a loop in a shielded scope.
            # End the task that keeps stepping (never one waiting for its
            # children: trio cannot take an exception there).
            inc = self._incarnation_of.get(task)
            if (self._spin_counts.get(task, 0) >= 8 and inc is not None
                    and not any(n.child_tasks for n in task.child_nurseries)):
                from .kernel import RunStopped  # a cycle at import time: kernel mixes this in

                trio_internals.throw_on_next_step(task, RunStopped("the run has stopped"))
                self._spin_counts.pop(task)
            return
        clock = self._clock
        assert clock is not None
        if (self._invariants or self._pending) and self._check_invariants():
            return
        if self.step >= self.max_steps:
            self._stop("bound")
            return
        ahead = ll.current_statistics().seconds_to_next_deadline
        # trio's next deadline, or a task asleep in ``env.clock.sleep`` (the kernel's).
        deadline = self._soonest(clock.now + ahead if not math.isinf(ahead) else INF)
        options = self._options(deadline)
        if not options and self._watches and min(self._watches.values()) <= clock.now:
            self._wake_watches(clock.now)  # a kernel watch due now: nothing else can happen
            return
        if options:
            labels = [o[0] for o in options]
            weights = [o[1] for o in options] if any(o[1] != 1.0 for o in options) else None
            index = self._decide(labels, weights)  # resets the busy count
            if index >= 0:
                self._perform(options[index], clock)
            return
        spinning = ", ".join(sorted(self._spinning))
        self._violate(
            "Livelock",
            f"{spinning} kept running for {BUSY_PASSES} passes of trio's loop without the "
            "system coming to rest, and nothing else could happen",
        )



class _StepWatch(Instrument):
    """Installed only while a run is busy: sees each task step (see loop_pass)."""

    def __init__(self, sim: BusyWatch) -> None:
        self.before_task_step = sim.watched_step  # type: ignore[method-assign]

    def __dir__(self) -> list[str]:
        return ["before_task_step"]  # the one hook, for trio's add_instrument (see HoldWatch)


class _DoomWatch(Instrument):
    """Installed only while tasks of a dead incarnation live: catches them blocking."""

    def __init__(self, sim: BusyWatch) -> None:
        self.after_task_step = sim.doomed_step  # type: ignore[method-assign]

    def __dir__(self) -> list[str]:
        return ["after_task_step"]  # the one hook, for trio's add_instrument (see HoldWatch)
