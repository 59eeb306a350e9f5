"""The run's TCP network: listeners, connections, bytes in flight, and what breaks them.

Design
------
trio's socket API meets the network at a few calls, and each of those that
waits on the network in a real program is a choice point here, exactly as an
``Env`` call is: ``connect``, ``accept``, every ``send`` and every ``recv``
park the calling task (``Sim.enter``) until the strategy picks it.  A ``recv``
or ``accept`` with nothing to take first *blocks* (no option: what unblocks it
is another task's send or connect, itself a choice), then parks; so "the reply
comes first" and "the timeout fires first" stay two options of one decision.

Bytes of one connection arrive in order: a performed send appends them to the
peer's receive buffer at once.  How a ``recv`` cuts what is there is a *data*
choice (``tcp.split``: all of it, or a split at a boundary chosen by
``tcp.cut`` among at most 16 ranges per decision, narrowed until one boundary
is left: any boundary, in a few small decisions), so code that takes one
``recv`` for one message is caught, and a replay cuts the same way.

Faults (``FaultPlan``), each offered as a variant of a parked send while its
budget lasts: ``!reset`` (``max_resets``) loses the segment and resets the
connection, both ends getting ``ECONNRESET`` once what was already in their
buffers is read: on a server's reply it is the reply lost after the server
acted; ``!delay`` (``max_segment_delays``) makes the segment arrive
``segment_delay_seconds`` late, the bytes sent after it queued behind it.
A crash closes every socket of the dead incarnation the way its kernel would:
a connection with unread bytes is reset (``ECONNRESET``), others get a FIN (the
peer reads to the end, then EOF); its listeners vanish (a connect is refused,
a connection waiting to be accepted is reset).  A partition breaks every
connection across the cut (``ETIMEDOUT``: what TCP reports when its
retransmissions give up; dst does not make the run wait those minutes), and a
connect across it waits for the heal (up to the 127 s Linux gives a SYN).
Message drops (``max_drops``) do not apply: TCP retransmits a lost segment,
and what a loss costs a program is time, which ``!delay`` models.
"""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING, Any

import trio
import trio.lowlevel as ll

from .. import trio_internals
from ..options import SOCKET_FAULT
from ..trio_internals import RUN_CONTEXT as _RUN_CONTEXT
from .hosts import ANY, Hosts

if TYPE_CHECKING:
    from ..kernel import Sim
    from ..process import Incarnation
    from .simsocket import SimSocket

#: First port handed out to a socket that connects without binding (IANA's dynamic range).
EPHEMERAL = 49152
#: Descriptor numbers of simulated sockets start here: never a real descriptor (no
#: process gets this many), so a library that polls one gets ``EBADF``/``POLLNVAL``.
FD_BASE = 1 << 30
#: How long a connect across a partition waits before ``ETIMEDOUT`` (Linux: 6 SYN
#: retries, 1+2+4+8+16+32+64 seconds).
SYN_GIVES_UP = 127.0
#: Ranges offered per ``tcp.cut`` decision: every boundary of a buffer of up to 17
#: bytes in one decision, of 64 KiB in four.
CUT_SPAN = 16


def network(sim: Sim) -> SocketNetwork:
    """The run's network, made on first use (most runs never open a socket)."""
    net = sim._sockets
    if net is None:
        net = sim._sockets = SocketNetwork(sim)
    return net


def os_error(code: int, detail: str | None = None) -> OSError:
    """``OSError(code, ...)``: Python makes it the subclass the code names
    (``ConnectionResetError``, ``BrokenPipeError``...), as a real socket's would be."""
    return OSError(code, detail if detail is not None else os.strerror(code))


class SocketNetwork:
    """The simulated TCP of one run (``sim._sockets``)."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.hosts = Hosts(sim)
        plan = sim.faults
        self.split_weight = plan.split_weight
        self.resets_left = plan.max_resets
        self.delays_left = plan.max_segment_delays
        self._next_conn = 0
        self._next_fd = FD_BASE
        self._next_port: dict[str, int] = {}
        #: Every socket holding a local port, by (host, port).
        self.ports: dict[tuple[str, int], list[SimSocket]] = {}
        #: Listening sockets by (host, port).
        self.listeners: dict[tuple[str, int], list[SimSocket]] = {}
        #: Every open socket of each incarnation, in the order they were opened.
        self._owned: dict[Incarnation, dict[SimSocket, None]] = {}
        #: Tasks blocked until a socket has something to read or accept: waiting on
        #: the world, like a task in ``env.net.recv`` (``dst.sim.liveness``).
        self.idle: dict[ll.Task, SimSocket] = {}
        #: Tasks parked at a send, with the socket and the bytes (the fault variants').
        self.sending: dict[ll.Task, tuple[SimSocket, bytes]] = {}
        #: The fault chosen for a parked send, read by the send when it wakes.
        self.fault_of: dict[ll.Task, str] = {}
        #: Tasks whose connect waits for a partition to heal.
        self._heal_waiters: dict[ll.Task, None] = {}

    # -- sockets ---------------------------------------------------------------

    def adopt(self, sock: SimSocket) -> int:
        """Register a new socket of ``sock._owner``; its descriptor number."""
        self._next_fd += 1
        self._owned.setdefault(sock._owner, {})[sock] = None
        return self._next_fd

    def forget(self, sock: SimSocket) -> None:
        owned = self._owned.get(sock._owner)
        if owned is not None:
            owned.pop(sock, None)
        if sock._local is not None:
            key = (sock._host, sock._local[1])
            holders = self.ports.get(key)
            if holders is not None and sock in holders:
                holders.remove(sock)
                if not holders:
                    del self.ports[key]

    def next_connection(self) -> str:
        self._next_conn += 1
        return f"c{self._next_conn}"

    def ephemeral(self, host: str) -> int:
        port = self._next_port.get(host, EPHEMERAL)
        while (host, port) in self.ports:
            port += 1
        self._next_port[host] = port + 1
        return port

    def hold_port(self, sock: SimSocket, interface: str, port: int) -> None:
        """Give ``sock`` the local address ``(interface, port)``, or ``EADDRINUSE``."""
        key = (sock._host, port)
        for other in self.ports.get(key, ()):
            theirs = other._local[0] if other._local is not None else ANY
            if ANY in (theirs, interface) or theirs == interface:
                raise os_error(errno.EADDRINUSE)
        self.ports.setdefault(key, []).append(sock)
        sock._local = (interface, port)

    def find_listener(self, host: str, address: str, port: int) -> SimSocket | None:
        """The socket listening on ``host`` at ``address:port`` (a loopback address
        reaches a listener on ``127.0.0.1`` or on every interface), or None."""
        for sock in self.listeners.get((host, port), ()):
            interface = sock._local[0] if sock._local is not None else ANY
            if interface in (ANY, address):
                return sock
        return None

    # -- blocking until something happens ---------------------------------------

    async def wait(self, sock: SimSocket) -> None:
        """Block until ``sock`` is woken (bytes, EOF, an error, a connection, a close)."""
        task = _RUN_CONTEXT.task
        waiters = sock._waiters
        idle = self.idle

        def abort(_: object) -> ll.Abort:
            waiters.pop(task, None)
            idle.pop(task, None)
            return ll.Abort.SUCCEEDED

        waiters[task] = None
        idle[task] = sock
        await trio_internals.park(abort)

    def wake(self, sock: SimSocket) -> None:
        waiters = sock._waiters
        if waiters:
            idle = self.idle
            for task in waiters:
                idle.pop(task, None)
                trio_internals.wake(task)
            waiters.clear()

    def across(self, a: str, b: str) -> bool:
        cut = self.sim.cut_off
        return cut is not None and (a == cut) != (b == cut)

    async def reach(self, source: str, dest: str, address: object) -> None:
        """Wait while a partition separates ``source`` from ``dest`` (a SYN retried)."""
        if not self.across(source, dest):
            return
        waiters = self._heal_waiters
        task = _RUN_CONTEXT.task

        def abort(_: object) -> ll.Abort:
            waiters.pop(task, None)
            return ll.Abort.SUCCEEDED

        with trio.move_on_after(SYN_GIVES_UP) as scope:
            while self.across(source, dest):
                waiters[task] = None
                await trio_internals.park(abort)
        if scope.cancelled_caught:
            raise os_error(errno.ETIMEDOUT, f"Error connecting to {address!r}: "
                           f"{os.strerror(errno.ETIMEDOUT)}")

    def healed(self) -> None:
        """The partition healed: connects waiting for it go on."""
        waiters = self._heal_waiters
        for task in waiters:
            trio_internals.wake(task)
        waiters.clear()

    # -- bytes -------------------------------------------------------------------

    def segment(self, src: SimSocket, payload: bytes | None) -> None:
        """``src`` sends ``payload`` (None: its FIN), behind anything still delayed."""
        transit = src._transit
        if transit:
            transit.append((transit[-1][0], payload))
        else:
            self.arrive(src, payload)

    def arrive(self, src: SimSocket, payload: bytes | None) -> None:
        peer = src._peer
        if peer is None or peer._closed:
            if payload is not None:
                self.rst(src)  # the peer's kernel answers bytes for a closed socket
            return
        if payload is None:
            peer._fin = True
        else:
            peer._buf += payload
        self.wake(peer)

    def rst(self, sock: SimSocket, code: int = errno.ECONNRESET) -> None:
        """A reset reaches ``sock``: what it already holds is read first, then the error
        (or EOF, if the peer's FIN came before: Linux reports that one first)."""
        if sock._closed:
            return
        sock._transit.clear()
        if sock._fin or sock._broken:
            sock._broken = True
        elif not sock._err:
            sock._err = code
        self.wake(sock)

    def take(self, sock: SimSocket, bufsize: int) -> bytes:
        """What a ``recv`` chosen now returns: all the bytes there, or a cut of them."""
        buf = sock._buf
        n = len(buf) if len(buf) <= bufsize else bufsize
        if n >= 2 and self.split_weight > 0:
            label = f"tcp.split({sock._cid})"
            if self.sim.choose(label, ("whole", "split"), (1.0, self.split_weight)) == "split":
                n = self._cut(sock._cid, n)
        data = bytes(buf[:n])
        del buf[:n]
        return data

    def _cut(self, cid: str, n: int) -> int:
        """A boundary in ``1..n-1``, chosen by decisions of at most ``CUT_SPAN`` ranges."""
        lo, hi = 1, n - 1
        label = f"tcp.cut({cid})"
        while lo < hi:
            count = hi - lo + 1
            if count <= CUT_SPAN:
                options = [str(i) for i in range(lo, hi + 1)]
                return lo + options.index(self.sim.choose(label, options))
            edges = [lo + count * k // CUT_SPAN for k in range(CUT_SPAN + 1)]
            ranges = [(edges[k], edges[k + 1] - 1) for k in range(CUT_SPAN)]
            options = [str(a) if a == b else f"{a}-{b}" for a, b in ranges]
            lo, hi = ranges[options.index(self.sim.choose(label, options))]
        return lo

    # -- faults --------------------------------------------------------------------

    def faults_left(self) -> bool:
        return self.resets_left > 0 or self.delays_left > 0

    def add_faults(self, options: list[tuple[str, float, int, Any]], task: ll.Task,
                   label: str) -> None:
        """The fault variants of a parked send, while budgets last and it would go through."""
        sock = self.sending[task][0]
        peer = sock._peer
        if (sock._closed or sock._err or sock._broken or sock._wr_shut or peer is None
                or peer._closed):
            return
        plan = self.sim.faults
        if self.resets_left > 0:
            options.append((f"{label}!reset", plan.reset_weight, SOCKET_FAULT, (task, "reset")))
        if self.delays_left > 0:
            options.append((f"{label}!delay", plan.segment_delay_weight, SOCKET_FAULT,
                            (task, "delay")))

    def perform_fault(self, target: tuple[ll.Task, str]) -> None:
        """A fault chosen for a parked send: done now, in the decision; the send returns."""
        task, kind = target
        sim = self.sim
        sock, payload = self.sending[task]
        peer = sock._peer
        assert peer is not None
        route = f"{len(payload)} bytes {sock._host}:{sock._port} -> {peer._host}:{peer._port}"
        del sim._parked[task]
        if kind == "reset":
            self.resets_left -= 1
            sim.fault("tcp", sock._cid, f"reset: {route} lost")
            self.rst(sock)
            self.rst(peer)
        else:
            self.delays_left -= 1
            seconds = sim.faults.segment_delay_seconds
            sim.fault("tcp", sock._cid, f"{route} delayed {seconds:g}s")
            transit = sock._transit
            at = sim.now + seconds
            if transit:
                transit.append((max(at, transit[-1][0]), payload))
            else:
                transit.append((at, payload))
                assert sim._nursery is not None
                sim._nursery.start_soon(self._carry, sock, name="dst-tcp")
        sim._recount_faults()
        self.fault_of[task] = kind
        trio_internals.wake(task)

    async def _carry(self, sock: SimSocket) -> None:
        """Deliver the delayed segments of ``sock``, in order, each at its time."""
        transit = sock._transit
        while transit:
            await trio.sleep_until(transit[0][0])
            if not transit:
                return  # reset or closed meanwhile: the bytes are gone
            _, payload = transit.popleft()
            self.arrive(sock, payload)

    # -- what the kernel tells the network ----------------------------------------

    def crashed(self, inc: Incarnation) -> None:
        """``inc`` crashed: its sockets vanish as its kernel closes them."""
        owned = list(self._owned.get(inc, ()))
        for sock in owned:  # told first: closing a listener closes what waits in its backlog
            peer = sock._peer
            if peer is not None and not peer._closed and not sock._closed:
                waiting = any(sock in s._backlog for s in owned if s._listening)
                how = ("reset (never accepted)" if waiting
                       else "reset (it had unread bytes)" if sock._buf else "closed")
                self.sim.fault("tcp", sock._cid, f"{inc.name} crashed: {how}")
        for sock in owned:
            sock.close()
        self._owned.pop(inc, None)

    def exited(self, inc: Incarnation) -> None:
        """``inc`` ended: what it left open is closed, as a process's exit closes it."""
        for sock in list(self._owned.get(inc, ())):
            sock.close()
        self._owned.pop(inc, None)

    def cut(self, name: str) -> None:
        """``name`` is cut off: every connection across the cut breaks."""
        for owned in list(self._owned.values()):
            for sock in list(owned):
                peer = sock._peer
                if (peer is None or sock._closed or sock._owner.name != name
                        or peer._owner.name == name):
                    continue
                if not (sock._err or sock._broken) or not (peer._err or peer._broken):
                    self.sim.fault("tcp", sock._cid, f"cut by the partition of {name}")
                self.rst(sock, errno.ETIMEDOUT)
                self.rst(peer, errno.ETIMEDOUT)

    def release(self) -> None:
        """The run is over: drop what refers to it."""
        self._owned.clear()
        self.idle.clear()
        self.sending.clear()
        self.fault_of.clear()
        self._heal_waiters.clear()
        self.listeners.clear()
        self.ports.clear()
        self.sim = None  # type: ignore[assignment]
