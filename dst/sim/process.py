"""Simulated processes: start, hard crash, restart from durable state only."""

from __future__ import annotations

import contextvars
import random
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio
import trio.lowlevel as ll

from ..env import Env, Message
from .env import SimClock, SimServices, SimStoreHandle, SimTransport

if TYPE_CHECKING:
    from .kernel import Sim

RUNNING, CRASHED, EXITED = "running", "crashed", "exited"

_CURRENT: contextvars.ContextVar[Process | None] = contextvars.ContextVar(
    "dst_process", default=None
)


class Process:
    """A named group of tasks with volatile memory, connected to durable stores.

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
    ) -> None:
        self.sim = sim
        self.name = name
        self.main = main
        self.store_names = stores
        self.crashable = crashable
        self.state = RUNNING
        self.incarnation = 0
        self.main_task: ll.Task | None = None
        self.scope: trio.CancelScope | None = None
        self.mailbox: deque[Message] = deque()
        self.mail_lot = ll.ParkingLot()
        self.env: Env | None = None

    @staticmethod
    def current() -> Process | None:
        return _CURRENT.get()

    def _make_env(self) -> Env:
        sim = self.sim
        return Env(
            name=self.name,
            clock=SimClock(),
            net=SimTransport(sim, self),
            services=SimServices(sim, self),
            rng=random.Random(f"dst/{sim.seed}/{self.name}/{self.incarnation}"),
            stores={n: SimStoreHandle(sim, sim.stores[n], self) for n in self.store_names},
        )

    def start(self, nursery: trio.Nursery) -> None:
        self.env = self._make_env()
        self.main_task = None
        nursery.start_soon(self._body, self.env, name=self.name)

    async def _body(self, env: Env) -> None:
        _CURRENT.set(self)
        self.main_task = ll.current_task()
        sim = self.sim
        try:
            with trio.CancelScope() as scope:
                self.scope = scope
                await self.main(env)
        except BaseException as exc:
            if self.state is CRASHED or sim._stopping:
                return  # the unwinding of a crash or of the end of the run
            if isinstance(exc, Exception):
                sim.uncaught(self, exc)
                return
            raise
        if self.state is RUNNING:
            self.state = EXITED

    def release(self) -> None:
        """Drop the references into a finished run, so refcounting frees it, not the GC.

        A run leaves a few hundred objects in cycles (process <-> sim, task <->
        frame); collecting them in bulk caused 20-30 ms pauses in long runs.
        """
        self.sim = None  # type: ignore[assignment]
        self.env = None
        self.main_task = None
        self.scope = None

    def crash(self) -> None:
        """Stop at once: mark dead first, so unwinding code finds every call refused."""
        self.state = CRASHED
        self.sim.crashed.add(self.name)
        self.sim.fault("crash", self.name)
        self.mailbox = deque()
        self.env = None
        if self.scope is not None:
            self.scope.cancel()

    def restart(self, nursery: trio.Nursery) -> None:
        self.state = RUNNING
        self.sim.crashed.discard(self.name)
        self.incarnation += 1
        self.scope = None
        self.mail_lot = ll.ParkingLot()
        self.sim.fault("restart", self.name, f"incarnation {self.incarnation}")
        self.sim.release_labels(self)
        self.start(nursery)

    def deliver(self, message: Message) -> None:
        self.mailbox.append(message)
        self.mail_lot.unpark()

    async def receive(self) -> Message:
        while not self.mailbox:
            await self.mail_lot.park()
        return self.mailbox.popleft()
