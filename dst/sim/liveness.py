"""How a run ends: at rest (done, or a ``Deadlock``), or when ``eventually`` holds.

``eventually`` properties start their clock when the faults stop (every budget
spent, or the plan's ``faults_until``); the kernel's own deadline task then
wakes at each property's deadline.  Those deadlines are *passive*: offered only
when nothing else can happen, so a watch never cuts the system's work short.
At rest, tasks still blocked on trio primitives are a ``Deadlock`` unless they
wait on the world (``recv``) or their process was declared idle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio
import trio.lowlevel as ll

from . import trio_internals
from .blocked import describe_wait, in_lock_cycle, task_name, waits_in
from .env import SimTransport
from .process import RUNNING, Incarnation
from .state import SimState

if TYPE_CHECKING:
    pass


class Liveness(SimState):
    """The part of :class:`~dst.sim.kernel.Sim` that decides how a run ends."""

    def _faults_left(self) -> bool:
        if not self.faults_allowed():
            return False
        return bool(self.crashes_left > 0 or self.drops_left > 0 or self.dups_left > 0
                    or self._more_faults)

    def _note_calm(self) -> None:
        """Faults have stopped: start the clock of every ``eventually`` property."""
        if self._faults_left():
            until = self.faults.faults_until
            if until is None or self._nursery is None or self._calm_timer_set:
                return
            # Faults stop at ``until`` at the latest: wake then to start the clock.
            self._calm_timer_set = True
            self._nursery.start_soon(self._calm_later, until, name="dst-calm")
            return
        self.calm_at = self.now
        self._pending = list(self._eventually)
        longest = max(within for _, _, within in self._eventually)
        assert self._nursery is not None
        self._deadline_task = trio.CancelScope()
        self._nursery.start_soon(self._liveness_deadline, self.calm_at + longest,
                                 name="dst-deadline")

    async def _calm_later(self, until: float) -> None:
        self._passive.add(until)
        await trio.sleep_until(until)
        if self.calm_at is None:
            self._note_calm()

    async def _liveness_deadline(self, last: float) -> None:
        """Wake at each pending property's deadline; one not met by then is violated."""
        assert self._deadline_task is not None
        with self._deadline_task:
            await self._watch_deadlines()

    async def _watch_deadlines(self) -> None:
        while self._pending and not self._stopping:
            calm = self.calm_at
            assert calm is not None
            due = min(calm + within for _, _, within in self._pending)
            if due > self.now:
                self._passive.add(due)
                await trio.sleep_until(due)
            if self._stopping:
                return
            if self._check_eventually():
                return
            for name, _, within in self._pending:
                if calm + within <= self.now:
                    self._violate(name, f"{name} did not hold within {within:g}s after the "
                                        f"faults stopped (at {calm:.3f}; waited until "
                                        f"{self.now:.3f})")
                    return

    def _check_eventually(self) -> bool:
        """Drop the pending properties that hold now.

        When none is left, a scenario without end-of-run checks ends the run
        here (``held``): a system that never rests need not run to its step
        bound.  Otherwise the run goes on to rest, where those checks run.
        """
        still = [(n, c, w) for n, c, w in self._pending if c() is not True]
        self._pending = still
        if not still:
            if not self._end_checks:
                self._stop("held")
                return True
            if self._deadline_task is not None:
                trio_internals.cancel(self._deadline_task)
        return False

    def _end_quiescent(self) -> None:
        """Nothing is enabled: the run ends, unless tasks are stuck for ever.

        A task still blocked now waits on something nothing left can do: a
        ``Deadlock``, unless it waits for a message (``env.net.recv``: the world
        may still write), or its process has a task waiting for one (the next
        message may wake the rest), or its process was declared ``idle``.  Tasks
        that wait for each other's locks in a cycle are a ``Deadlock`` always.
        """
        stuck: list[str] = []
        blocked = self._blocked_tasks()
        # A process with a task waiting in recv is a server: the next message may
        # wake any of its tasks (a dispatcher sets an event), so only a lock cycle
        # there is certainly stuck.
        mail = {task: _waits_for_mail(task, inc) for task, inc in blocked}
        listening = {inc for task, inc in blocked if mail[task]}
        for task, inc in blocked:
            if mail[task]:
                continue  # it waits in recv, on the world: never on a lock, so in no cycle
            if inc.process.idle or inc in listening:
                if not in_lock_cycle(task):
                    continue
            label = self._task_labels.get(task) or f"{inc.name}/{task_name(task)}"
            stuck.append(f"{label} waits in {describe_wait(task)}")
        if stuck:
            self._violate(
                "Deadlock",
                "nothing left can wake " + "; ".join(sorted(stuck)),
            )
            return
        if self._eventually and self.calm_at is None:
            # Nothing is left to happen, faults included: they have stopped.
            self.calm_at = self.now
            self._pending = list(self._eventually)
        if self._pending and not self._check_eventually():
            name, _, within = self._pending[0]
            self._violate(name, f"{name} did not hold, and the system came to rest at "
                                f"{self.now:.3f}, {self.now - (self.calm_at or 0.0):g}s after "
                                f"the faults stopped (within {within:g}s)")
            return
        if self._stopping:
            return
        self._stop("quiescent")

    def _blocked_tasks(self) -> list[tuple[ll.Task, Incarnation]]:
        """Leaf tasks of live incarnations (not waiting for their own children)."""
        out: list[tuple[ll.Task, Incarnation]] = []
        for proc in self.processes.values():
            inc = proc.live
            if inc.state is not RUNNING:
                continue
            for task in inc.tasks:
                if not trio_internals.is_blocked(task):
                    continue
                # A task with live children usually waits for them (a nursery's
                # end), which is not a wait of its own; but the body of a nursery
                # may itself wait in recv, and then the process is listening.
                if any(n.child_tasks for n in task.child_nurseries) and not _waits_for_mail(
                        task, inc):
                    continue
                out.append((task, inc))
        return out



def _waits_for_mail(task: ll.Task, inc: Incarnation) -> bool:
    """Blocked in ``env.net.recv()``: waiting on the world, which is idle, not stuck."""
    lot = inc._mail_lot  # made on the first receive: none yet, nobody waits
    return bool(lot) and waits_in(task, _RECV)  # a lot is true while a task is parked in it


#: What a task waiting for mail waits in.
_RECV = SimTransport.recv.__code__
