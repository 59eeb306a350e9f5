"""Simulated processes: start, hard crash, restart from durable state only.

A process is a name and a program; each time it starts it gets a new
:class:`Incarnation` (numbered from 0, the number recorded with every restart):
its own ``Env``, mailbox, tasks and state.  Everything the code under test
holds refers to one incarnation, never to the process, so an old incarnation
can never act for a new one: its handles stay bound to the dead incarnation and
every call through them is refused, and its finishing cannot mark the new one
exited.
"""

from __future__ import annotations

import contextvars
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio
import trio.lowlevel as ll

from ..env import Env, Message
from . import trio_internals
from .env import SimClock, SimServices, SimStoreHandle, SimTransport
from .seeding import SeededOnFirstUse

if TYPE_CHECKING:
    from .kernel import Sim

RUNNING, CRASHED, EXITED = "running", "crashed", "exited"

#: The incarnation of a process's main task, set in its context.  Which
#: incarnation a task belongs to is not read from here: a task can run in a
#: context copied from another process (``Sim.task_spawned``), so the kernel
#: keeps each task's owner itself (``Sim._incarnation_of``).
_CURRENT: contextvars.ContextVar[Incarnation | None] = contextvars.ContextVar(
    "dst_incarnation", default=None
)


#: Every ``env.clock``: it holds no state (it reads trio's clock), so one serves all.
_CLOCK = SimClock()


class Incarnation:
    """One life of a process: from a start (or restart) to its exit or crash."""

    __slots__ = ("_mail_lot", "env", "mailbox", "main_task", "number", "process", "scope",
                 "state", "tasks")

    def __init__(self, process: Process, number: int) -> None:
        self.process = process
        self.number = number
        self.state = RUNNING
        self.scope: trio.CancelScope | None = None
        self.main_task: ll.Task | None = None
        #: Every task this incarnation started, wherever it runs; they die with it.
        self.tasks: set[ll.Task] = set()
        self.mailbox: deque[Message] = deque()
        self._mail_lot: _MailLot | None = None
        self.env: Env | None = None

    @property
    def name(self) -> str:
        return self.process.name

    @property
    def sim(self) -> Sim:
        return self.process.sim

    @property
    def mail_lot(self) -> _MailLot:
        """Where ``env.net.recv`` waits; made on first use (most processes never receive)."""
        lot = self._mail_lot
        if lot is None:
            lot = self._mail_lot = _MailLot()
        return lot


class _MailLot(dict):  # type: ignore[type-arg]
    """The tasks waiting in an incarnation's ``env.net.recv``, first come first woken.

    What trio's ``ParkingLot`` does for ``recv`` (a fair queue, left on
    cancellation), without its generality (counts, reparking, breaking), its
    KeyboardInterrupt protection and its two coroutine frames per wait: a
    message is received per delivery, and most runs end with every process
    waiting here.  True while a task waits (``dst.sim.liveness`` asks).
    """

    __slots__ = ()

    def unpark(self) -> None:
        """Wake the task that has waited longest, if any (``ParkingLot.unpark``).

        Only a delivery wakes it, and a delivery is a decision the kernel performs:
        the wake-up is the decision itself (``trio_internals.wake``), which the
        preemption instrument would only let go.
        """
        if self:
            task = next(iter(self))
            del self[task]
            trio_internals.wake(task)


class Process:
    """A named program with volatile memory, connected to durable stores.

    ``main(env)`` is the process's program.  Everything it keeps in Python
    objects is volatile: a crash drops the ``Env`` (and with it the mailbox),
    and a restart calls ``main`` again with a new one.  Only the stores survive.
    """

    def __init__(
        self,
        sim: Sim,
        name: str,
        main: Callable[[Any], Awaitable[object]],
        stores: tuple[str, ...],
        crashable: bool,
        idle: bool = False,
    ) -> None:
        self.sim = sim
        self.name = name
        self.main = main
        self.store_names = stores
        self.crashable = crashable
        #: May block forever at the end of a run (a server waiting for work)
        #: without that being a deadlock.
        self.idle = idle
        self.live = Incarnation(self, 0)
        #: The labels of its crash and restart options (built once, not per decision).
        self.crash_label = f"crash:{name}"
        self.restart_label = f"restart:{name}"

    @property
    def state(self) -> str:
        return self.live.state

    @property
    def incarnation(self) -> int:
        return self.live.number

    @property
    def mailbox(self) -> deque[Message]:
        """Messages delivered to the live incarnation and not yet received."""
        return self.live.mailbox

    @staticmethod
    def current() -> Process | None:
        inc = _CURRENT.get()
        return inc.process if inc is not None else None

    def _make_env(self, inc: Incarnation) -> Env:
        sim = self.sim
        # A loop, not a comprehension, and Env's fields by position, not by keyword:
        # each would cost more than the handle it makes, once per incarnation.
        stores = {}
        for n in self.store_names:
            stores[n] = SimStoreHandle(sim, sim.stores[n], inc)
        env = Env(
            self.name,  # name
            _CLOCK,  # clock
            SimTransport(sim, inc),  # net
            SimServices(sim, inc),  # services
            SeededOnFirstUse(f"dst/{sim._seed}/{self.name}/{inc.number}"),  # rng
            stores,  # stores
        )
        sim._envs.append(env)
        return env

    def start(self, nursery: trio.Nursery) -> None:
        inc = self.live
        inc.env = self._make_env(inc)
        sim = self.sim
        # Not a child of whichever task is stepping now (a restart can be decided
        # inside another process's step): ``_body`` ties the task to ``inc``.
        sim._starting = True
        try:
            trio_internals.spawn(nursery, self._body, (inc,), self.name)  # nursery.start_soon
        finally:
            sim._starting = False

    async def _body(self, inc: Incarnation) -> None:
        _CURRENT.set(inc)
        task = ll.current_task()
        inc.main_task = task
        inc.tasks.add(task)
        sim = self.sim
        sim._incarnation_of[task] = inc  # what its children's owner is read from
        env = inc.env
        try:
            if self.crashable and sim.crashes_left > 0:
                with trio.CancelScope() as scope:  # what a crash cancels
                    inc.scope = scope
                    await self.main(env)
            else:
                # Crash budgets only shrink: this incarnation can never crash, and a
                # scope nobody cancels changes nothing but the cost of a run.
                await self.main(env)
        except BaseException as exc:
            if inc.state is CRASHED or sim is None or sim._stopping:
                return  # the unwinding of a crash or of the end of the run
            if isinstance(exc, KeyboardInterrupt):
                raise
            # Anything else escaping the program is a finding, BaseExceptions
            # included (a ProcessCrashed from another process's task that ran
            # in this one's nursery, a SystemExit, a stray Cancelled): dst
            # reports it and carries on with the other processes.
            sim.uncaught(self, exc)
            return
        finally:
            inc.tasks.discard(task)
        if inc.state is RUNNING:
            inc.state = EXITED
            if sim._sockets is not None:
                sim._sockets.exited(inc)  # what it left open, its exit closes

    def release(self) -> None:
        """Drop the references into a finished run, so refcounting frees it, not the GC.

        A run leaves a few hundred objects in cycles (process <-> sim, task <->
        frame); collecting them in bulk caused 20-30 ms pauses in long runs.
        """
        self.sim = None  # type: ignore[assignment]
        inc = self.live
        inc.process = None  # type: ignore[assignment]
        inc.env = None
        inc.main_task = None
        inc.scope = None
        inc.tasks.clear()

    def crash(self) -> Incarnation:
        """Stop at once: mark dead first, so unwinding code finds every call refused."""
        inc = self.live
        inc.state = CRASHED
        self.sim.crashed.add(self.name)
        self.sim.fault("crash", self.name)
        inc.mailbox = deque()
        inc.env = None
        if inc.scope is not None:
            trio_internals.cancel(inc.scope)
        return inc

    def restart(self, nursery: trio.Nursery) -> None:
        old = self.live
        old.main_task = None
        old.scope = None
        self.live = Incarnation(self, old.number + 1)
        self.sim.crashed.discard(self.name)
        self.sim.fault("restart", self.name, f"incarnation {self.live.number}")
        self.sim.release_labels(self)
        self.start(nursery)

    def deliver(self, message: Message) -> None:
        inc = self.live
        inc.mailbox.append(message)
        if inc._mail_lot is not None:
            inc._mail_lot.unpark()
