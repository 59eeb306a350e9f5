"""The ``env`` of an asyncio process, and the trio program that runs its ``main``.

``env.store``, ``env.net`` and ``env.services`` of an asyncio process make
each call through the loop (``SimLoop.env_call``), and ``env.clock.sleep`` is
``asyncio.sleep``; called from trio code (a test's), they are the trio calls
themselves.  :func:`asyncio_main` is the process's trio program: it makes the
loop and drives it.
"""

from __future__ import annotations

import asyncio
from asyncio import events
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from ...env import Env, Json, Message
from ..env import SimServices, SimStoreHandle, SimTransport
from ..process import _CURRENT, Incarnation
from .loop import SimLoop

if TYPE_CHECKING:
    from ..kernel import Sim

_running_loop = events._get_running_loop


def asyncio_main(main: Callable[[Env], Awaitable[object]]) -> Callable[[Env], Awaitable[object]]:
    """The trio program of an asyncio process whose asyncio program is ``main(env)``."""

    async def run_asyncio(env: Env) -> object:
        inc = _CURRENT.get()
        assert inc is not None, "an asyncio process runs as a process of a simulated run"
        sim = inc.sim
        aenv = _asyncio_env(sim, inc, env)
        # The bridges are started in the run's nursery, not one of the process's own:
        # closing a nursery is a checkpoint, which a trio process's end does not take.
        assert sim._nursery is not None
        loop = SimLoop(sim, inc, sim._nursery)
        try:
            return await loop._drive(main, aenv)
        finally:
            loop._retire()

    run_asyncio.__qualname__ = run_asyncio.__name__ = getattr(main, "__name__", "main")
    return run_asyncio


class AioStoreHandle(SimStoreHandle):
    """``env.store`` in an asyncio process: each call a bridge to the trio call."""

    __slots__ = ()

    def _call(self, op: str, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        loop = _running_loop()
        if type(loop) is not SimLoop:
            return fn(self, *args)  # from trio code: the trio call itself
        return loop.env_call(self._proc, f"{self._name}.{op}", fn, (self, *args), True)

    async def get(self, key: str) -> Json:
        return await self._call(f"get({key})", SimStoreHandle.get, key)  # type: ignore[no-any-return]

    async def put(self, key: str, value: Json) -> None:
        await self._call(f"put({key})", SimStoreHandle.put, key, value)

    async def cas(self, key: str, expected: Json, new: Json) -> bool:
        return await self._call(f"cas({key})", SimStoreHandle.cas, key, expected, new)  # type: ignore[no-any-return]

    async def delete(self, key: str) -> None:
        await self._call(f"delete({key})", SimStoreHandle.delete, key)

    async def scan(self, prefix: str) -> list[tuple[str, Json]]:
        return await self._call(f"scan({prefix})", SimStoreHandle.scan, prefix)  # type: ignore[no-any-return]


class AioTransport(SimTransport):
    """``env.net`` in an asyncio process."""

    __slots__ = ()

    async def send(self, dest: str, body: Json) -> None:
        loop = _running_loop()
        if type(loop) is not SimLoop:
            return await SimTransport.send(self, dest, body)
        await loop.env_call(self._proc, f"send({dest})", SimTransport.send, (self, dest, body))

    async def recv(self) -> Message:
        loop = _running_loop()
        if type(loop) is not SimLoop:
            return await SimTransport.recv(self)
        return await loop.env_call(  # type: ignore[no-any-return]
            self._proc, "recv", SimTransport.recv, (self,))


class AioServices(SimServices):
    """``env.services`` in an asyncio process."""

    __slots__ = ()

    async def call(self, service: str, op: str, request: Json) -> Json:
        loop = _running_loop()
        if type(loop) is not SimLoop:
            return await SimServices.call(self, service, op, request)
        return await loop.env_call(  # type: ignore[no-any-return]
            self._proc, f"call:{service}.{op}", SimServices.call, (self, service, op, request))


class AioClock:
    """``env.clock`` in an asyncio process: virtual time; ``sleep`` is asyncio's."""

    def now(self) -> float:
        return trio.current_time()

    async def sleep(self, seconds: float) -> None:
        loop = _running_loop()
        if type(loop) is not SimLoop:
            await trio.sleep(seconds)
            return
        await asyncio.sleep(seconds)


_AIO_CLOCK = AioClock()


#: The code of the ``env`` methods of an asyncio process (see ``SimLoop.create_task``).
_ENV_CODES = frozenset(
    getattr(cls, name).__code__
    for cls, names in ((AioStoreHandle, ("get", "put", "cas", "delete", "scan")),
                       (AioTransport, ("send", "recv")), (AioServices, ("call",)),
                       (AioClock, ("sleep",)))
    for name in names)


def _asyncio_env(sim: Sim, inc: Incarnation, env: Env) -> Env:
    stores = {name: AioStoreHandle(sim, sim.stores[name], inc) for name in env.stores}
    aenv = Env(env.name, _AIO_CLOCK, AioTransport(sim, inc), AioServices(sim, inc), env.rng,
               stores)
    sim._envs.append(aenv)
    return aenv
