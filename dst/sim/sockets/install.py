"""trio's socket hooks, pointed at the simulated network for the length of a batch of runs.

``trio.socket.set_custom_socket_factory`` and ``set_custom_hostname_resolver`` are
consulted by ``trio.socket.socket``, ``getaddrinfo`` and ``getnameinfo``, and so
by ``open_tcp_stream``, ``serve_tcp``, ``open_tcp_listeners`` and anyio's trio
backend (httpx's transport).  trio keeps them in ``RunVar``s, one value per
``trio.run``, and dst runs many seeds in one ``trio.run``: the hooks are set once
for the whole batch (``dst.sim.run.run_sims``), and each call is routed to the run
in progress (``ACTIVE``) and, for a new socket, to the incarnation of the task
that opens it.  Nothing in the code under test is patched.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from ..active import ACTIVE
from ..process import _CURRENT
from ..trio_internals import RUN_CONTEXT as _RUN_CONTEXT
from .hosts import ANY, LOOPBACK, is_loopback, numeric, port_number
from .network import network, os_error
from .simsocket import SimSocket

if TYPE_CHECKING:
    from ..kernel import Sim

#: Batches of runs with the hooks installed now (``simulating``, for the guard).
_INSTALLED: list[object] = []


def simulating() -> bool:
    """Whether trio's sockets reach the simulated network now (the guard lets them)."""
    return bool(_INSTALLED)


def _sim() -> Sim:
    if not ACTIVE:
        raise RuntimeError("dst's simulated network was used outside a simulated run")
    return ACTIVE[-1]


class SimSocketFactory(trio.abc.SocketFactory):
    """``trio.socket.socket()`` inside a simulated run: a socket of the calling process."""

    def socket(self, family: socket.AddressFamily | int = socket.AF_INET,
               type: socket.SocketKind | int = socket.SOCK_STREAM,
               proto: int = 0) -> trio.socket.SocketType:
        if family != socket.AF_INET:
            raise os_error(errno.EAFNOSUPPORT, "Address family not supported by protocol "
                           "(dst simulates IPv4 only)")
        kind = int(type) & ~(getattr(socket, "SOCK_NONBLOCK", 0)
                             | getattr(socket, "SOCK_CLOEXEC", 0))
        if kind != socket.SOCK_STREAM:
            raise os_error(errno.ESOCKTNOSUPPORT, "Socket type not supported "
                           "(dst simulates TCP only)")
        sim = _sim()
        task = getattr(_RUN_CONTEXT, "task", None)
        inc = sim._incarnation_of.get(task) if task is not None else None
        if inc is None:
            inc = _CURRENT.get()  # a process's main task
        if inc is None or inc.process.sim is not sim:
            raise os_error(errno.EACCES, "a socket in a simulated run belongs to a "
                           "process: open it from the code of one (sim.process)")
        return SimSocket(network(sim), inc, socket.AF_INET, socket.SOCK_STREAM, proto)


class SimResolver(trio.abc.HostnameResolver):
    """``trio.socket.getaddrinfo`` and ``getnameinfo`` inside a simulated run.

    trio answers numeric hosts itself (``"10.0.0.2"``, ``"127.0.0.1"``, no host
    for a listener) and asks this for names: a process's name, ``localhost``, or
    ``socket.gaierror`` as a real resolver.  Only IPv4 entries are returned: a
    simulated host has one IPv4 address.
    """

    async def getaddrinfo(  # type: ignore[override]
        self,
        host: bytes | None,
        port: bytes | str | int | None,
        family: int = 0,
        type: int = 0,
        proto: int = 0,
        flags: int = 0,
    ) -> list[tuple[socket.AddressFamily, socket.SocketKind, int, str, tuple[str, int]]]:
        number = port_number(port)
        if host is None:
            address, name = (ANY if flags & socket.AI_PASSIVE else LOOPBACK), ""
        else:
            name = host.decode("ascii", "replace") if isinstance(host, bytes) else str(host)
            address = network(_sim()).hosts.resolve(name)
        if family not in (0, socket.AF_INET):
            code = getattr(socket, "EAI_ADDRFAMILY", socket.EAI_FAMILY)
            raise socket.gaierror(code, "Address family for hostname not supported")
        kind = socket.SOCK_DGRAM if type == socket.SOCK_DGRAM else socket.SOCK_STREAM
        proto_ = socket.IPPROTO_UDP if kind == socket.SOCK_DGRAM else socket.IPPROTO_TCP
        canon = name if flags & socket.AI_CANONNAME else ""
        return [(socket.AF_INET, kind, proto_, canon, (address, number))]

    async def getnameinfo(self, sockaddr: Any, flags: int) -> tuple[str, str]:
        address, port = str(sockaddr[0]), int(sockaddr[1])
        if flags & socket.NI_NUMERICHOST:
            return address, str(port)
        if is_loopback(address):
            return "localhost", str(port)
        found = network(_sim()).hosts.name_at(address)
        if found is None:
            if flags & socket.NI_NAMEREQD:
                raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
            found = address
        return found, str(port)


def numeric_lookups(real: Callable[..., Any]) -> Callable[..., Any]:
    """``socket.getaddrinfo`` as trio calls it itself, inside a simulated run.

    trio tries every lookup numeric-only first (``AI_NUMERICHOST``), in libc,
    before it asks its resolver: with the simulated network installed those
    lookups are answered here, the same on every machine (libc's answer for no
    host, IPv4 and IPv6 in an order of its configuration's, varies) and without
    libc's cost.  Anything else goes to ``real``.
    """

    def getaddrinfo(host: Any, port: Any, family: int = 0, type: int = 0, proto: int = 0,
                    flags: int = 0) -> Any:
        if not (_INSTALLED and ACTIVE and flags & socket.AI_NUMERICHOST):
            return real(host, port, family, type, proto, flags)
        number = port_number(port)
        if isinstance(host, bytes):
            host = host.decode("ascii", "replace")
        if host is None:
            address, v6 = (ANY if flags & socket.AI_PASSIVE else LOOPBACK), False
        elif numeric(host):
            address, v6 = host, False
        elif ":" in host:
            address, v6 = host, True
        else:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        wanted = socket.AF_INET6 if v6 else socket.AF_INET
        if family not in (0, wanted):
            code = getattr(socket, "EAI_ADDRFAMILY", socket.EAI_FAMILY)
            raise socket.gaierror(code, "Address family for hostname not supported")
        kind = socket.SOCK_DGRAM if type == socket.SOCK_DGRAM else socket.SOCK_STREAM
        proto_ = socket.IPPROTO_UDP if kind == socket.SOCK_DGRAM else socket.IPPROTO_TCP
        if v6:
            return [(socket.AF_INET6, kind, proto_, "", (address, number, 0, 0))]
        return [(socket.AF_INET, kind, proto_, "", (address, number))]

    return getaddrinfo


_FACTORY = SimSocketFactory()
_RESOLVER = SimResolver()


class Installed:
    """The hooks set for one ``trio.run`` (``install``); ``restore`` puts trio's back."""

    def __init__(self) -> None:
        self._factory = trio.socket.set_custom_socket_factory(_FACTORY)
        self._resolver = trio.socket.set_custom_hostname_resolver(_RESOLVER)
        _INSTALLED.append(self)

    def restore(self) -> None:
        if self in _INSTALLED:
            _INSTALLED.remove(self)
            trio.socket.set_custom_socket_factory(self._factory)
            trio.socket.set_custom_hostname_resolver(self._resolver)


def install() -> Installed:
    """Point trio's socket hooks at the simulated network (inside a ``trio.run``)."""
    return Installed()
