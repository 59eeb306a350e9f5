"""The simulated side of ``dst.env``: each call parks at a choice point first."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

import trio
import trio.lowlevel as ll

from ..env import Json, Message, ServiceUnavailable
from . import trio_internals
from .active import ACTIVE
from .trio_internals import RUN_CONTEXT as _RUN_CONTEXT
from .values import json_copy

_INF = float("inf")

if TYPE_CHECKING:
    from .kernel import Sim
    from .process import Incarnation
    from .store import SimStore


class SimClock:
    """Virtual time; when a sleep ends is the timer decision the scheduler makes."""

    def now(self) -> float:
        return trio.current_time()

    async def sleep(self, seconds: float) -> None:
        if ACTIVE and seconds > 0:
            now = trio.current_time()
            wake_at = now + seconds
            if now < wake_at < _INF:
                await ACTIVE[-1].sleep_until(wake_at)
                return
        # Zero, negative, NaN, for ever, too short to move the clock: trio's own
        # sleep says what each means (a checkpoint, an error, a wait for ever).
        await trio.sleep(seconds)


class SimStoreHandle:
    """One incarnation's connection to a durable store (dead with it)."""

    __slots__ = ("_name", "_proc", "_sim", "_store")

    def __init__(self, sim: Sim, store: SimStore, proc: Incarnation) -> None:
        self._sim, self._store, self._proc = sim, store, proc
        self._name = store.name

    async def get(self, key: str) -> Json:
        await self._sim.enter(self._proc, f"{self._name}.get({key})")
        return self._store.get(key)  # type: ignore[no-any-return]

    async def put(self, key: str, value: Json) -> None:
        await self._sim.enter(self._proc, f"{self._name}.put({key})")
        self._store.put(key, value)

    async def cas(self, key: str, expected: Json, new: Json) -> bool:
        await self._sim.enter(self._proc, f"{self._name}.cas({key})")
        return self._store.cas(key, expected, new)

    async def delete(self, key: str) -> None:
        await self._sim.enter(self._proc, f"{self._name}.delete({key})")
        self._store.delete(key)

    async def scan(self, prefix: str) -> list[tuple[str, Json]]:
        await self._sim.enter(self._proc, f"{self._name}.scan({prefix})")
        return self._store.scan(prefix)


class SimTransport:
    __slots__ = ("_proc", "_sim")

    def __init__(self, sim: Sim, proc: Incarnation) -> None:
        self._sim, self._proc = sim, proc

    async def send(self, dest: str, body: Json) -> None:
        await self._sim.enter(self._proc, f"send({dest})")
        self._sim.net.post(self._proc.name, dest, body)

    async def recv(self) -> Message:
        proc = self._proc
        if proc.state != "running":
            await self._sim.refuse(proc, "recv")  # raises
        # ``proc.receive()``, inlined: one coroutine less per message received, and
        # this frame stays the one a task waiting for mail waits in (``liveness``).
        if not proc.mailbox:
            # ``ParkingLot.park``, inlined: wait in the lot until a delivery wakes
            # this task, or a cancellation takes it out of the lot.
            lot = proc.mail_lot
            task = _RUN_CONTEXT.task

            def abort(_: object) -> ll.Abort:
                del lot[task]
                return ll.Abort.SUCCEEDED

            while not proc.mailbox:  # another receiver may have taken the message
                lot[task] = None
                await trio_internals.park(abort)
        return proc.mailbox.popleft()


class SimServices:
    __slots__ = ("_proc", "_sim")

    #: Replies of these exact types are not awaitable: no need to ask ``inspect``
    #: (whose ``isawaitable`` costs more than the rest of a plain reply's checks).
    _PLAIN = frozenset((dict, list, str, int, float, bool, type(None)))

    def __init__(self, sim: Sim, proc: Incarnation) -> None:
        self._sim, self._proc = sim, proc

    async def call(self, service: str, op: str, request: Json) -> Json:
        sim = self._sim
        handler = sim.services.get(service)
        if handler is None:
            known = ", ".join(sorted(sim.services)) or "none"
            raise LookupError(
                f"no service {service!r} in this scenario (registered: {known}); "
                "register it with sim.service(name, handler)"
            )
        fault = await sim.call_service(self._proc, service, op)
        frozen = json_copy(request)
        if fault == "fail":
            sim.fault("service", service, f"{op} failed before its effect")
            raise ServiceUnavailable(f"{service}.{op}: no reply (the service is unavailable)")
        reply = handler(op, frozen)
        if type(reply) not in self._PLAIN and inspect.isawaitable(reply):
            reply = await reply
        if fault is not None:
            if fault == "lose_reply":
                sim.fault("service", service, f"{op} took effect; its reply was lost")
                raise ServiceUnavailable(f"{service}.{op}: no reply (the reply was lost)")
            if fault == "repeat":
                sim.fault("service", service, f"{op} executed twice")
                reply = handler(op, json_copy(request))
                if type(reply) not in self._PLAIN and inspect.isawaitable(reply):
                    reply = await reply
            elif fault == "delay":
                seconds = sim.faults.services[service].delay_seconds
                sim.fault("service", service, f"{op} took effect; its reply is {seconds:g}s late")
                await trio.sleep(seconds)
        return json_copy(reply)  # type: ignore[no-any-return]


def sever(env: object) -> None:
    """Cut a finished run's ``Env`` off from its ``Sim``.

    Code under test often keeps its ``Env`` in objects that refer to each
    other (an orchestrator and its agent); such a cycle would otherwise hold the
    whole run (its records, stores and world) until the cyclic collector runs.
    """
    for handle in (env.net, env.services, *env.stores.values()):  # type: ignore[attr-defined]
        if isinstance(handle, (SimStoreHandle, SimTransport, SimServices)):
            handle._sim = None  # type: ignore[assignment]
