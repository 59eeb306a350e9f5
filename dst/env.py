"""The contract between the code under test and the world it runs in.

Code under test (``dst.runtime``, ``dst.agents``) reaches the outside world only
through an :class:`Env`: a clock, durable stores, a transport, a seeded random
generator and outside services (tools, LLMs, suppliers).  ``dst.sim`` provides
simulated implementations in which every call is a *choice point* controlled by
the scheduler; ``dst.runtime`` provides real ones (trio's clock, SQLite, memory
channels).  Neither half imports the other: both import this module.

Values that cross the boundary are JSON-compatible (``Json``), because a durable
store must not alias the volatile memory of the process that wrote it (a crash
must lose that memory and keep the store), and because everything that crosses
is written to the trace.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, Union

#: JSON-compatible values (a recursive alias: ``Union`` because ``|`` cannot take strings).
Json = Union[None, bool, int, float, str, list["Json"], dict[str, "Json"]]  # noqa: UP007


class Clock(Protocol):
    """Time as the code under test sees it (virtual in a simulation)."""

    def now(self) -> float:
        """Seconds since the run (or the real process) started."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds``; a simulation fires the timer as a recorded choice."""
        ...


class Store(Protocol):
    """A durable key-value store: what survives a crash.

    Keys are strings; values are ``Json``.  ``cas`` is the one atomic
    read-modify-write primitive: it writes ``new`` only if the stored value equals
    ``expected`` (``None`` meaning "absent") and says whether it did.
    """

    async def get(self, key: str) -> Json: ...

    async def put(self, key: str, value: Json) -> None: ...

    async def cas(self, key: str, expected: Json, new: Json) -> bool: ...

    async def delete(self, key: str) -> None: ...

    async def scan(self, prefix: str) -> list[tuple[str, Json]]:
        """Every ``(key, value)`` whose key starts with ``prefix``, sorted by key."""
        ...


@dataclass(frozen=True)
class Message:
    """A message as received: who sent it and what it says."""

    source: str
    body: Json


class Transport(Protocol):
    """Messages between named processes; a simulation may drop, duplicate or reorder them."""

    async def send(self, dest: str, body: Json) -> None: ...

    async def recv(self) -> Message:
        """The next message delivered to this process (blocks until one arrives)."""
        ...


class Services(Protocol):
    """Calls to the world outside the system: tools, LLMs, suppliers, backends.

    ``service`` names the peer, ``op`` the operation; the reply is ``Json``.  A
    call may raise :class:`ServiceUnavailable` (the peer is down or the reply was
    lost); whether the effect happened is then unknown to the caller, exactly as
    in production.
    """

    async def call(self, service: str, op: str, request: Json) -> Json: ...


class ServiceUnavailable(Exception):
    """A service call failed without a reply; the effect may or may not have happened."""


@dataclass
class Env:
    """Everything one process may touch outside its own memory.

    ``stores`` maps a store name to the durable store the process is connected
    to; ``store`` is the one named ``"main"`` (or the only one).
    """

    name: str
    clock: Clock
    net: Transport
    services: Services
    rng: random.Random
    stores: Mapping[str, Store] = field(default_factory=dict)

    @property
    def store(self) -> Store:
        if "main" in self.stores:
            return self.stores["main"]
        if len(self.stores) == 1:
            return next(iter(self.stores.values()))
        raise LookupError(
            f"process {self.name!r} has stores {sorted(self.stores)}; "
            "name one with env.stores[name] or call one 'main'"
        )
