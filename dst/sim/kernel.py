"""The controlled scheduler: one simulated run of a system under test.

Design
------
A *choice point* is any call the code under test makes through its ``Env``
(a store read or write, a send, a service call): the calling task records what
it is about to do and parks.  Timers and messages in flight are choice points
too, owned by nobody.  While the fault plan allows preemptions, every trio
checkpoint of the code under test is one as well: a task trio makes runnable
is held (``preemption``) until the scheduler lets it go.  trio's own batch
order is task creation order (``dst.sim.run``), so no generator decides
anything the trace does not record.

When every task is blocked (*quiescence*, detected by :class:`VirtualClock`),
the kernel lists the enabled options in a stable order (tasks sorted by label,
then messages by id, then the next timer, then faults), checks the invariants
against the state the last step left, and asks the :class:`Strategy` for one
option.  It records the decision, performs it (reschedule one task, deliver /
drop / duplicate one message, jump the clock to the next deadline, crash or
restart one process) and hands control back to trio.  The run therefore is a
pure function of the scenario, its config, the seed and the strategy; the
decision records are exactly what a replay must force.

A hard crash is not a cancellation, although it uses one to unwind: the
process is marked dead *first*, so that every ``finally``/``except`` block that
runs while its tasks unwind finds each ``Env`` call refused (and recorded),
and its volatile state is dropped; a restart runs its ``main`` again with fresh
memory over the same durable stores.

``Sim`` is assembled from parts that share :class:`~dst.sim.state.SimState`:
this module holds building the system, choice points and the scheduler;
``injection`` lists the options and spends fault budgets, ``preemption``
holds tasks at checkpoints, ``busy`` handles runs that never rest and tasks of
dead incarnations, ``liveness`` decides how a run ends, ``findings`` records
what it found.
"""

from __future__ import annotations

import json
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import outcome
import trio
import trio.lowlevel as ll

from ..errors import DivergenceError, ProcessCrashed
from . import trio_internals
from .busy import BUSY_PASSES, BusyWatch
from .clock import VirtualClock
from .faults import SERVICE_FAULTS
from .findings import Findings, violation_message
from .injection import FaultInjection
from .liveness import Liveness
from .options import (
    CALL_FAULT,
    CRASH,
    DELIVER,
    DROP,
    DUP,
    HELD,
    INF,
    PARTITION,
    RESTART,
    TASK,
    TIMER,
    by_label,
)
from .preemption import HoldWatch, Preemption
from .process import _CURRENT as _INCARNATION_VAR
from .process import RUNNING, Incarnation, Process
from .recording import Recording
from .seeding import SeededOnFirstUse
from .state import Invariant
from .store import SimStore
from .strategy import RandomWalk
from .trio_internals import RUN_CONTEXT as _RUN_CONTEXT


class RunStopped(BaseException):
    """Unwinds a task when the run stops: thrown into tasks that a cancellation cannot
    reach (a shielded ``Env`` call, a shielded loop), and raised by a data choice
    when a replay diverges."""


#: Decisions the quiescence hook steps in place before trio's loop gets a pass
#: (``Sim.on_quiescence``): bounds how long a Ctrl-C or a thread's call waits.
_IN_PLACE = 64

#: What a task parked at a choice point is woken with (``trio_internals.wake``'s).
_WOKEN = trio_internals.NOTHING

#: The run currently executing in this thread (set while its tasks run), for
#: the structlog processor and the guard, which have no other way to find it.
ACTIVE: list[Sim] = []


def canonical(value: object) -> str:
    """Canonical JSON: sorted keys, no NaN, UTF-8 as is."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


class Sim(Findings, FaultInjection, Preemption, BusyWatch, Liveness, Recording):
    """One simulated run.  Scenarios build the system on it in their ``setup``."""

    #: The random walk's draw, when the strategy is exactly ``RandomWalk`` (set by
    #: ``run``): the scheduler's common case then draws without calling ``choose``.
    _uniform: Callable[[], float] | None = None

    # -- building the system (called from a scenario's setup) -----------------

    def store(self, name: str) -> SimStore:
        """The durable store ``name`` (created empty on first use); survives crashes."""
        store = self.stores.get(name)
        if store is None:
            store = self.stores[name] = SimStore(name)
        return store

    def process(
        self,
        name: str,
        main: Callable[[Any], Awaitable[object]],
        *,
        stores: Sequence[str] = (),
        crashable: bool = True,
        idle: bool = False,
    ) -> Process:
        """Start ``main(env)`` as process ``name``, connected to the named stores.

        ``idle=True`` says the process may wait forever once its work is done (a
        server waiting for the next request on a ``trio.Event`` or in
        ``sleep_forever``): at the end of the run its blocked tasks are idle, not
        a ``Deadlock``.  Waiting in ``env.net.recv()`` is always idle.
        """
        if name in self.processes:
            raise ValueError(f"a process named {name!r} already exists in this run")
        for store_name in stores:
            self.store(store_name)
        proc = Process(self, name, main, tuple(stores), crashable, idle)
        self.processes[name] = proc
        if self._nursery is not None:
            proc.start(self._nursery)
        return proc

    def service(
        self, name: str, handler: Callable[[str, Any], Any], *,
        suffers: Sequence[str] = SERVICE_FAULTS,
    ) -> None:
        """Register a fake outside service: ``handler(op, request) -> reply``.

        ``suffers`` names the faults (of ``SERVICE_FAULTS``) this service can have
        in the world it stands for; the fault plan's budgets (``FaultPlan(
        services={name: ServiceFaults(...)})``) decide how many a run injects.
        """
        unknown = [k for k in suffers if k not in SERVICE_FAULTS]
        if unknown:
            raise ValueError(
                f"service {name!r} cannot suffer {', '.join(unknown)}; "
                f"the service faults are {', '.join(SERVICE_FAULTS)}"
            )
        self.services[name] = handler
        self._suffers[name] = tuple(suffers)
        budgets = self._service_faults.get(name)
        if budgets:
            for kind in list(budgets):
                if kind not in suffers:
                    del budgets[kind]
            self._recount_faults()

    def invariant(self, name: str, check: Invariant) -> None:
        """``check()`` runs after every step: ``True`` holds; ``False`` or a message breaks it."""
        self._invariants.append((name, check))

    def at_end(self, name: str, check: Invariant) -> None:
        """``check()`` runs once when the run reaches quiescence."""
        self._end_checks.append((name, check))

    def eventually(self, name: str, check: Invariant, within: float) -> None:
        """``check()`` must hold within ``within`` virtual seconds after the faults stop.

        Faults stop when every fault budget is spent, or at the plan's
        ``faults_until``, whichever comes first (at 0 for a plan without
        faults).  From then on the property is checked after every step; it
        is met the first time it holds.  If ``within`` seconds pass, or the
        system comes to rest, before it has held, the run fails with the
        property's message and how long it waited.  Once every such property
        has held, the run ends there (``ended: held``): a system that never
        rests does not have to run to its step bound.
        """
        if within <= 0:
            raise ValueError(f"eventually({name!r}) needs within > 0 seconds, not {within!r}")
        self._eventually.append((name, check, float(within)))

    def choose(self, label: str, options: Sequence[str]) -> str:
        """A data choice (what the fake LLM picks, whether a supplier fails...).

        Recorded like a scheduling decision, so replay forces it and search can
        branch on it.  ``options`` must be in a stable order.
        """
        if not options:
            raise ValueError(f"choose({label!r}) needs at least one option")
        labels = [f"{label}:{o}" for o in options]
        self.step += 1
        if self._watch is not None:
            self._unwatch()
        self._busy = 0
        try:
            index = self.strategy.choose(self.step, labels, None)
        except DivergenceError as exc:
            if self.divergence is None:
                self.divergence = exc
            self._stop("diverged")
            raise RunStopped("the run diverged from its trace") from None
        except BaseException as exc:
            # The strategy itself failed (or a driver such as Hypothesis stopped
            # the run): never let it pass through the code under test, which
            # would report it as its own error.
            if self.error is None:
                self.error = exc
            self._stop("error")
            raise RunStopped("the strategy stopped the run") from None
        self.records.append(("decision", self.step, self.now, "data", tuple(labels), index))
        return options[index]

    def rng(self, purpose: str) -> random.Random:
        """A generator derived from the seed and ``purpose`` (for fakes)."""
        return SeededOnFirstUse(f"dst/{self.seed}/{purpose}")

    @property
    def now(self) -> float:
        return self._clock.now if self._clock is not None else 0.0

    # -- what the code under test reaches through Env -------------------------

    def enter(self, proc: Incarnation, op: str) -> Awaitable[object]:
        """Park the calling task at a choice point until the strategy picks it.

        ``proc`` is the incarnation whose ``Env`` made the call: a call through
        the handles of a dead incarnation is refused even after its process
        restarted.  A parked call is performed only if its incarnation is still
        alive when the strategy picks it: a crash takes its parked calls out of
        the enabled set (``_bury``), shielded or not.
        """
        if proc.state is not RUNNING:
            return self.refuse(proc, op)
        if self._stopping:
            return _stopped()
        task = _RUN_CONTEXT.task
        label = self._task_labels.get(task)
        if label is None:
            label = self._label_task(task, proc)
        parked = self._parked
        parked[task] = f"{label}@{op}"
        msg = self._waiting.get(task)
        if msg is not None:
            return trio_internals.park_as(msg)

        def abort(_: object) -> ll.Abort:
            parked.pop(task, None)
            return ll.Abort.SUCCEEDED

        if not trio_internals.PARK_AS:
            return trio_internals.park(abort)
        msg = self._waiting[task] = trio_internals.waiting(abort)
        return trio_internals.park_as(msg)

    async def call_service(self, proc: Incarnation, service: str, op: str) -> str | None:
        """Park at a service call; the fault the strategy chose for it, if any."""
        task = ll.current_task()
        self._calling[task] = service
        try:
            await self.enter(proc, f"call:{service}.{op}")
        finally:
            self._calling.pop(task, None)
        return self._call_fault.pop(task, None) if self._call_fault else None

    async def refuse(self, proc: Incarnation, op: str) -> None:
        """A dead incarnation tried to touch the world: record it, then unwind."""
        live = proc.process.live
        if live is not proc:
            op = f"{op} by incarnation {proc.number} (now {live.number})"
        self.fault("refused", proc.name, op)
        self._doom(ll.current_task())
        await ll.checkpoint()  # raises Cancelled when the process's own scope is cancelled
        raise ProcessCrashed(f"process {proc.name} has crashed; {op} refused")

    def task_spawned(self, task: ll.Task) -> None:
        """Label a process's child task in the order it was started (stable, readable),
        and tie it to its incarnation, so that it dies with it wherever it runs."""
        inc = task.context.get(_INCARNATION_VAR)
        if inc is not None and inc.process.sim is self:
            inc.tasks.add(task)
            self._incarnation_of[task] = inc
            if inc.state is not RUNNING:
                self._doom(task)  # started while its incarnation was dying
            self._label_task(task, inc)

    def task_exited(self, task: ll.Task) -> None:
        inc = self._incarnation_of.pop(task, None)
        if inc is not None:
            inc.tasks.discard(task)
        self._doomed.discard(task)
        self._waiting.pop(task, None)

    # -- the scheduler --------------------------------------------------------

    def on_quiescence(self, deadline: float) -> float:
        """Every task is blocked: check, choose one option, perform it.

        trio calls this from inside its run loop (through the clock, see
        ``run``), where an exception would be a ``TrioInternalError``; a
        failing invariant or strategy is therefore kept, the run stopped, and
        the error re-raised once ``trio.run`` is unwound.

        When the decision wakes one parked task, trio's next pass would do
        nothing but step it (``trio_internals.may_step``): no I/O is waited
        for, no deadline is due, nothing else is runnable.  The hook then steps
        it here, as trio's loop would, and when that step leaves nothing
        runnable either, decides again at once, as trio's next pass would have
        asked it to: the same decisions in the same order, without a pass of
        trio's loop each.  ``_IN_PLACE`` steps at most, then trio's loop gets
        its pass (and polls for I/O: a Ctrl-C, a thread's call).
        """
        task = self._quiescent(deadline)
        if not trio_internals.STEP:
            if task is not None:
                trio_internals.wake(task)
            return 0.0
        runner = _RUN_CONTEXT.runner
        runq = runner.runq
        may_step, step = trio_internals.may_step, trio_internals.step
        for _ in range(_IN_PLACE):
            if task is None:
                # The decision (if any) was performed by ``_schedule``: step here only
                # the one task it made runnable, when no deadline is due.
                if (len(runq) != 1 or self._stopping or self._busy + 1 >= BUSY_PASSES
                        or not may_step(runner)):
                    return 0.0
                clock = self._clock
                assert clock is not None
                if runner.deadlines.next_deadline() <= clock.now:
                    return 0.0
                self._busy += 1  # the pass of trio's loop this step stands for
                step(runner, runq[0])
            else:
                # Something the decision ran (an invariant setting an Event) may have
                # made another task runnable: trio would run it in the same batch.
                if runq or not may_step(runner):
                    break
                self._busy += 1  # the pass of trio's loop this step stands for
                step(runner, task, _WOKEN)
            if runq or self._stopping:
                return 0.0  # trio's next pass runs what the step made runnable
            task = self._quiescent(runner.deadlines.next_deadline())
        if task is not None:
            trio_internals.wake(task)
        return 0.0

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
            if self._stopping:
                return None
            clock = self._clock
            assert clock is not None
            if deadline <= clock.now:
                return None  # trio expires it in this very pass; nothing to choose
            # ``_check_invariants``, inlined: it runs before every decision.
            for name, check in self._invariants:
                result = check()
                if result is not True:
                    self._violate(name, violation_message(name, result))
                    return None
            if self._pending and self._check_eventually():
                return None
            parked = self._parked
            if (
                not parked
                or self._held
                or deadline != INF
                or self.net.in_flight
                or self.crashes_left > 0
                or self.crashed
                or self._more_faults
                or self.step >= self.max_steps
            ):
                self._schedule(deadline, clock)
                return None
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

    def _schedule(self, deadline: float, clock: VirtualClock) -> float:
        """Held tasks, messages, timers or faults are enabled, or nothing is."""
        if self._held:
            return self._schedule_held(deadline, clock)
        if self.step >= self.max_steps:
            self._stop("bound")
            return 0.0
        options = self._options(deadline)
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

    def _decide(self, labels: list[str], weights: list[float] | None) -> int:
        """Ask the strategy and record the decision; -1 when the replay diverged."""
        self.step += 1
        if self._watch is not None:
            self._unwatch()
        self._busy = 0
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

    async def _keep(self) -> None:
        """Hold the run open until ``_stop``: the task running ``run`` waits here,
        inside the run's nursery, so the nursery cannot close when every process
        has exited or crashed (the scheduler may still offer "restart P")."""
        if self._stopping:
            return
        self._keeper = ll.current_task()
        try:
            await ll.wait_task_rescheduled(_abort_ok)
        finally:
            self._keeper = None

    def _stop(self, why: str) -> None:
        if self._stopping:
            return
        self._stopping = True
        self.ended = why
        nursery = self._nursery
        if nursery is not None:
            keeper = self._keeper
            if not nursery.child_tasks:
                if keeper is not None:
                    self._keeper = None
                    ll.reschedule(keeper)
            else:
                nursery.cancel_scope.cancel()
        # A cancellation does not reach a call parked inside a shielded scope:
        # end those calls too, or the run could never finish.
        releasing, self._releasing = self._releasing, True
        try:
            for task in list(self._parked):
                del self._parked[task]
                ll.reschedule(task, outcome.Error(RunStopped("the run has stopped")))
        finally:
            self._releasing = releasing
        self._end_preemption()

    def _bury(self, inc: Incarnation) -> None:
        """A crash: end every task of the dead incarnation, wherever it runs.

        The incarnation's scope is already cancelled; what that cannot reach is
        a call parked in a shielded scope and a task the process started in a
        nursery it does not own.  Their parked calls leave the enabled set now
        (they will never be performed), blocked tasks are interrupted with
        ``ProcessCrashed`` at once, and running ones whenever they next block.
        """
        parked = self._parked
        for task in list(inc.tasks):
            label = parked.pop(task, None)
            if label is not None:
                self.fault("refused", inc.name, label.partition("@")[2])
            if self._held.pop(task, None) is not None:
                trio_internals.release(task)  # runs into its cancelled scope
            self._doom(task)
            if trio_internals.is_blocked(task):
                trio_internals.interrupt(task, ProcessCrashed(f"process {inc.name} has crashed"))

    # -- running --------------------------------------------------------------

    async def run(self, clock: VirtualClock, setup: Callable[[Sim], None]) -> None:
        """Run to the end inside an already running ``trio.run`` driven by ``clock``."""
        self._clock = clock
        clock.reset()
        if type(self.strategy) is RandomWalk:
            self._uniform = self.strategy.uniform
        ACTIVE.append(self)
        clock.on_quiescence = self.on_quiescence
        if self.preemptions_left > 0:
            self._hold_watch = HoldWatch(self)
            ll.add_instrument(self._hold_watch)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                setup(self)
                if self._eventually:
                    self._note_calm()
                # The run ends when the scheduler finds nothing left to choose.
                await self._keep()
            if self.error is not None:
                raise self.error
            if self.ended is None:
                self.ended = "quiescent"
            if self.ended == "quiescent":
                self._stopping = False
                if not self._check_invariants():
                    self._run_end_checks()
        finally:
            clock.on_quiescence = None
            ACTIVE.pop()
            self._parked.clear()
            self._task_labels.clear()
            self._label_owner.clear()
            self._incarnation_of.clear()
            self._doomed.clear()
            self._unwatch()
            self._end_preemption()
            if self._doom_watch is not None:
                ll.remove_instrument(self._doom_watch)
                self._doom_watch = None
            self._nursery = None
            # Drop the back references, so that refcounting frees the run.
            for proc in self.processes.values():
                proc.release()
            self.net.sim = None  # type: ignore[assignment]




def _abort_ok(_: object) -> ll.Abort:
    return ll.Abort.SUCCEEDED


async def _stopped() -> None:
    raise RunStopped("the run has stopped")
