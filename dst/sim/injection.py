"""Fault injection: which faults the plan lets the scheduler offer now.

The scheduler lists its options here: parked calls (and, for a service call,
the faults its service may suffer), messages in flight, the next timer, crashes
and restarts, partitions.  Budgets (global, per process, per link, per service)
and filters (``crash_only``, ``crash_at``, ``links_only``, ``faults_until``)
are applied while listing, so a spent budget is simply an option not offered.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import trio
import trio.lowlevel as ll

from . import trio_internals
from .faults import SERVICE_FAULTS
from .options import CALL_FAULT, CRASH, PARTITION, RESTART, SLOW, TASK, TIMER, WATCH, by_label
from .process import CRASHED, RUNNING, Process
from .state import SimState

if TYPE_CHECKING:
    pass


class FaultInjection(SimState):
    """The part of :class:`~dst.sim.kernel.Sim` that lists options and spends budgets."""

    #: The timer option's label for the deadline it was last built for: a pending
    #: timer is offered at every decision until it fires.
    _timer_label: tuple[float, str] | None = None

    def _recount_faults(self) -> None:
        """Whether a partition or a service fault may still be offered (the lean path's test)."""
        sockets = self._sockets
        self._more_faults = bool(self.partitions_left or any(
            any(budgets.values()) for budgets in self._service_faults.values())) or (
            sockets.faults_left() if sockets is not None
            else bool(self.faults.max_resets or self.faults.max_segment_delays))

    def faults_allowed(self) -> bool:
        """False once the faults have stopped: past the plan's ``faults_until`` or, in a
        run with ``eventually`` properties, once they stopped (``Liveness._note_calm``)."""
        until = self._faults_end
        return until is None or self.now < until

    def _options(self, deadline: float) -> list[tuple[str, float, int, Any]]:
        options: list[tuple[str, float, int, Any]] = []
        parked = self._parked
        plan = self.faults
        until = self._faults_end
        faulty = until is None or self.now < until  # faults_allowed(), inlined
        if parked:
            items = list(parked.items()) if len(parked) == 1 else sorted(
                parked.items(), key=by_label)
            calling = self._calling if (self._service_faults and faulty) else None
            sockets = self._sockets
            sending = sockets.sending if (
                sockets is not None and faulty and sockets.faults_left()) else None
            for task, label in items:
                options.append((label, 1.0, TASK, task))
                if calling and task in calling:
                    self._add_call_faults(options, task, label, calling[task])
                if sending and task in sending:
                    sockets.add_faults(options, task, label)  # type: ignore[union-attr]
        if self.net.in_flight:
            self.net.add_options(options, faulty)
        timer_at = -1
        if not math.isinf(deadline):
            # Every option listed so far is work that can go now (a parked call or a
            # message, with its fault variants), and so is a held task.  The timer
            # goes beside it only as a "slow" fault (``FaultPlan.max_slow``).
            timer = self._timer_label
            if timer is None or timer[0] != deadline:
                timer = self._timer_label = (deadline, f"timer@{deadline:.3f}")
            if self._slow_timers:  # unbudgeted: as every plan before ``max_slow``
                timer_at = len(options)
                options.append((timer[1], plan.timer_weight if options else 1.0, TIMER,
                                deadline))
            elif not options and not self._held:
                timer_at = len(options)
                options.append((timer[1], 1.0, TIMER, deadline))
            elif self.slow_left > 0 and faulty:
                timer_at = len(options)
                options.append((timer[1] + "!slow", plan.slow_weight, SLOW, deadline))
        if self.crashes_left > 0 or self.crashed:
            may_crash = faulty and self.crashes_left > 0
            # Without crash_only, crash_at or per-process budgets, crashable is the test.
            plain = not (plan.crash_only or plan.crash_at or self._process_crashes)
            for proc in self.processes.values():
                state = proc.live.state
                if state is RUNNING:
                    if may_crash and (proc.crashable if plain else self._may_crash(proc)):
                        options.append((proc.crash_label, plan.crash_weight, CRASH, proc))
                elif state is CRASHED:
                    options.append((proc.restart_label, 1.0, RESTART, proc))
        if self.partitions_left > 0 and self.cut_off is None and faulty:
            only = plan.partition_of
            for proc in self.processes.values():
                if proc.state is RUNNING and (not only or proc.name in only):
                    options.append((f"partition:{proc.name}", plan.partition_weight,
                                    PARTITION, proc))
        if self._watches:
            self._add_watch(options, timer_at, deadline)
        return options

    def _add_watch(self, options: list[tuple[str, float, int, Any]], timer_at: int,
                   deadline: float) -> None:
        """Offer the kernel's next watch, which is passive (see ``SimState._watches``).

        Time may not pass it: the system's next timer is withdrawn while it is
        later than the watch (one due at the same instant goes first).  And the
        watch is offered only when the system has nothing else to do now (no
        task, message, held task or restart; a fault may still be chosen beside
        it, as beside a timer).  Due already, it is woken by the scheduler
        (``Scheduler._schedule``), which is no choice.
        """
        due = min(self._watches.values())
        if timer_at >= 0 and due < deadline:
            del options[timer_at]
        if self._held:
            return
        for option in options:
            if option[2] != CRASH and option[2] != PARTITION:
                return
        if due > self.now:
            options.append((f"timer@{due:.3f}", 1.0, WATCH, due))

    def _wake_watches(self, now: float) -> None:
        """Wake every kernel watch due at ``now``."""
        watches = self._watches
        for task in [t for t, at in watches.items() if at <= now]:
            del watches[task]
            trio_internals.wake(task)

    async def _watch_until(self, at: float) -> None:
        """Park this kernel task until virtual time ``at``, passively (``_add_watch``)."""
        task = ll.current_task()
        watches = self._watches
        watches[task] = at

        def abort(_: object) -> ll.Abort:
            watches.pop(task, None)
            return ll.Abort.SUCCEEDED

        await trio_internals.park(abort)

    def _add_call_faults(self, options: list[tuple[str, float, int, Any]], task: ll.Task,
                         label: str, service: str) -> None:
        budgets = self._service_faults.get(service)
        if not budgets:
            return
        weight = self.faults.services[service].weight
        for kind in SERVICE_FAULTS:
            if budgets.get(kind, 0) > 0:
                options.append((f"{label}!{kind}", weight, CALL_FAULT, (task, kind)))

    def _may_crash(self, proc: Process) -> bool:
        """Whether the plan lets ``proc`` crash now (crashable, budgets, crash points)."""
        if not proc.crashable:
            return False
        plan = self.faults
        if plan.crash_only and proc.name not in plan.crash_only:
            return False
        if proc.name in self._process_crashes and self._process_crashes[proc.name] <= 0:
            return False
        if plan.crash_at:
            inc = proc.live
            return any(_op_kind(label) in plan.crash_at
                       for task, label in self._parked.items() if task in inc.tasks)
        return True

    def link_budget(self, source: str, dest: str, drops: bool) -> bool:
        """Whether the plan lets a message on ``source->dest`` be dropped (or duplicated)."""
        budgets = self._link_drops if drops else self._link_dups
        if not budgets:
            return not self.faults.links_only
        link = f"{source}->{dest}"
        if link in budgets:
            return budgets[link] > 0
        return not self.faults.links_only

    def spend_link(self, source: str, dest: str, drops: bool) -> None:
        budgets = self._link_drops if drops else self._link_dups
        link = f"{source}->{dest}"
        if link in budgets:
            budgets[link] -= 1

    # -- partitions -------------------------------------------------------------

    def _partition(self, proc: Process) -> None:
        """Cut ``proc`` off from every other process until the cut heals."""
        heal_at = self.now + self.faults.partition_seconds
        self.cut_off = proc.name
        self.fault("partition", proc.name, f"until {heal_at:.3f}")
        self.net.cut(proc.name)
        if self._sockets is not None:
            self._sockets.cut(proc.name)
        assert self._nursery is not None
        self._nursery.start_soon(self._heal, heal_at, name="dst-heal")

    async def _heal(self, heal_at: float) -> None:
        await trio.sleep_until(heal_at)
        if self.cut_off is not None:
            self.fault("heal", self.cut_off)
            self.cut_off = None
            if self._sockets is not None:
                self._sockets.healed()



def _op_kind(label: str) -> str:
    """``p/t@db.put(k)`` -> ``put``; ``p@send(q)`` -> ``send``; ``p@call:svc.op`` -> ``call``."""
    op = label.partition("@")[2]
    if op.startswith("call:"):
        return "call"
    head = op.partition("(")[0]
    return head.rpartition(".")[2]
