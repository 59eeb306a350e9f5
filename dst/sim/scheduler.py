"""The scheduler: what the kernel does each time the system comes to rest.

trio calls the clock's ``deadline_to_sleep_time`` exactly when its run queue is
empty; the clock hands that moment to :meth:`Scheduler.on_quiescence`, which
checks the invariants against the state the last step left, lists what is
enabled, asks the strategy for one option, records the decision and performs
it.  The common case (only parked calls enabled) is decided in one frame, and
the task it wakes is stepped right here when trio's next pass would do nothing
else (``trio_internals.may_step``); everything else goes through
``_schedule`` and the option lists of ``injection``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import trio.lowlevel as ll

from ..errors import DivergenceError
from . import trio_internals
from .active import ACTIVE
from .busy import BUSY_PASSES
from .clock import VirtualClock
from .findings import violation_message
from .options import (
    CALL_FAULT,
    CRASH,
    DELIVER,
    DROP,
    DUP,
    HELD,
    INF,
    PARTITION,
    READY,
    RESTART,
    SLOW,
    SOCKET_FAULT,
    TASK,
    TIMER,
    WATCH,
    by_label,
)
from .process import RUNNING, Process
from .state import SimState
from .strategy import weighted_index
from .trio_internals import RUN_CONTEXT as _RUN_CONTEXT

#: Decisions the quiescence hook steps in place before trio's loop gets a pass
#: (``Sim.on_quiescence``): bounds how long a Ctrl-C or a thread's call waits.
_IN_PLACE = 64

#: What a task parked at a choice point is woken with (``trio_internals.wake``'s).
_WOKEN = trio_internals.NOTHING


class Scheduler(SimState):
    """The part of :class:`~dst.sim.kernel.Sim` that decides at quiescence."""

    #: The random walk's draw, when the strategy is exactly ``RandomWalk`` (set by
    #: ``Sim.run``): the common case then draws without calling ``choose``.
    _uniform: Callable[[], float] | None = None

    #: Tasks asleep in ``env.clock.sleep``, each with the time it wakes at (made
    #: on the first sleep of a run): see :meth:`sleep_until`.
    _sleepers: dict[ll.Task, float] | None = None

    #: The seed's task, woken by the end of the run to leave it and not stepped yet
    #: (``Sim._stop``), and the one the hook chose to step for that (``_quiescent``):
    #: ``_in_place`` steps it and hands over to the next seed.
    _leaving: ll.Task | None = None
    _left_by: ll.Task | None = None

    async def sleep_until(self, wake_at: float) -> None:
        """Sleep until ``wake_at`` (later than now): what ``env.clock.sleep`` does.

        ``trio.sleep_until`` would open a cancel scope with that deadline and
        wake the task by cancelling it when trio's loop expires the deadline:
        several times the cost of a choice point.  Here the task parks and the
        kernel keeps its time; the timer option is the sooner of trio's next
        deadline and the first of these times, labelled as trio's would be, and
        performing it wakes every sleeper due (trio's next pass runs them).  A
        cancellation or a crash aborts the sleep as it would trio's.  The frame
        holds ``wake_at``, so the explorer's key reads it as it read the deadline
        of trio's scope.
        """
        task = ll.current_task()
        sleepers = self._sleepers
        if sleepers is None:
            sleepers = self._sleepers = {}
        sleepers[task] = wake_at

        def abort(_: object) -> ll.Abort:
            sleepers.pop(task, None)
            return ll.Abort.SUCCEEDED

        await trio_internals.park(abort)

    def _soonest(self, deadline: float) -> float:
        """The sooner of trio's ``deadline`` and the first sleeper's time."""
        sleepers = self._sleepers
        if sleepers:
            first = min(sleepers.values())
            if first < deadline:
                return first
        return deadline

    def _wake_sleepers(self, now: float) -> None:
        """Wake every sleeper due at ``now``, as trio's expiry of their deadlines would."""
        sleepers = self._sleepers
        assert sleepers is not None
        for task in [t for t, at in sleepers.items() if at <= now]:
            del sleepers[task]
            if task._abort_func is not None:
                trio_internals.wake(task)
            elif self._loops and task in self._loops:  # an asyncio loop's driver, not waiting
                self._loops[task].timers_due()

    def on_quiescence(self, deadline: float) -> float:
        """Every task is blocked: check, choose one option, perform it.

        trio calls this from inside its run loop (through the clock, see
        ``run``), where an exception would be a ``TrioInternalError``; a
        failing invariant or strategy is therefore kept, the run stopped, and
        the error re-raised once ``trio.run`` is unwound.

        When a decision leaves exactly one task runnable (a parked call chosen,
        a message handed to a waiting receiver, a held task let go) and trio's
        next pass would do nothing but step it (no deadline due, nothing for its
        I/O poll to find: ``trio_internals.may_step``), the hook steps it here,
        as trio's loop would; when that step (or the decision itself) leaves
        nothing runnable, it decides again at once, as trio's next pass would
        have asked it to.  The decisions and their order are the same, without a
        pass of trio's loop each.  After ``_IN_PLACE`` steps in a row trio's loop
        gets its pass.
        """
        if self._sleepers:
            deadline = self._soonest(deadline)
        task = self._quiescent(deadline)
        if not trio_internals.STEP:
            if task is not None:
                trio_internals.wake(task)
            return 0.0
        budget = self._in_place(task, _IN_PLACE)
        clock = self._clock
        while budget > 0:
            # This run has ended and the seed's task, stepped in place, started the next
            # seed of the batch: its first steps are taken here too (a loop, not a call
            # from each run's frame, so that each ended run is freed as it ends).
            following = ACTIVE[-1] if ACTIVE else None
            if following is None or following._clock is not clock:
                break
            budget = following._in_place(None, budget)
        return 0.0

    def _in_place(self, task: ll.Task | None, budget: int) -> int:
        """``on_quiescence``'s steps in place, at most ``budget``: ``task`` is the parked
        task just chosen (None: the decision, if any, was performed otherwise).

        When the run has ended and the seed's task, woken to leave it, is all trio
        would run, it is stepped here too; that step starts the next seed of the
        batch (``dst.sim.run``).  Returns what is left of ``budget`` then, for the
        next seed's own steps in place (as trio's next pass would have run that
        seed's first task), and 0 when trio's loop is to take its pass.
        """
        runner = _RUN_CONTEXT.runner
        runq = runner.runq
        may_step, step = trio_internals.may_step, trio_internals.step
        # trio's deadlines (cancel scopes with one): most decisions find none, and then
        # ``next_deadline`` (a Python method that pops stale entries) is not asked.  Its
        # heap is read each time: trio replaces the list when it prunes it.
        deadlines = runner.deadlines
        while budget > 0:
            budget -= 1
            if task is None:
                # The decision (if any) was performed by ``_schedule``: step here only
                # the one task it made runnable, when no deadline is due.  A decision
                # that made nothing runnable (a drop, a duplicate, a message nobody
                # waits for yet) leaves trio an empty pass, which would only ask
                # again: that pass is counted here and the next decision taken.
                if len(runq) > 1 or not may_step(runner):
                    return 0
                if self._busy + 1 >= BUSY_PASSES:
                    return 0
                if self._stopping:
                    leaving = self._leaving
                    if leaving is None or not runq or runq[0] is not leaving:
                        return 0
                    # The seed's task, leaving the ended run: stepped as trio's next pass
                    # would (no deadline due) until it has left, then the next seed goes
                    # on from here.
                    clock = self._clock
                    assert clock is not None
                    if (deadlines.next_deadline() if deadlines._heap else INF) <= clock.now:
                        return 0
                    self._busy += 1  # the pass of trio's loop this step stands for
                    step(runner, leaving)
                    if ACTIVE and ACTIVE[-1] is self:
                        continue  # still leaving (a checkpoint on its way out of the nursery)
                    self._leaving = None
                    return budget
                clock = self._clock
                assert clock is not None
                due = deadlines.next_deadline() if deadlines._heap else INF
                if self._sleepers:
                    due = self._soonest(due)
                if due <= clock.now:
                    return 0
                self._busy += 1  # the pass of trio's loop this step stands for
                if runq:
                    step(runner, runq[0])
            else:
                # Something the decision ran (an invariant setting an Event) may have
                # made another task runnable: trio would run it in the same batch.
                if runq or not may_step(runner):
                    break
                self._busy += 1  # the pass of trio's loop this step stands for
                step(runner, task, _WOKEN)
                if task is self._left_by:  # the seed's task, leaving the ended run
                    self._left_by = None
                    if not (ACTIVE and ACTIVE[-1] is self):
                        return budget
                    self._leaving = task  # stepped on at the top, while it is all that runs
                    task = None
                    continue
            if self._stopping:
                return 0
            if runq:
                # The step made a task runnable (an asyncio loop's driver woken by a reply
                # its bridge brought): trio's next pass would run that one task, and the
                # branch above steps it here when nothing else would happen in that pass.
                task = None
                continue
            due = deadlines.next_deadline() if deadlines._heap else INF
            task = self._quiescent(self._soonest(due) if self._sleepers else due)
        if task is not None:
            trio_internals.wake(task)
        return 0

    def _quiescent(self, deadline: float) -> ll.Task | None:
        """Decide at quiescence: the parked task chosen, or None when it is done.

        It runs once per decision, so the common case (only parked calls are
        enabled) is decided here in one frame, and the task chosen returned for
        ``on_quiescence`` to step; everything else goes to ``_schedule``.
        """
        # Everything the hook wakes is the decision itself, never a new choice point.
        self._releasing = True
        try:
            # The busy count is reset by decisions only: a held task released because
            # nothing else could go (no decision) is still the system keeping busy.
            clock = self._clock
            assert clock is not None
            if self._stopping:
                keeper, nursery = self._keeper, self._nursery
                if keeper is not None and nursery is not None and not nursery.child_tasks:
                    # The stopped run's tasks are gone: the seed's task, parked while they
                    # unwound (``Sim._keeper_abort``), leaves the run's nursery now, as it
                    # would have the moment the last of them exited (stepped here when no
                    # deadline is due, as trio's next pass would step it).
                    self._keeper = None
                    if deadline > clock.now:
                        self._left_by = keeper
                        return keeper
                    trio_internals.wake(keeper)
                elif clock.now < deadline < INF:
                    # Nothing runs, yet a task still sleeps: one in a shielded scope,
                    # which the end of the run cannot cancel.  Time goes on to its
                    # deadline (no decision: the run has stopped) so that it finishes.
                    clock.now = deadline
                    if self._sleepers:
                        self._wake_sleepers(deadline)
                return None
            if deadline <= clock.now:
                return None  # trio expires it in this very pass; nothing to choose
            # ``_check_invariants``, inlined: it runs before every decision.
            for name, check in self._invariants:
                result = check()
                if result is not True:
                    self._violate(name, violation_message(name, result, check, self._seed))
                    return None
            if self._pending and self._check_eventually():
                return None
            parked = self._parked
            if (
                not parked
                or self._held
                or deadline != INF
                or self.net.in_flight
                or self.crashed
                or self._more_faults
                or self.step >= self.max_steps
            ):
                self._schedule(deadline, clock)
                return None
            if self.crashes_left > 0:
                crashes = self._crash_choices(clock)
                if crashes is None:
                    self._schedule(deadline, clock)
                    return None
                if crashes:
                    return self._decide_parked_or_crash(crashes, clock)
            # Only parked tasks are enabled: listed by label, the task chosen woken.
            if len(parked) == 1:
                ((task, label),) = parked.items()
                labels: tuple[str, ...] = (label,)
            elif len(parked) == 2:
                (task, label), (other, second) = parked.items()
                if second < label:
                    labels = (second, label)
                    task, other = other, task
                else:
                    labels = (label, second)
            else:
                items = sorted(parked.items(), key=by_label)
                labels = tuple([label for _, label in items])
            self.step = step = self.step + 1
            if self._watch is not None:
                self._unwatch()
            self._busy = 0
            uniform = self._uniform
            if uniform is not None:  # RandomWalk.choose, inlined (all weights are 1.0)
                index = int(uniform() * len(labels)) if len(labels) > 1 else 0
            else:
                try:
                    index = self.strategy.choose(step, labels, None)
                except DivergenceError as exc:
                    self.divergence = exc
                    self._stop("diverged")
                    return None
            self.records.append(("decision", step, clock.now, "schedule", labels, index))
            if len(labels) == 2:
                task = (task, other)[index]
            elif len(labels) > 2:
                task = items[index][0]
            del parked[task]
            return task
        except BaseException as exc:
            self.error = exc
            self._stop("error")
            return None
        finally:
            self._releasing = False

    def _crash_choices(self, clock: VirtualClock) -> tuple[Process, ...] | None:
        """The processes a crash option is offered for, when that is all besides parked calls.

        None when the plan filters crashes (``crash_only``, ``crash_at``,
        per-process budgets): ``_options`` then decides.  The same processes, in
        the same order, as ``_options`` lists for a plain plan.
        """
        plan = self.faults
        if plan.crash_only or plan.crash_at or self._process_crashes:
            return None
        until = self._faults_end
        if until is not None and clock.now >= until:
            return ()
        return tuple([proc for proc in self.processes.values()
                      if proc.crashable and proc.live.state is RUNNING])

    def _decide_parked_or_crash(self, crashes: tuple[Process, ...],
                                clock: VirtualClock) -> ll.Task | None:
        """Parked calls and crashes are enabled: ``_schedule``'s decision, without its lists.

        The most common decision of a run that may still crash a process: the
        labels, weights and order are those ``_options`` gives (parked calls by
        label, then each crashable process), and the parked task chosen is
        returned for ``on_quiescence`` to step, as for parked calls alone.
        """
        items = sorted(self._parked.items(), key=by_label)
        labels = [label for _, label in items]
        labels += [proc.crash_label for proc in crashes]
        weight = self.faults.crash_weight
        weights = None if weight == 1.0 else [1.0] * len(items) + [weight] * len(crashes)
        self.step = step = self.step + 1
        if self._watch is not None:
            self._unwatch()
        self._busy = 0
        uniform = self._uniform
        if uniform is not None and weights is not None:
            index = weighted_index(uniform, weights)  # RandomWalk.choose, without its frame
        else:
            try:
                index = self.strategy.choose(step, labels, weights)
            except DivergenceError as exc:
                self.divergence = exc
                self._stop("diverged")
                return None
        self.records.append(("decision", step, clock.now, "schedule", tuple(labels), index))
        if index < len(items):
            task = items[index][0]
            del self._parked[task]
            return task
        self._perform_option(("", weight, CRASH, crashes[index - len(items)]), clock)
        if self.calm_at is None and self._eventually:
            self._note_calm()
        return None

    def _schedule(self, deadline: float, clock: VirtualClock) -> float:
        """Held tasks, messages, timers or faults are enabled, or nothing is."""
        if self._held:
            return self._schedule_held(deadline, clock)
        if self.step >= self.max_steps:
            self._stop("bound")
            return 0.0
        options = self._options(deadline)
        if self._watches:
            if math.isinf(deadline) and (not options or (
                    len(options) == 1 and options[0][2] == WATCH)):
                # Nothing can happen but the kernel's own watches: the system is at
                # rest, whatever they would wait for.
                self._end_quiescent()
                return 0.0
            if not options:
                # A watch is due now, and nothing else is left to do at this instant
                # (the system's next timer is later): it goes, and that is no choice.
                self._wake_watches(clock.now)
                return 0.0
        if not options:
            self._end_quiescent()
            return 0.0
        labels = tuple([o[0] for o in options])
        weights: list[float] | None = None
        for o in options:
            if o[1] != 1.0:
                weights = [o[1] for o in options]
                break
        # ``_decide`` and ``_perform``, inlined (the kernel is already releasing).
        self.step = step = self.step + 1
        if self._watch is not None:
            self._unwatch()
        self._busy = 0
        uniform = self._uniform
        if uniform is not None and weights is not None and len(labels) > 1:
            index = weighted_index(uniform, weights)  # RandomWalk.choose, without its frame
        else:
            try:
                index = self.strategy.choose(step, labels, weights)
            except DivergenceError as exc:
                self.divergence = exc
                self._stop("diverged")
                return 0.0
        self.records.append(("decision", step, clock.now, "schedule", labels, index))
        self._perform_option(options[index], clock)
        if self.calm_at is None and self._eventually:
            self._note_calm()
        return 0.0

    def _next_step(self) -> int:
        """Start a decision: count it, and end the busy watch (the hot paths inline this)."""
        self.step += 1
        if self._watch is not None:
            self._unwatch()
        self._busy = 0
        return self.step

    def _decide(self, labels: list[str], weights: list[float] | None) -> int:
        """Ask the strategy and record the decision; -1 when the replay diverged."""
        self._next_step()
        try:
            index = self.strategy.choose(self.step, labels, weights)
        except DivergenceError as exc:
            self.divergence = exc
            self._stop("diverged")
            return -1
        self.records.append(("decision", self.step, self.now, "schedule", tuple(labels), index))
        return index

    def _perform(self, option: tuple[str, float, int, Any], clock: VirtualClock) -> None:
        releasing, self._releasing = self._releasing, True
        try:
            self._perform_option(option, clock)
        finally:
            self._releasing = releasing
        if self.calm_at is None and self._eventually:
            self._note_calm()

    def _perform_option(self, option: tuple[str, float, int, Any], clock: VirtualClock) -> None:
        kind, target = option[2], option[3]
        if kind == HELD:
            del self._held[target]
            trio_internals.release(target)
        elif kind == TASK:
            del self._parked[target]
            trio_internals.wake(target)
        elif kind == TIMER:
            clock.now = target
            if self._sleepers:
                self._wake_sleepers(target)
        elif kind == DELIVER:
            self.net.deliver(target)
        elif kind == DROP:
            self.drops_left -= 1
            self.spend_link(target.source, target.dest, drops=True)
            self.net.drop(target)
        elif kind == DUP:
            self.dups_left -= 1
            self.spend_link(target.source, target.dest, drops=False)
            self.net.duplicate(target)
        elif kind == CRASH:
            self.crashes_left -= 1
            if target.name in self._process_crashes:
                self._process_crashes[target.name] -= 1
            self._bury(target.crash())
        elif kind == CALL_FAULT:
            task, fault = target
            service = self._calling[task]
            self._service_faults[service][fault] -= 1
            self._recount_faults()
            self._call_fault[task] = fault
            del self._parked[task]
            trio_internals.wake(task)
        elif kind == PARTITION:
            self.partitions_left -= 1
            self._recount_faults()
            self._partition(target)
        elif kind == RESTART:
            assert self._nursery is not None
            target.restart(self._nursery)
        elif kind == WATCH:
            clock.now = target  # before every timer of the system's (``_add_watch``)
            self._wake_watches(target)
        elif kind == SLOW:
            self.slow_left -= 1
            self.fault("slow", option[0].partition("!")[0], "fired while other work could run")
            clock.now = target
            if self._sleepers:
                self._wake_sleepers(target)
        elif kind == SOCKET_FAULT:
            assert self._sockets is not None
            self._sockets.perform_fault(target)
        elif kind == READY:
            loop, handle = target
            if self._held.pop(loop._driver, None) is not None:
                loop.pick(handle)
