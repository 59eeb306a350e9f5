"""Real (non-simulated) clock, transport and services, and ``make_env``.

These are what the code under test gets outside a simulation: trio's clock,
in-process delivery over trio memory channels, and a registry of service
handlers.  They implement the protocols of :mod:`dst.env` and nothing more, so
code that runs here runs unchanged under ``dst.sim``.

Everything that crosses a process boundary (a message body, a service request
or reply) is copied through canonical JSON, as it would be by a real network:
the receiver never shares an object with the sender, and a non-JSON value
fails at the sender with a ``TypeError`` instead of somewhere downstream.
"""

from __future__ import annotations

import inspect
import json
import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping

import trio

from dst.env import Clock, Env, Json, Message, Services, Store, Transport
from dst.runtime.store import canonical_json

__all__ = ["Handler", "LocalNetwork", "LocalServices", "TrioClock", "WallClock", "make_env"]

Handler = Callable[[str, Json], Json | Awaitable[Json]]
"""A service handler: ``handler(op, request) -> reply``, plain or async (as in the
simulator, so the same fake serves both)."""


def _copy(value: Json, context: str) -> Json:
    """A deep copy of ``value`` through canonical JSON (validating it)."""
    copied: Json = json.loads(canonical_json(value, context))
    return copied


class TrioClock:
    """:class:`~dst.env.Clock` on trio's clock, counted from ``start``.

    ``start`` defaults to the trio time at construction, which therefore must
    happen inside ``trio.run``.  Processes that should agree on "time since
    the run started" can share one ``TrioClock`` or pass the same ``start``.
    """

    def __init__(self, start: float | None = None) -> None:
        if start is None:
            try:
                start = trio.current_time()
            except RuntimeError:
                raise RuntimeError(
                    "TrioClock() must be created inside trio.run (or be given start=)"
                ) from None
        self.start = start

    def now(self) -> float:
        return trio.current_time() - self.start

    async def sleep(self, seconds: float) -> None:
        await trio.sleep(seconds)


class WallClock:
    """:class:`~dst.env.Clock` on the wall clock: seconds since a fixed ``epoch``.

    A :class:`TrioClock` starts at zero in every process, so an absolute
    deadline written to a store by one process means nothing to the process
    that restarts after it.  This clock reads ``time.time()`` (seconds since the
    Unix epoch, minus ``epoch``, default 0), which every incarnation of a
    process (and every process on a host) agrees on: a durable wait that logged
    "until 1,700,000,300" ends then, however many restarts happen before.
    ``sleep`` runs on trio's clock, which is monotonic; a step of the wall
    clock (NTP, a manual change) moves deadlines by that step.  Real runs only:
    a simulation reads its virtual clock, never this one.
    """

    def __init__(self, epoch: float = 0.0) -> None:
        self.epoch = epoch

    def now(self) -> float:
        return time.time() - self.epoch

    async def sleep(self, seconds: float) -> None:
        await trio.sleep(seconds)


class _Mailbox:
    def __init__(self, buffer: float) -> None:
        self.send, self.recv = trio.open_memory_channel[Message](buffer)


class _Endpoint:
    """One process's :class:`~dst.env.Transport` on a :class:`LocalNetwork`."""

    def __init__(self, network: LocalNetwork, name: str) -> None:
        self._network = network
        self.name = name

    async def send(self, dest: str, body: Json) -> None:
        await self._network.deliver(self.name, dest, body)

    async def recv(self) -> Message:
        return await self._network.mailbox(self.name).recv.receive()

    def __repr__(self) -> str:
        return f"<LocalNetwork endpoint {self.name!r}>"


class LocalNetwork:
    """An in-process network between named processes, on trio memory channels.

    Each name has a mailbox, created the first time anyone uses the name
    (``endpoint(name)`` or a ``send`` to it), so a message sent before its
    receiver starts waits for it, and a process that restarts and asks for its
    endpoint again finds the messages still in flight.  Delivery is reliable
    and FIFO per sender; the simulated transport is where loss, duplication
    and reordering are explored.

    ``buffer`` is each mailbox's capacity.  The default (unbounded) means
    ``send`` never blocks, as with a real network; two processes that send to
    each other before receiving cannot deadlock.
    """

    def __init__(self, *, buffer: float = math.inf) -> None:
        self._buffer = buffer
        self._mailboxes: dict[str, _Mailbox] = {}

    def mailbox(self, name: str) -> _Mailbox:
        box = self._mailboxes.get(name)
        if box is None:
            box = self._mailboxes[name] = _Mailbox(self._buffer)
        return box

    def endpoint(self, name: str) -> Transport:
        """The transport through which process ``name`` sends and receives."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"process names are non-empty str, got {name!r}")
        self.mailbox(name)
        return _Endpoint(self, name)

    async def deliver(self, source: str, dest: str, body: Json) -> None:
        """Put a copy of ``body`` in ``dest``'s mailbox, from ``source``."""
        if not isinstance(dest, str) or not dest:
            raise ValueError(
                f"{source!r} sent to {dest!r}: destinations are non-empty str"
            )
        msg = Message(source, _copy(body, f"message from {source!r} to {dest!r}"))
        await self.mailbox(dest).send.send(msg)

    def names(self) -> list[str]:
        """Every name that has a mailbox, sorted."""
        return sorted(self._mailboxes)


class LocalServices:
    """:class:`~dst.env.Services` as a registry of in-process handlers.

    A handler may raise :class:`~dst.env.ServiceUnavailable` to play a peer
    that is down; any other exception propagates to the caller unchanged.
    Requests and replies are copied through JSON so that the handler and the
    caller never share an object.
    """

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}

    def register(self, service: str, handler: Handler) -> None:
        """Route calls to ``service`` to ``handler``; a name is registered once."""
        if service in self._handlers:
            raise ValueError(f"service {service!r} is already registered")
        self._handlers[service] = handler

    async def call(self, service: str, op: str, request: Json) -> Json:
        handler = self._handlers.get(service)
        if handler is None:
            known = ", ".join(repr(s) for s in sorted(self._handlers)) or "none"
            raise LookupError(
                f"no service {service!r} is registered (registered: {known}); "
                "call LocalServices.register first"
            )
        where = f"service {service!r} op {op!r}"
        reply = handler(op, _copy(request, f"request to {where}"))
        if inspect.isawaitable(reply):
            reply = await reply
        return _copy(reply, f"reply from {where}")

    def services(self) -> list[str]:
        """The registered service names, sorted."""
        return sorted(self._handlers)


def make_env(
    name: str,
    *,
    stores: Mapping[str, Store],
    network: LocalNetwork,
    services: Services,
    seed: int | None,
    clock: Clock | None = None,
) -> Env:
    """The :class:`~dst.env.Env` of real process ``name``.

    ``seed`` seeds the process's ``random.Random`` as given (``None``: from
    the OS), so give each process its own seed unless they should draw the
    same numbers.  ``clock`` defaults to a new :class:`TrioClock`, which means
    ``make_env`` must then be called inside ``trio.run``.
    """
    return Env(
        name=name,
        clock=clock if clock is not None else TrioClock(),
        net=network.endpoint(name),
        services=services,
        rng=random.Random(seed),
        stores=dict(stores),
    )
