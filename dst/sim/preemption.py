"""Preemption at trio checkpoints: a task made runnable is held until chosen.

While a run has preemptions left, an instrument sees every task trio makes
runnable during a step of the code under test (a ``trio.sleep(0)``, a lock
handed over, an event set, a new task) and takes it out of trio's run queue.
When nothing else runs, the scheduler chooses among the held tasks and every
other option (parked calls, messages, timers, faults); choosing anything but
the held task trio queued first spends one preemption.  Once none is left, the held
tasks go back to trio's queue and trio runs as usual.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio.lowlevel as ll
from trio.abc import Instrument

from . import trio_internals
from .clock import VirtualClock
from .options import HELD, INF, Option, by_label
from .process import RUNNING
from .state import SimState
from .trio_internals import RUN_CONTEXT as _RUN_CONTEXT

if TYPE_CHECKING:
    from .aio import SimLoop


class Preemption(SimState):
    """The part of :class:`~dst.sim.kernel.Sim` that holds and releases tasks."""

    def task_scheduled(self, task: ll.Task) -> None:
        """trio made ``task`` runnable while some task stepped: hold it at a choice point.

        Only wake-ups caused by the code under test are held (a checkpoint, an
        event set, a lock handed over, a new task); those the kernel causes by
        performing a decision, and those trio's loop causes (timers, I/O), are
        the decision itself.
        """
        if self._releasing or self._stopping:
            return
        inc = self._incarnation_of.get(task)  # its owner, whatever context it runs in
        if inc is None or inc.state is not RUNNING:
            return
        if getattr(_RUN_CONTEXT, "task", None) is None:
            return  # trio's loop itself (a timer expired): not inside a step
        if not trio_internals.hold(task):
            return
        self._held[task] = self._task_labels.get(task) or self._label_task(task, inc)

    def _schedule_held(self, deadline: float, clock: VirtualClock) -> float:
        """Some tasks are held at checkpoints: choose what runs next.

        Running the held tasks in the order trio queued them is the ordinary
        choice: the first one queued has weight 1.0.  Anything else (another
        held task, a parked call, a message, the timer, a fault) preempts it,
        at ``preempt_weight`` times its usual weight, and spends one
        preemption.  So a run that spends no preemption runs exactly what
        trio would have run, and the budget bounds every departure from it.
        """
        if self.step >= self.max_steps:
            self._stop("bound")
            return 0.0
        ordinary: Any = next(iter(self._held))  # insertion order: trio's queue order
        loops = self._loops
        if not (loops or self._parked or self.net.in_flight or deadline != INF
                or self.crashes_left > 0 or self.crashed or self.partitions_left > 0
                or self._watches):
            return self._choose_held(ordinary, clock)
        held = sorted(self._held.items(), key=by_label)
        if loops:
            options, ordinary = self._with_loops(held, loops, ordinary)
        else:
            options = [(f"{label}@run", 1.0, HELD, task) for task, label in held]
        options.extend(self._options(deadline))  # a kernel watch waits while tasks can run
        if len(options) == 1:
            self._perform(options[0], clock)  # nothing else could go: not a choice
            return 0.0
        pw = self.faults.preempt_weight
        weights = [1.0 if o[3] is ordinary else o[1] * pw for o in options]
        index = self._decide([o[0] for o in options], weights)
        if index < 0:
            return 0.0
        chosen = options[index]
        self._perform(chosen, clock)
        if chosen[3] is not ordinary:
            self.preemptions_left -= 1
            if self.preemptions_left <= 0:
                self._end_preemption()
        return 0.0

    def _choose_held(self, ordinary: ll.Task, clock: VirtualClock) -> float:
        """``_schedule_held`` when held tasks are all that is enabled (``_options`` would
        list nothing): the same labels, weights, decision and release, without the
        option tuples, ``_options`` and ``_perform``."""
        held = self._held
        if len(held) == 1:
            # Nothing else could go: not a choice (``_perform`` of the one option).
            releasing, self._releasing = self._releasing, True
            try:
                del held[ordinary]
                trio_internals.release(ordinary)
            finally:
                self._releasing = releasing
            if self.calm_at is None and self._eventually:
                self._note_calm()
            return 0.0
        pw = self.faults.preempt_weight
        if len(held) == 2:  # by label, as ``sorted`` would order two (stable on a tie)
            first, second = held.items()
            items = [second, first] if second[1] < first[1] else [first, second]
            labels = [f"{items[0][1]}@run", f"{items[1][1]}@run"]
            weights = [1.0 if items[0][0] is ordinary else pw,
                       1.0 if items[1][0] is ordinary else pw]
        else:
            items = sorted(held.items(), key=by_label)
            labels = [f"{label}@run" for _, label in items]
            weights = [1.0 if task is ordinary else pw for task, _ in items]
        index = self._decide(labels, weights)
        if index < 0:  # the replay diverged
            return 0.0
        chosen = items[index][0]
        releasing, self._releasing = self._releasing, True
        try:
            del held[chosen]
            trio_internals.release(chosen)
        finally:
            self._releasing = releasing
        if self.calm_at is None and self._eventually:
            self._note_calm()
        if chosen is not ordinary:
            self.preemptions_left -= 1
            if self.preemptions_left <= 0:
                self._end_preemption()
        return 0.0

    def _with_loops(self, held: list[tuple[ll.Task, str]], loops: dict[ll.Task, SimLoop],
                    first: ll.Task) -> tuple[list[Option], Any]:
        """The held options when asyncio processes run (``dst.sim.aio``), and the
        ordinary one's target: a held loop driver stands for every callback ready
        in its loop, each an option (``P/task@run``), its queue's head the one
        asyncio runs next."""
        options: list[Option] = []
        ordinary: Any = first
        for task, label in held:
            loop = loops.get(task)
            head = None if loop is None else loop.ready_options(options)
            if head is None:
                options.append((f"{label}@run", 1.0, HELD, task))
            elif task is first:
                ordinary = head
        return options, ordinary

    def _end_preemption(self) -> None:
        """No preemption left (or the run stops): trio runs its queue as usual again."""
        if self._hold_watch is not None:
            ll.remove_instrument(self._hold_watch)
            self._hold_watch = None
        if self._held:
            for task, _ in sorted(self._held.items(), key=by_label):
                trio_internals.release(task)
            self._held.clear()



class HoldWatch(Instrument):
    """Installed while preemptions are left: sees every task trio makes runnable."""

    def __init__(self, sim: Preemption) -> None:
        self.task_scheduled = sim.task_scheduled  # type: ignore[method-assign]

    def __dir__(self) -> list[str]:
        # trio's add_instrument looks for hooks among dir(instrument): naming the
        # one hook spares it testing every method of Instrument, once per run.
        return ["task_scheduled"]
