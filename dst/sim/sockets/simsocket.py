"""A simulated TCP socket: trio's ``SocketType`` over the run's network.

It implements what trio's ``SocketStream``/``SocketListener``, ``open_tcp_stream``,
``open_tcp_listeners`` and anyio's trio backend (httpx's transport) call, with
the errors a real Linux socket gives.  Options are kept and read back
(``TCP_NODELAY``, ``SO_REUSEADDR``... change nothing); ``SO_ACCEPTCONN``,
``SO_TYPE``, ``SO_DOMAIN`` and ``SO_ERROR`` answer as a real socket's would.
``fileno()`` is a number no real descriptor has (see ``network.FD_BASE``), -1
once closed.
"""

from __future__ import annotations

import builtins
import errno
import os
import socket as _socket
from collections import deque
from types import TracebackType
from typing import TYPE_CHECKING, Any, overload

import trio
import trio.lowlevel as ll

from ..process import RUNNING
from ..trio_internals import RUN_CONTEXT as _RUN_CONTEXT
from .hosts import ANY, LOOPBACK, is_loopback, numeric
from .network import SocketNetwork, os_error

if TYPE_CHECKING:
    from typing import Self

    from typing_extensions import Buffer

    from ..process import Incarnation

_CLOSED_BY_ANOTHER = "another task closed this socket"
_INET, _STREAM = _socket.AddressFamily.AF_INET, _socket.SocketKind.SOCK_STREAM


def _host_port(address: Any) -> tuple[str, int]:
    if not isinstance(address, tuple) or len(address) != 2:
        raise TypeError(f"AF_INET address must be a pair (host, port), not {address!r}")
    host, port = address
    if isinstance(host, bytes):
        host = host.decode("ascii")
    if not isinstance(host, str) or not isinstance(port, int) or isinstance(port, bool):
        raise TypeError(f"AF_INET address must be (str, int), not {address!r}")
    if not 0 <= port <= 65535:
        raise OverflowError("connect(): port must be 0-65535.")
    return host, port


class SimSocket(trio.socket.SocketType):
    """One simulated socket, owned by the incarnation that opened it (or accepted it)."""

    def __init__(self, net: SocketNetwork, owner: Incarnation,
                 family: int = _socket.AF_INET, type: int = _socket.SOCK_STREAM,
                 proto: int = 0) -> None:
        super().__init__()
        self._net = net
        self._owner = owner
        self._host = owner.name
        self._family = _INET if family == _INET else _socket.AddressFamily(family)
        self._type = _STREAM if type == _STREAM else _socket.SocketKind(type)
        self._proto = proto
        self._closed = False
        self._listening = False
        self._local: tuple[str, int] | None = None
        self._remote: tuple[str, int] | None = None
        self._peer: SimSocket | None = None
        #: The connection's name in labels and faults (``c1``), and who is at the other end.
        self._cid = ""
        self._send_label = ""
        self._recv_label = ""
        #: Received and not yet read; then the peer's FIN, or an error to report once.
        self._buf = bytearray()
        self._fin = False
        self._err = 0
        #: Torn down (an error was reported, or a reset came after the FIN): sends fail.
        self._broken = False
        self._wr_shut = False
        self._rd_shut = False
        self._waiters: dict[ll.Task, None] = {}
        #: Outgoing segments held back by a delay fault: (arrival time, bytes or FIN).
        self._transit: deque[tuple[float, bytes | None]] = deque()
        #: Connections made to this listener and not yet accepted.
        self._backlog: deque[SimSocket] = deque()
        self._options: dict[tuple[int, int], Any] = {}
        self._fd = net.adopt(self)

    # -- what it is ----------------------------------------------------------------

    @property
    def family(self) -> _socket.AddressFamily:
        return self._family

    @property
    def type(self) -> _socket.SocketKind:
        return self._type

    @property
    def proto(self) -> int:
        return self._proto

    @property
    def did_shutdown_SHUT_WR(self) -> bool:
        return self._wr_shut

    @property
    def _port(self) -> int:
        return self._local[1] if self._local is not None else 0

    @property
    def _sock(self) -> RawView:
        """What anyio's trio backend reads as the "raw socket" (its ``raw_socket``,
        ``local_address``... attributes; httpcore polls it to see whether an idle
        keep-alive connection was closed)."""
        return RawView(self)

    def fileno(self) -> int:
        return -1 if self._closed else self._fd

    def __repr__(self) -> str:
        where = f" laddr={self._local}" if self._local is not None else ""
        if self._remote is not None:
            where += f" raddr={self._remote}"
        return (f"<dst simulated socket fd={self.fileno()} host={self._host}{where}"
                f"{' listening' if self._listening else ''}>")

    def getsockname(self) -> tuple[str, int]:
        self._check_open()
        return self._local if self._local is not None else (ANY, 0)

    def getpeername(self) -> tuple[str, int]:
        self._check_open()
        if self._remote is None:
            raise os_error(errno.ENOTCONN)
        return self._remote

    @overload
    def getsockopt(self, level: int, optname: int) -> int: ...

    @overload
    def getsockopt(self, level: int, optname: int, buflen: int) -> bytes: ...

    def getsockopt(self, level: int, optname: int, buflen: int | None = None) -> int | bytes:
        self._check_open()
        value: Any
        if level == _socket.SOL_SOCKET and optname == _socket.SO_ACCEPTCONN:
            value = int(self._listening)
        elif level == _socket.SOL_SOCKET and optname == _socket.SO_TYPE:
            value = int(self._type)
        elif level == _socket.SOL_SOCKET and optname == getattr(_socket, "SO_DOMAIN", -1):
            value = int(self._family)
        elif level == _socket.SOL_SOCKET and optname == _socket.SO_ERROR:
            value = 0
        else:
            value = self._options.get((level, optname), 0)
        if buflen is None:
            return int.from_bytes(value, "little") if isinstance(value, bytes) else int(value)
        if isinstance(value, bytes):
            return value[:buflen]
        return int(value).to_bytes(4, "little")[:buflen]

    @overload
    def setsockopt(self, level: int, optname: int, value: int | Buffer) -> None: ...

    @overload
    def setsockopt(self, level: int, optname: int, value: None, optlen: int) -> None: ...

    def setsockopt(self, level: int, optname: int, value: int | Buffer | None,
                   optlen: int | None = None) -> None:
        """Kept, to be read back; no option changes what the simulated network does."""
        self._check_open()
        self._options[(level, optname)] = (
            value if value is None or isinstance(value, int) else bytes(value))

    def get_inheritable(self) -> bool:
        return False

    def set_inheritable(self, inheritable: bool) -> None:
        pass

    def detach(self) -> int:
        raise os_error(errno.EOPNOTSUPP, "a simulated socket has no descriptor to detach")

    def dup(self) -> SimSocket:
        raise os_error(errno.EOPNOTSUPP, "a simulated socket cannot be duplicated")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: builtins.type[BaseException] | None,
                 exc_value: BaseException | None, traceback: TracebackType | None) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise os_error(errno.EBADF)

    def readable(self) -> bool:
        """Whether a ``recv`` (or ``accept``) would find something now."""
        if self._listening:
            return bool(self._backlog) or self._closed
        return bool(self._buf or self._fin or self._err or self._broken or self._rd_shut
                    or self._closed)

    def is_readable(self) -> bool:
        return self.readable()

    async def wait_writable(self) -> None:
        await ll.checkpoint()  # the simulated send buffer is never full

    # -- addresses -----------------------------------------------------------------

    def _interface(self, host: str) -> str:
        """The local interface ``host`` names for a bind: every one, loopback, or this host's."""
        if host in ("", ANY):
            return ANY
        net = self._net
        address = host if numeric(host) else net.hosts.resolve(host)
        if is_loopback(address):
            return LOOPBACK
        if address == net.hosts.address_of(self._host):
            return address
        raise os_error(errno.EADDRNOTAVAIL)

    async def bind(self, address: Any) -> None:
        host, port = _host_port(address)
        await ll.checkpoint()
        self.bind_now((host, port))

    def bind_now(self, address: Any) -> None:
        """``bind`` at once, as the standard library's socket does (``dst.sim.sockets.stdlib``)."""
        host, port = _host_port(address)
        self._check_open()
        if self._local is not None:
            raise os_error(errno.EINVAL)
        interface = self._interface(host)
        self._net.hold_port(self, interface, port or self._net.ephemeral(self._host))

    def listen(self, backlog: int = 128) -> None:
        self._check_open()
        if self._peer is not None:
            raise os_error(errno.EINVAL)
        if self._listening:
            return
        if self._local is None:
            self._net.hold_port(self, ANY, self._net.ephemeral(self._host))
        assert self._local is not None
        self._listening = True
        self._net.listeners.setdefault((self._host, self._local[1]), []).append(self)

    # -- connecting ----------------------------------------------------------------

    async def connect(self, address: Any) -> None:
        net = self._net
        host, port = _host_port(address)
        self._check_open()
        if self._peer is not None:
            raise os_error(errno.EISCONN)
        if self._listening:
            raise os_error(errno.EINVAL)
        target = net.hosts.resolve(host)
        if is_loopback(target):
            dest, local = self._host, LOOPBACK
            target = LOOPBACK
        else:
            found = net.hosts.name_at(target)
            if found is None:
                raise os_error(errno.ENETUNREACH)
            dest, local = found, net.hosts.address_of(self._host) or ANY
        if self._local is None:
            net.hold_port(self, local, net.ephemeral(self._host))
        try:
            await net.sim.enter(self._owner, f"tcp.connect({dest}:{port})")
        except trio.Cancelled:
            self.close()  # as trio does: a connect cannot be taken back
            raise
        if self._closed:
            raise trio.ClosedResourceError(_CLOSED_BY_ANOTHER)
        await net.reach(self._host, dest, address)
        listener = net.find_listener(dest, target, port)
        if listener is None or listener._owner.state is not RUNNING or self._closed:
            raise os_error(errno.ECONNREFUSED, f"Error connecting to {address!r}: "
                           f"{os.strerror(errno.ECONNREFUSED)}")
        server = SimSocket(net, listener._owner, self._family, self._type, self._proto)
        assert self._local is not None
        server._local = (target, port)
        self._remote = (target, port)
        server._remote = self._local
        cid = net.next_connection()
        self._link(server, cid, f"{dest}:{port}")
        server._link(self, cid, f"{self._host}:{self._local[1]}")
        listener._backlog.append(server)
        net.wake(listener)

    def _link(self, peer: SimSocket, cid: str, far: str) -> None:
        self._peer = peer
        self._cid = cid
        self._send_label = f"tcp.send({cid} {far}, "
        self._recv_label = f"tcp.recv({cid} {far})"

    async def accept(self) -> tuple[SimSocket, tuple[str, int]]:
        net = self._net
        self._check_open()
        if not self._listening:
            raise os_error(errno.EINVAL)
        while True:
            if not self._backlog:
                await net.wait(self)
            elif not self._closed:
                await net.sim.enter(self._owner, f"tcp.accept({self._port})")
                if self._backlog and not self._closed:
                    sock = self._backlog.popleft()
                    assert sock._remote is not None
                    return sock, sock._remote
            if self._closed:
                raise trio.ClosedResourceError(_CLOSED_BY_ANOTHER)

    # -- bytes -----------------------------------------------------------------------

    async def send(self, data: Buffer, flags: int = 0, /) -> int:
        net = self._net
        self._check_open()
        if self._peer is None:
            raise os_error(errno.EPIPE)
        payload = bytes(data)
        if not payload:
            await ll.checkpoint()
            return 0
        task = _RUN_CONTEXT.task
        net.sending[task] = (self, payload)
        try:
            await net.sim.enter(self._owner, f"{self._send_label}{len(payload)}B)")
        finally:
            del net.sending[task]
        if net.fault_of and net.fault_of.pop(task, None) is not None:
            return len(payload)  # the fault plan took the bytes (reset or delayed)
        if self._closed:
            raise trio.ClosedResourceError(_CLOSED_BY_ANOTHER)
        if self._wr_shut:
            raise os_error(errno.EPIPE)
        if self._err:
            raise self._report()
        if self._broken:
            raise os_error(errno.EPIPE)
        net.segment(self, payload)
        return len(payload)

    def _report(self) -> OSError:
        """The pending error, reported once: the connection is dead after it."""
        code, self._err = self._err, 0
        self._broken = self._fin = True
        return os_error(code)

    async def recv(self, buflen: int, flags: int = 0, /) -> bytes:
        net = self._net
        self._check_open()
        if flags:
            raise os_error(errno.EOPNOTSUPP, "recv flags are not simulated")
        if buflen < 0:
            raise ValueError("negative buffersize in recv")
        if self._peer is None:
            raise os_error(errno.ENOTCONN)
        while not self.readable():
            await net.wait(self)
        await net.sim.enter(self._owner, self._recv_label)
        if self._closed:
            raise trio.ClosedResourceError(_CLOSED_BY_ANOTHER)
        if self._buf and not self._rd_shut and buflen:
            return net.take(self, buflen)
        if self._err:
            raise self._report()
        return b""

    async def recv_into(self, buffer: Buffer, nbytes: int = 0, flags: int = 0) -> int:
        view = memoryview(buffer)
        data = await self.recv(nbytes or len(view), flags)
        view[:len(data)] = data
        return len(data)

    async def recvfrom(self, bufsize: int, flags: int = 0, /) -> tuple[bytes, Any]:
        return await self.recv(bufsize, flags), None

    async def recvfrom_into(self, buffer: Buffer, nbytes: int = 0,
                            flags: int = 0) -> tuple[int, Any]:
        return await self.recv_into(buffer, nbytes, flags), None

    async def sendto(self, *args: object) -> int:
        raise os_error(errno.EISCONN if self._peer is not None else errno.EOPNOTSUPP)

    # -- ending ----------------------------------------------------------------------

    def shutdown(self, flag: int) -> None:
        self._check_open()
        if self._peer is None:
            raise os_error(errno.ENOTCONN)
        if flag in (_socket.SHUT_RD, _socket.SHUT_RDWR):
            self._rd_shut = True
            self._net.wake(self)
        if flag in (_socket.SHUT_WR, _socket.SHUT_RDWR) and not self._wr_shut:
            self._wr_shut = True
            if not (self._err or self._broken):
                self._net.segment(self, None)

    def close(self) -> None:
        """Close as a kernel does: a FIN after what was sent, or a reset when bytes
        received were never read; a listener's unaccepted connections are reset."""
        if self._closed:
            return
        net = self._net
        self._closed = True
        if self._listening:
            keys = net.listeners.get((self._host, self._port))
            if keys is not None and self in keys:
                keys.remove(self)
                if not keys:
                    del net.listeners[(self._host, self._port)]
            for pending in self._backlog:
                if pending._peer is not None:
                    net.rst(pending._peer)
                pending._closed = True
                net.forget(pending)
            self._backlog.clear()
        peer = self._peer
        if peer is not None and not peer._closed:
            if self._buf:
                self._transit.clear()
                net.rst(peer)
            elif not self._wr_shut and not (self._err or self._broken):
                self._wr_shut = True
                net.segment(self, None)
        net.wake(self)
        net.forget(self)


class RawView:
    """What anyio calls the raw socket of a simulated one: names and addresses, and a
    ``fileno()`` for ``select.poll`` that answers the simulated state truthfully.

    httpcore asks ``poll`` whether an idle keep-alive connection is readable (the
    server closed it) before reusing it.  When the connection has something to
    read this answers -1 (httpcore's "closed"); otherwise the descriptor of a pipe
    that nothing ever writes to, which ``poll`` always reports not readable.  So
    httpx's pool sees exactly what it would see over real TCP, and nothing real
    is ever read or written.
    """

    __slots__ = ("_of",)

    def __init__(self, of: SimSocket) -> None:
        self._of = of

    @property
    def family(self) -> _socket.AddressFamily:
        return self._of.family

    @property
    def type(self) -> _socket.SocketKind:
        return self._of.type

    @property
    def proto(self) -> int:
        return self._of.proto

    def getsockname(self) -> tuple[str, int]:
        return self._of.getsockname()

    def getpeername(self) -> tuple[str, int]:
        return self._of.getpeername()

    def getsockopt(self, level: int, optname: int) -> int:
        return self._of.getsockopt(level, optname)

    def fileno(self) -> int:
        if self._of._closed or self._of.readable():
            return -1
        return _never_readable()


_QUIET_PIPE: list[int] = []


def _never_readable() -> int:
    """A descriptor ``poll`` never reports readable: the write end of a pipe kept open
    (both ends) for the life of the interpreter, never written to."""
    if not _QUIET_PIPE:
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        _QUIET_PIPE.extend((write_end, read_end))
    return _QUIET_PIPE[0]
