"""How a run ends: at rest (done, or a ``Deadlock``), or when ``eventually`` holds.

``eventually`` properties start their clock when the faults stop: every budget
spent or none left that anything in the run could spend, the plan's
``faults_until`` or ``calm_by``, or the system at rest, whichever comes first.
The kernel's own deadline task then wakes at each property's deadline.  Those
deadlines are *passive* kernel watches (``SimState._watches``): woken only when
nothing else can happen before them or at their instant, so a watch never cuts
the system's work short, and a system at rest but for them is at rest.  At
rest, tasks still blocked on trio primitives are a ``Deadlock`` unless they wait
on the world (parked in a mailbox, ``recv``) or their process was declared idle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio
import trio.lowlevel as ll

from . import trio_internals
from .blocked import describe_wait, in_lock_cycle, task_name
from .findings import wrong_answer
from .process import EXITED, RUNNING, Incarnation
from .state import SimState

if TYPE_CHECKING:
    pass


class Liveness(SimState):
    """The part of :class:`~dst.sim.kernel.Sim` that decides how a run ends."""

    #: The kernel task waiting for the time the faults stop at the latest, if any.
    _calm_watcher: ll.Task | None = None

    def _faults_left(self) -> bool:
        """Whether a fault may still come: not stopped yet, and a budget left that
        something in the run could still spend."""
        if not self.faults_allowed():
            return False
        if not (self.crashes_left > 0 or self.drops_left > 0 or self.dups_left > 0
                or self.slow_left > 0 or self._more_faults):
            return False
        return self._fault_possible()

    def _fault_possible(self) -> bool:
        """Whether a budget left could ever be spent in this run.

        Decided only from what cannot come back: a process that exited (a
        crashed one may restart), a service no one registered, a budget only
        for links whose own budgets are spent.  What the code under test will do
        next cannot be known; a budget it merely never gets round to spending
        is stopped by the plan's ``calm_by``.
        """
        plan = self.faults
        alive = [p for p in self.processes.values() if p.state != EXITED]
        if self.crashes_left > 0:
            only = plan.crash_only
            for p in alive:
                if p.crashable and (not only or p.name in only) and (
                        self._process_crashes.get(p.name, 1) > 0):
                    return True
        if alive or self.net.in_flight:
            if self.drops_left > 0 and (not plan.links_only or any(
                    n > 0 for n in self._link_drops.values())):
                return True
            if self.dups_left > 0 and (not plan.links_only or any(
                    n > 0 for n in self._link_dups.values())):
                return True
        if not alive:
            return False
        if self.slow_left > 0:
            return True  # a timer may fire early while anything lives
        if self.partitions_left > 0 and (not plan.partition_of or any(
                p.name in plan.partition_of for p in alive)):
            return True
        sockets = self._sockets
        if (sockets.faults_left() if sockets is not None
                else plan.max_resets or plan.max_segment_delays):
            return True  # a process may open a connection and send at any time
        return any(name in self.services and any(n > 0 for n in budgets.values())
                   for name, budgets in self._service_faults.items())

    def _note_calm(self) -> None:
        """Start the clock of every ``eventually`` property once the faults have stopped.

        Until they have, a watch waits for the time they stop at the latest: the
        plan's ``faults_until`` or ``calm_by``, whichever is sooner (a run at
        rest before then is calm at once: ``_end_quiescent``).
        """
        if self._faults_left():
            if self._calm_timer_set or self._nursery is None:
                return
            self._calm_timer_set = True
            end = self._faults_end
            if end is None or self.faults.calm_by < end:
                end = self._faults_end = self.faults.calm_by
            self._nursery.start_soon(self._calm_later, end, name="dst-calm")
            return
        self.calm_at = now = self.now
        end = self._faults_end
        if end is None or now < end:
            self._faults_end = now  # no new fault from now on
        if self._calm_watcher is not None:
            # Its watch is moot: it would only hold the system's timers back until then.
            # Left parked, it ends with the run.
            self._watches.pop(self._calm_watcher, None)
        self._pending = list(self._eventually)
        assert self._nursery is not None
        self._deadline_task = trio.CancelScope()
        self._nursery.start_soon(self._liveness_deadline, name="dst-deadline")

    async def _calm_later(self, until: float) -> None:
        if self.calm_at is not None:
            return  # calm before this task first ran
        self._calm_watcher = ll.current_task()
        await self._watch_until(until)
        if self.calm_at is None:
            self._note_calm()

    async def _liveness_deadline(self) -> None:
        """Wake at each pending property's deadline; one not met by then is violated."""
        assert self._deadline_task is not None
        with self._deadline_task:
            await self._watch_deadlines()

    async def _watch_deadlines(self) -> None:
        while self._pending and not self._stopping:
            calm = self.calm_at
            assert calm is not None
            due = min(calm + within for _, _, within in self._pending)
            # A passive watch: woken once nothing else can happen before ``due`` or at
            # it, so that what the system does at that very instant (a timer of its own
            # due then, and what that wakes) counts.
            await self._watch_until(due)
            if self._stopping:
                return
            if self._check_eventually():
                return
            for name, _, within in self._pending:
                if calm + within <= self.now:
                    self._violate(name, f"{name} did not hold within {within:g}s after the "
                                        f"faults stopped (at {calm:.3f}; waited until "
                                        f"{self.now:.3f}){self._said_by(name)}")
                    return

    def _check_eventually(self) -> bool:
        """Drop the pending properties that hold now.

        When none is left, a scenario without end-of-run checks ends the run
        here (``held``): a system that never rests need not run to its step
        bound.  Otherwise the run goes on to rest, where those checks run.
        What a check says when it does not hold is kept for its violation.
        """
        still = []
        said = self._said
        for pending in self._pending:
            result = pending[1]()
            if result is not True:
                still.append(pending)
                if isinstance(result, str):
                    said[pending[0]] = result
                elif result is False:
                    said.pop(pending[0], None)
                else:
                    raise wrong_answer("eventually property", pending[0], pending[1],
                                       result, self._seed)
        self._pending = still
        if not still:
            if not self._end_checks:
                self._stop("held")
                return True
            if self._deadline_task is not None:
                trio_internals.cancel(self._deadline_task)
        return False

    def _said_by(self, name: str) -> str:
        """``": <message>"``: what the check of ``name`` said last, if it said anything."""
        said = self._said.get(name)
        return f": {said}" if said else ""

    def _end_quiescent(self) -> None:
        """Nothing is enabled: the run ends, unless tasks are stuck for ever.

        A task still blocked now waits on something nothing left can do: a
        ``Deadlock``, unless it waits for a message (parked in a mailbox by
        ``env.net.recv``, however deep in its frames: the world may still
        write), or its process has a task waiting for one (the next message may
        wake the rest), or its process was declared ``idle``.  Tasks that wait
        for each other's locks in a cycle are a ``Deadlock`` always.
        """
        loops = self._loops
        if loops and any(loop.report_unretrieved() for loop in list(loops.values())):
            return  # a failed asyncio task nobody awaited: found first, the likelier cause
        stuck: list[str] = []
        mail = self._waiting_for_mail()
        blocked = self._blocked_tasks(mail)
        # A process with a task waiting in recv is a server: the next message may
        # wake any of its tasks (a dispatcher sets an event), so only a lock cycle
        # there is certainly stuck.
        listening = {inc for task, inc in blocked if task in mail}
        for task, inc in blocked:
            if task in mail:
                continue  # it waits in recv, on the world: never on a lock, so in no cycle
            if inc.process.idle or inc in listening:
                if not in_lock_cycle(task):
                    continue
            loops = self._loops
            if loops and task in loops:  # an asyncio process: its blocked asyncio tasks
                stuck.extend(loops[task].stuck())
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
                                f"the faults stopped (within {within:g}s){self._said_by(name)}")
            return
        if self._stopping:
            return
        self._stop("quiescent")

    def _waiting_for_mail(self) -> set[ll.Task]:
        """The tasks parked in a mailbox (``env.net.recv``): waiting on the world.

        Asked of the mailboxes, not of the tasks' frames: a task waits there
        however it got there (an async generator that yields what ``recv``
        returns hides its frames from a walk down the task's coroutines).
        """
        out: set[ll.Task] = set()
        for proc in self.processes.values():
            lot = proc.live._mail_lot  # made on the first receive: none yet, nobody waits
            if lot:
                out.update(lot)
        if self._sockets is not None:
            out.update(self._sockets.idle)  # a recv or an accept waits on the world too
        return out

    def _blocked_tasks(self, mail: set[ll.Task]) -> list[tuple[ll.Task, Incarnation]]:
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
                if any(n.child_tasks for n in task.child_nurseries) and task not in mail:
                    continue
                out.append((task, inc))
        return out
