"""The standard library's socket, as an installed library opens a listener with it in a run.

hypercorn's ``serve()`` makes its listening sockets with the standard library
(``socket.socket(AF_INET, SOCK_STREAM)``, ``setsockopt``, ``bind``,
``setblocking``, then ``listen``), beneath trio's hooks, and hands them to trio
with ``trio.socket.from_stdlib_socket``.  The guard traps ``socket.socket``'s
``__init__`` in a run anyway; when an installed library (not the user's code)
inside a process makes an IPv4 TCP socket while the simulated network is
installed, the trap calls :func:`stand_in` instead of the real ``__init__``.  No
descriptor is opened: the object (a ``socket.socket`` whose descriptor is -1, as
``__new__`` left it) becomes a :class:`StdlibSocket`, a subclass with the same
layout, tied to a :class:`~dst.sim.sockets.simsocket.SimSocket` of the calling
process.  What a listener is set up with acts on that simulated socket
(``setsockopt``, ``getsockopt``, ``bind``, ``listen``, ``getsockname``,
``close``, ``setblocking``/``settimeout``, ``family``, ``type``), and
``trio.socket.from_stdlib_socket`` of it is that simulated socket, which trio's
``SocketListener`` accepts on.  Every other method (``connect``, ``send``,
``recv``, ``accept``, ``fileno``, ``detach``, ``makefile``...) is refused as a
``Nondeterminism`` finding: it would be I/O on the standard library's socket,
which dst does not simulate.

Why here and not in ``socket.socket`` itself: swapping the standard library's
class for the run would reach every library and the user's code alike; the trap
answers only the calls it judges, and only the object it answered changes class.
"""

from __future__ import annotations

import socket
import sys
import weakref
from typing import Any

from .install import SimSocketFactory, simulating
from .simsocket import SimSocket

_FLAGS = getattr(socket, "SOCK_NONBLOCK", 0) | getattr(socket, "SOCK_CLOEXEC", 0)
_FACTORY = SimSocketFactory()


class _State:
    __slots__ = ("sim", "timeout")

    def __init__(self, sim: SimSocket) -> None:
        self.sim = sim
        self.timeout: float | None = None


#: The simulated socket behind each stand-in (a ``StdlibSocket`` has no room of its own:
#: its layout must be ``socket.socket``'s for the ``__class__`` assignment).
_STATES: weakref.WeakKeyDictionary[StdlibSocket, _State] = weakref.WeakKeyDictionary()


def _state(sock: StdlibSocket) -> _State:
    return _STATES[sock]


def wanted(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether ``socket.socket.__init__(self, family, type, proto, fileno)`` asks for what
    dst simulates: a new IPv4 TCP socket (no descriptor), with the network installed."""
    def arg(index: int, name: str, default: Any) -> Any:
        return args[index] if len(args) > index else kwargs.get(name, default)

    if arg(4, "fileno", None) is not None or not simulating():
        return False
    family, kind, proto = arg(1, "family", -1), arg(2, "type", -1), arg(3, "proto", -1)
    return (family in (-1, socket.AF_INET)
            and (kind == -1 or (int(kind) & ~_FLAGS) == socket.SOCK_STREAM)
            and proto in (-1, 0, socket.IPPROTO_TCP))


def stand_in(sock: socket.socket, family: int = -1, type: int = -1, proto: int = -1,
             fileno: int | None = None) -> None:
    """``socket.socket.__init__`` for a library's listener in a run (see ``wanted``)."""
    sim = _FACTORY.socket(socket.AF_INET, socket.SOCK_STREAM, 0 if proto == -1 else proto)
    assert isinstance(sim, SimSocket)
    sock._io_refs = 0  # type: ignore[attr-defined]  # what socket.__init__ sets
    sock._closed = False  # type: ignore[attr-defined]
    sock.__class__ = StdlibSocket
    _STATES[sock] = _State(sim)  # type: ignore[index]


def simulated(sock: object) -> SimSocket | None:
    """The simulated socket a stand-in stands for (``from_stdlib_socket``), or None."""
    if type(sock) is not StdlibSocket:
        return None
    state = _STATES.get(sock)
    return state.sim if state is not None else None


def adopting(original: Any) -> Any:
    """``trio.socket.from_stdlib_socket`` that answers a stand-in with its simulated socket."""
    def from_stdlib_socket(sock: Any) -> Any:
        found = simulated(sock)
        return found if found is not None else original(sock)

    return from_stdlib_socket


def _refused(name: str) -> Any:
    def method(self: StdlibSocket, *args: Any, **kwargs: Any) -> Any:
        from ..guard import refuse

        refuse(f"socket.socket.{name}() on a library's simulated listener",
               "trio.socket.from_stdlib_socket(sock) and trio's socket methods "
               "(dst simulates a standard-library socket as a listener only)",
               sys._getframe(1))

    method.__name__ = name
    return method


class StdlibSocket(socket.socket):
    """A library's ``socket.socket`` inside a run: a listener's set-up on a simulated socket."""

    __slots__ = ()

    @property
    def family(self) -> socket.AddressFamily:
        return _state(self).sim.family

    @property
    def type(self) -> socket.SocketKind:
        return _state(self).sim.type

    @property
    def proto(self) -> int:
        return _state(self).sim.proto

    @property
    def timeout(self) -> float | None:
        return _state(self).timeout

    def __repr__(self) -> str:
        return f"<dst stand-in for socket.socket: {_state(self).sim!r}>"

    def setsockopt(self, *args: Any) -> None:
        _state(self).sim.setsockopt(*args)

    def getsockopt(self, *args: Any) -> Any:
        return _state(self).sim.getsockopt(*args)

    def bind(self, address: Any, /) -> None:
        _state(self).sim.bind_now(address)

    def listen(self, backlog: int = 128, /) -> None:
        _state(self).sim.listen(backlog)

    def getsockname(self) -> Any:
        return _state(self).sim.getsockname()

    def getpeername(self) -> Any:
        return _state(self).sim.getpeername()

    def shutdown(self, how: int, /) -> None:
        _state(self).sim.shutdown(how)

    def close(self) -> None:
        self._closed = True
        state = _STATES.get(self)
        if state is not None:
            state.sim.close()

    def setblocking(self, flag: bool, /) -> None:
        _state(self).timeout = None if flag else 0.0

    def getblocking(self) -> bool:
        return _state(self).timeout != 0.0

    def settimeout(self, value: float | None, /) -> None:
        _state(self).timeout = value

    def gettimeout(self) -> float | None:
        return _state(self).timeout

    def get_inheritable(self) -> bool:
        return False

    def set_inheritable(self, inheritable: bool) -> None:
        pass


#: Everything else a socket does is refused, not left to the C methods (a descriptor of -1).
for _name in sorted(set(dir(socket.socket)) - set(vars(StdlibSocket)) - set(dir(object))):
    if (not _name.startswith("_") or _name in ("_accept", "_real_close")) \
            and callable(getattr(socket.socket, _name)):
        setattr(StdlibSocket, _name, _refused(_name))
