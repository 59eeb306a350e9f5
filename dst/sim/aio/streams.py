"""asyncio's streams over the simulated network (``dst.sim.sockets``).

``asyncio.open_connection`` and ``asyncio.start_server`` work on a simulated
loop: names are the simulated network's, a connect is the network's choice
point made by a bridge, and a connection's bytes go through trio tasks of the
process (a reader, a writer while bytes wait, a server's acceptor), which wait
at the network's choice points labelled by the connection.  IPv4 and plain
TCP only; raw socket calls are refused.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any, cast

import trio

from ..process import RUNNING
from .bridges import _forget
from .state import LoopState


class Streams(LoopState):
    """The loop's names, connections and listeners."""

    async def getaddrinfo(self, host: Any, port: Any, *, family: int = 0,
                          type: int = 0, proto: int = 0, flags: int = 0) -> list[Any]:
        """The simulated network's names (``dst.sim.sockets``): a process's name,
        ``localhost`` or a numeric address; IPv4 only."""
        from ..sockets.hosts import numeric, port_number
        from ..sockets.install import SimResolver

        if isinstance(host, bytes):
            host = host.decode("ascii", "replace")
        if host is not None and numeric(host):
            return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "",
                     (host, port_number(port)))]
        return await SimResolver().getaddrinfo(host, port, family, type, proto, flags)

    async def getnameinfo(self, sockaddr: Any, flags: int = 0) -> tuple[str, str]:
        from ..sockets.install import SimResolver

        return await SimResolver().getnameinfo(sockaddr, flags)

    def _socket(self) -> Any:
        from ..sockets.network import network
        from ..sockets.simsocket import SimSocket

        return SimSocket(network(self._sim), self._inc)

    async def create_connection(
            self, protocol_factory: Callable[[], asyncio.BaseProtocol], host: Any = None,
            port: Any = None, *, ssl: Any = None, family: int = 0, proto: int = 0,
            flags: int = 0, sock: Any = None, local_addr: Any = None,
            server_hostname: Any = None, **kwargs: Any) -> tuple[Any, Any]:
        """A TCP connection over the simulated network (``asyncio.open_connection``):
        the connect is the network's choice point, made by a bridge."""
        if ssl:
            raise NotImplementedError("dst simulates plain TCP: TLS is not simulated")
        if sock is not None or local_addr is not None:
            raise NotImplementedError("dst simulates connections by host and port only")
        infos = await self.getaddrinfo(host, port, family=family, proto=proto, flags=flags)
        address = infos[0][4]
        conn = self._socket()
        try:
            await self.env_call(self._inc, f"tcp.connect({host}:{port})", conn.connect,
                                (address,))
        except BaseException:
            conn.close()
            raise
        protocol = protocol_factory()
        transport = _StreamTransport(self, conn, protocol)
        transport._start()
        return transport, protocol

    async def create_server(  # type: ignore[override]
            self, protocol_factory: Callable[[], asyncio.BaseProtocol], host: Any = None,
            port: Any = None, *, family: int = 0, flags: int = socket.AI_PASSIVE,
            sock: Any = None, backlog: int = 100, ssl: Any = None,
            start_serving: bool = True, **kwargs: Any) -> asyncio.AbstractServer:
        """A TCP listener on the simulated network (``asyncio.start_server``): its
        process is the host, a connection accepted at the network's choice point."""
        if ssl:
            raise NotImplementedError("dst simulates plain TCP: TLS is not simulated")
        if sock is not None:
            raise NotImplementedError("dst simulates listeners by host and port only")
        if isinstance(host, (list, tuple)):
            host = host[0] if host else None
        listener = self._socket()
        try:
            await self.env_call(self._inc, f"tcp.bind({port})", listener.bind,
                                (("" if host is None else host, int(port or 0)),))
            listener.listen(backlog)
        except BaseException:
            listener.close()
            raise
        server = _Server(self, listener, protocol_factory)
        if start_serving:
            server._start()
        return server

    async def sock_connect(self, sock: Any, address: Any) -> None:
        raise NotImplementedError("dst simulates asyncio's streams (open_connection, "
                                  "start_server), not its raw socket calls")


class _StreamTransport(asyncio.Transport):
    """An asyncio transport over a simulated socket.

    Its bytes go through trio tasks of the process: a reader that receives and
    hands each chunk to the protocol (``data_received``, ``eof_received``), and
    a writer started while bytes wait to be sent.  Both wait at the network's
    choice points (``tcp.recv``, ``tcp.send``), labelled by the connection.
    Reading is never paused: what the peer sends is buffered in the protocol.
    """

    def __init__(self, loop: LoopState, sock: Any, protocol: asyncio.BaseProtocol) -> None:
        super().__init__()
        self._loop = loop
        self._sock = sock
        self._protocol = protocol
        self._buffer = bytearray()
        self._writing = False
        self._closing = False
        self._eof_sent = False
        self._lost = False
        self._paused = False
        self._extra = {"peername": sock._remote, "sockname": sock._local, "socket": sock}
        cid = sock._cid or "tcp"
        self._label = f"{loop._name}/{cid}"

    def _start(self) -> None:
        """The protocol is connected, and the reader starts (asyncio's order)."""
        self._protocol.connection_made(self)
        self._loop._spawn(_read, (self._loop, self), self._label)

    # -- asyncio.Transport ---------------------------------------------------------

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._extra.get(name, default)

    def is_closing(self) -> bool:
        return self._closing

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    def is_reading(self) -> bool:
        return not (self._closing or self._paused)

    def pause_reading(self) -> None:
        self._paused = True  # nothing to do: the bytes wait in the protocol's buffer

    def resume_reading(self) -> None:
        self._paused = False

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return len(self._buffer)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return (0, 0)

    def write(self, data: Any) -> None:
        if self._closing or self._eof_sent or self._lost:
            return  # asyncio logs and drops writes after close; so does this
        if not data:
            return
        self._buffer += data
        self._flush()

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def write_eof(self) -> None:
        if self._closing or self._eof_sent:
            return
        self._eof_sent = True
        self._flush()

    def can_write_eof(self) -> bool:
        return True

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._flush()

    def abort(self) -> None:
        self._buffer.clear()
        self._closing = True
        self._finish(None)

    # -- the trio side -------------------------------------------------------------

    def _flush(self) -> None:
        if self._writing or self._lost or self._loop._dead:
            return  # (a dead loop's sockets were closed with its process)
        if self._buffer or self._eof_sent or self._closing:
            self._writing = True
            self._loop._spawn(_write, (self._loop, self), self._label)

    def _finish(self, exc: BaseException | None) -> None:
        """The connection is over: close the socket, tell the protocol once."""
        if self._lost:
            return
        self._lost = True
        self._closing = True
        self._sock.close()
        if not self._loop._dead:
            self._loop.call_soon(self._protocol.connection_lost, exc)


async def _read(loop: LoopState, transport: _StreamTransport) -> None:
    """A connection's reader: hands what arrives to the protocol."""
    sock = transport._sock
    protocol = cast("asyncio.Protocol", transport._protocol)
    try:
        while not transport._lost:
            data = await sock.recv(65536)
            if loop._dead or transport._lost:
                return
            if not data:
                break
            loop.call_soon(_received, transport, data)
        if not loop._dead and not transport._lost:
            loop.call_soon(_eof, transport)
    except (OSError, trio.ClosedResourceError) as exc:
        if not loop._dead and not transport._lost:
            loop.call_soon(transport._finish, exc if isinstance(exc, OSError) else None)
    except BaseException as exc:
        if loop._dead or loop._sim._stopping or loop._inc.state is not RUNNING:
            return
        raise exc
    finally:
        _forget(loop)
    del protocol


def _received(transport: _StreamTransport, data: bytes) -> None:
    if not transport._lost:
        cast("asyncio.Protocol", transport._protocol).data_received(data)


def _eof(transport: _StreamTransport) -> None:
    if transport._lost:
        return
    keep_open = cast("asyncio.Protocol", transport._protocol).eof_received()
    if not keep_open:
        transport.close()


async def _write(loop: LoopState, transport: _StreamTransport) -> None:
    """A connection's writer, while bytes (or the end) wait to be sent."""
    sock = transport._sock
    try:
        while transport._buffer and not transport._lost:
            chunk = bytes(transport._buffer)
            transport._buffer.clear()
            await sock.send(chunk)
        if transport._lost or loop._dead:
            return
        if transport._closing:
            transport._finish(None)
        elif transport._eof_sent:
            sock.shutdown(socket.SHUT_WR)
    except (OSError, trio.ClosedResourceError) as exc:
        if not loop._dead:
            transport._buffer.clear()
            transport._finish(exc if isinstance(exc, OSError) else None)
    except BaseException as exc:
        if loop._dead or loop._sim._stopping or loop._inc.state is not RUNNING:
            return
        raise exc
    finally:
        transport._writing = False
        _forget(loop)
        if transport._buffer and not transport._lost and not loop._dead:
            transport._flush()


class _Server(asyncio.AbstractServer):
    """``asyncio.Server`` over a simulated listener: an acceptor task of the process
    takes each connection (the network's ``tcp.accept`` choice point)."""

    def __init__(self, loop: LoopState, listener: Any,
                 protocol_factory: Callable[[], asyncio.BaseProtocol]) -> None:
        self._loop = loop
        self._listener = listener
        self._factory = protocol_factory
        self._serving = False
        self._closed = False
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def sockets(self) -> tuple[Any, ...]:
        return () if self._closed else (self._listener,)

    def _start(self) -> None:
        if self._serving or self._closed:
            return
        self._serving = True
        self._loop._spawn(_accept, (self._loop, self),
                          f"{self._loop._name}/accept-{self._listener._port}")

    def _accepted(self, conn: Any) -> None:
        if self._closed:
            conn.close()
            return
        transport = _StreamTransport(self._loop, conn, self._factory())
        transport._start()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._serving = False
        self._listener.close()
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def is_serving(self) -> bool:
        return self._serving

    async def start_serving(self) -> None:
        self._start()

    async def serve_forever(self) -> None:
        self._start()
        waiter = self._loop.create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        finally:
            self.close()

    async def wait_closed(self) -> None:
        if self._closed:
            return
        waiter = self._loop.create_future()
        self._waiters.append(waiter)
        await waiter

    def close_clients(self) -> None:
        pass

    def abort_clients(self) -> None:
        pass


async def _accept(loop: LoopState, server: _Server) -> None:
    """A server's acceptor: each connection becomes a transport and a protocol."""
    try:
        while not server._closed:
            conn, _ = await server._listener.accept()
            if loop._dead:
                conn.close()
                return
            loop.call_soon(server._accepted, conn)
    except (OSError, trio.ClosedResourceError):
        return
    except BaseException as exc:
        if loop._dead or loop._sim._stopping or loop._inc.state is not RUNNING:
            return
        raise exc
    finally:
        _forget(loop)
