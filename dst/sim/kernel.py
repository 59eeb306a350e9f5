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
this module holds building the system, choice points and running a seed;
``scheduler`` decides at quiescence, ``injection`` lists the options and spends
fault budgets, ``preemption`` holds tasks at checkpoints, ``busy`` handles runs
that never rest and tasks of dead incarnations, ``liveness`` decides how a run
ends, ``findings`` records what it found.
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
from .active import ACTIVE as ACTIVE  # re-exported: where the run in progress is found
from .busy import BusyWatch
from .clock import VirtualClock
from .env import sever
from .faults import SERVICE_FAULTS
from .findings import Findings
from .injection import FaultInjection
from .liveness import Liveness
from .preemption import HoldWatch, Preemption
from .process import RUNNING, Incarnation, Process
from .recording import Recording
from .scheduler import Scheduler
from .seeding import SeededOnFirstUse
from .state import Invariant
from .store import SimStore
from .strategy import RandomWalk
from .trio_internals import RUN_CONTEXT as _RUN_CONTEXT


class RunStopped(BaseException):
    """Unwinds a task when the run stops: thrown into tasks that a cancellation cannot
    reach (a shielded ``Env`` call, a shielded loop), and raised by a data choice
    when a replay diverges."""


def canonical(value: object) -> str:
    """Canonical JSON: sorted keys, no NaN, UTF-8 as is."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


class Sim(Scheduler, Findings, FaultInjection, Preemption, BusyWatch, Liveness, Recording):
    """One simulated run.  Scenarios build the system on it in their ``setup``."""

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
        runtime: str = "trio",
    ) -> Process:
        """Start ``main(env)`` as process ``name``, connected to the named stores.

        ``idle=True`` says the process may wait forever once its work is done (a
        server waiting for the next request on a ``trio.Event`` or in
        ``sleep_forever``): at the end of the run its blocked tasks are idle, not
        a ``Deadlock``.  Waiting in ``env.net.recv()`` is always idle.

        ``runtime="asyncio"``: ``main`` is an asyncio coroutine function, run on
        dst's event loop (``dst.sim.aio``) under the same scheduler.
        """
        if name in self.processes:
            raise ValueError(f"a process named {name!r} already exists in this run")
        if runtime != "trio":
            if runtime != "asyncio":
                raise ValueError(f"process {name!r}: runtime is 'trio' or 'asyncio', "
                                 f"not {runtime!r}")
            from .aio import asyncio_main  # asyncio is imported only by runs that use it

            main = asyncio_main(main)
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
        # Not checked for the default, every fault (this runs for every seed).
        unknown = () if suffers is SERVICE_FAULTS else [
            k for k in suffers if k not in SERVICE_FAULTS]
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

        Faults stop at the first of: every fault budget spent, or none left
        that anything in the run could spend (at 0 for a plan without
        faults); the plan's ``faults_until``; its ``calm_by`` (300 virtual
        seconds by default); the system coming to rest.  From then on the
        property is checked after every step; it is met the first time it
        holds, work due at the deadline's very instant included.  If
        ``within`` seconds pass, or the system comes to rest, before it has
        held, the run fails with how long it waited and what the check said
        last.  Once every such property has held, the run ends there
        (``ended: held``): a system that never rests does not have to run to
        its step bound.
        """
        if within <= 0:
            raise ValueError(f"eventually({name!r}) needs within > 0 seconds, not {within!r}")
        self._eventually.append((name, check, float(within)))

    def choose(self, label: str, options: Sequence[str],
               weights: Sequence[float] | None = None) -> str:
        """A data choice (what the fake LLM picks, whether a supplier fails...).

        Recorded like a scheduling decision, so replay forces it and search can
        branch on it.  ``options`` must be in a stable order; ``weights`` (one per
        option, 1.0 each by default) are what a random strategy draws by.
        """
        if not options:
            raise ValueError(f"choose({label!r}) needs at least one option")
        labels = [f"{label}:{o}" for o in options]
        self._next_step()
        try:
            index = self.strategy.choose(
                self.step, labels, None if weights is None else list(weights))
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
        return SeededOnFirstUse(f"dst/{self._seed}/{purpose}")

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
        task = _RUN_CONTEXT.task  # ``ll.current_task()`` without its frame, as in ``enter``
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
        and tie it to its incarnation, so that it dies with it wherever it runs.

        The owner is the incarnation of the task that started it (trio calls this
        inside ``start_soon``, in the starting task's step), or, for a task started
        from outside any task of a process, that of its nursery's owner: never the
        contextvars context it runs in.  A context can come from another process:
        anyio's and the MCP SDK's memory streams carry the sender's context, and
        the receiver starts its handler inside it (``ctx.run(tg.start_soon, ...)``),
        which trio copies into the new task.  A process's main task is tied to its
        incarnation by ``Process._body`` itself, whoever starts it.
        """
        if self._starting:
            return  # a main task (``Process.start``), which may start inside another's step
        spawner = getattr(_RUN_CONTEXT, "task", None)
        owners = self._incarnation_of
        inc = owners.get(spawner) if spawner is not None else None
        if inc is None:
            nursery = task.parent_nursery
            if nursery is not None:
                inc = owners.get(nursery.parent_task)
        if inc is not None:
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

    async def _keep(self) -> None:
        """Hold the run open until ``_stop``: the task running ``run`` waits here,
        inside the run's nursery, so the nursery cannot close when every process
        has exited or crashed (the scheduler may still offer "restart P")."""
        if self._stopping:
            return
        self._keeper = _RUN_CONTEXT.task
        try:
            # Woken by ``_stop`` or, once the stopped run's tasks are gone, by the
            # quiescence hook (``Scheduler._quiescent``).
            await trio_internals.park(self._keeper_abort)
        finally:
            self._keeper = None

    def _keeper_abort(self, _: object) -> ll.Abort:
        """The seed's task is cancelled as trio would cancel it, except by the end of
        the run: the cancellation of the run's nursery is for its children.  Were the
        task let go then, it would wait in the nursery's ``__aexit__``, where trio would
        build (and drop) a ``Cancelled`` for it; left here, it is woken once they are
        gone, when the nursery closes at once."""
        return ll.Abort.FAILED if self._stopping else ll.Abort.SUCCEEDED

    def _stop(self, why: str) -> None:
        if self._stopping:
            return
        loops = self._loops
        if loops and why in ("bound", "held") and any(
                loop.report_unretrieved() for loop in list(loops.values())):
            return  # stopped at a failed asyncio task nobody awaited (``SimLoop``)
        self._stopping = True
        self.ended = why
        # First: the hold watch would only be asked about each task woken below, and
        # hold none of them (the run is stopping).
        self._end_preemption()
        nursery = self._nursery
        if nursery is not None:
            # The task running ``run`` is woken, not cancelled: a Cancelled raised in
            # ``_keep`` would leave the nursery's body with an exception, which trio
            # describes (two reprs), groups and strips again, all to end as it ends now.
            if nursery.child_tasks:
                # The seed's task refuses this cancellation (``_keeper_abort``) and
                # stays parked until the children are gone (``Scheduler._quiescent``).
                trio_internals.cancel(nursery.cancel_scope)
            else:
                keeper = self._keeper
                if keeper is not None and trio_internals.is_blocked(keeper):
                    self._keeper = None
                    trio_internals.wake(keeper)
                    self._leaving = keeper  # stepped in place by the hook if it can
        # A cancellation does not reach a call parked inside a shielded scope:
        # end those calls too, or the run could never finish.
        releasing, self._releasing = self._releasing, True
        try:
            for task in list(self._parked):
                del self._parked[task]
                ll.reschedule(task, outcome.Error(RunStopped("the run has stopped")))
        finally:
            self._releasing = releasing

    def _bury(self, inc: Incarnation) -> None:
        """A crash: end every task of the dead incarnation, wherever it runs.

        The incarnation's scope is already cancelled; what that cannot reach is
        a call parked in a shielded scope and a task the process started in a
        nursery it does not own.  Their parked calls leave the enabled set now
        (they will never be performed), blocked tasks are interrupted with
        ``ProcessCrashed`` at once, and running ones whenever they next block.
        """
        parked = self._parked
        loops = self._loops
        if loops:
            for loop in list(loops.values()):
                if loop._inc is inc:
                    # Its calls in flight end with it unrecorded, as the calls of a
                    # process's own tasks do when the crash cancels them.
                    loop.crashed()
        for task in list(inc.tasks):
            label = parked.pop(task, None)
            if label is not None:
                self.fault("refused", inc.name, label.partition("@")[2])
            if self._held.pop(task, None) is not None:
                trio_internals.release(task)  # runs into its cancelled scope
            self._doom(task)
            if trio_internals.is_blocked(task):
                trio_internals.interrupt(task, ProcessCrashed(f"process {inc.name} has crashed"))
        if self._sockets is not None:
            self._sockets.crashed(inc)  # its sockets vanish, as its kernel closes them

    # -- running --------------------------------------------------------------

    async def run(self, clock: VirtualClock, setup: Callable[[Sim], None]) -> None:
        """Run to the end inside an already running ``trio.run`` driven by ``clock``."""
        self._clock = clock
        clock.reset()
        if type(self.strategy) is RandomWalk:
            self._uniform = self.strategy.uniform
        ACTIVE.append(self)
        clock.on_quiescence = self.on_quiescence
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                setup(self)
                # Installed once the processes are started, not before: it would only be
                # asked about each of their main tasks, and hold none (spawned by this
                # task, they belong to no incarnation until they run).
                if self.preemptions_left > 0 and not self._stopping:
                    self._hold_watch = HoldWatch(self)
                    ll.add_instrument(self._hold_watch)
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
            if self._sockets is not None:
                self._sockets.release()
                self._sockets = None
            # The scenario's callables hold its world, and a world's fakes hold this
            # Sim: drop them, so the run is freed by refcounting, not the collector.
            self.services.clear()
            self._invariants.clear()
            self._end_checks.clear()
            self._eventually.clear()
            for env in self._envs:
                sever(env)
            self._envs.clear()




async def _stopped() -> None:
    raise RunStopped("the run has stopped")
