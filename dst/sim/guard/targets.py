"""What the guard replaces: every module and class attribute it traps (clocks, generators,
entropy, threads, subprocesses, sockets, trio's entry points), with what an installed
library's call gets instead, and the virtual clock and pid ``logging`` reads.  See
:mod:`dst.sim.guard` for the design."""

from __future__ import annotations

import datetime as _dt
import inspect
import logging
import os
import random
import socket
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

from .. import outside
from ..sockets import stdlib
from ..sockets.install import numeric_lookups, simulating
from .traps import (
    _CLOCK,
    _FILES,
    _NET,
    _PROCESSES,
    _RNG,
    _THREADS,
    _GuardedDate,
    _GuardedDatetime,
    _MethodTrap,
    _Proxy,
    _Trap,
    _virtual_pid,
    _virtual_wall,
    _virtual_wall_ns,
    _without,
)

#: place of every reference other modules hold to the original.
Target = tuple[Any, str, Any, bool]


def _targets() -> list[Target]:
    out: list[Target] = []

    def trap(owner: Any, attr: str, what: str, instead: str, **how: Any) -> None:
        original = vars(owner).get(attr)
        if original is None:
            return  # not on this platform or Python version
        if isinstance(owner, type):
            out.append((owner, attr, _MethodTrap(what, original, instead, **how), False))
        else:
            out.append((owner, attr, _Trap(what, original, instead, **how), True))

    # What an installed library's read gets instead (``dst.sim.outside``).
    clocks = {"time": outside.wall, "time_ns": outside.wall_ns,
              "clock_gettime": outside.clock_gettime,
              "clock_gettime_ns": outside.clock_gettime_ns}
    for name in ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter",
                 "perf_counter_ns", "process_time", "process_time_ns", "thread_time",
                 "thread_time_ns", "clock_gettime", "clock_gettime_ns"):
        virtual = clocks.get(name, outside.monotonic_ns if name.endswith("_ns")
                             else outside.monotonic)
        trap(time, name, f"time.{name}()", _CLOCK, virtual=virtual)
    # Without a time argument these read the wall clock; with one they are pure.
    for name, index, virtual in (("localtime", 0, outside.struct_time),
                                 ("gmtime", 0, outside.struct_time),
                                 ("ctime", 0, outside.ctime), ("asctime", 0, outside.asctime),
                                 ("strftime", 1, outside.strftime)):
        trap(time, name, f"time.{name}() without a time argument", _CLOCK,
             reads=_without(index, ""), virtual=virtual)
    out.append((_dt, "datetime", _GuardedDatetime, True))
    out.append((_dt, "date", _GuardedDate, True))

    # Every module-level function of the global generator (random.random,
    # expovariate, seed, getstate, ...), found by what it is bound to.
    global_rng = getattr(random.random, "__self__", None)
    for name in dir(random) if global_rng is not None else ():
        if not name.startswith("_") and getattr(getattr(random, name), "__self__", None) \
                is global_rng:
            trap(random, name, f"random.{name}()", _RNG, virtual=outside.global_random(name))
    for name in ("random", "getrandbits", "randbytes"):  # secrets goes through these
        trap(random.SystemRandom, name, f"random.SystemRandom.{name}()", _RNG,
             virtual=outside.system_random(name))
    trap(random.Random, "seed", "random.Random() without a seed", "random.Random(seed) or "
         + _RNG, reads=_without(1, "a"), virtual=outside.seed_random)
    trap(os, "urandom", "os.urandom()", "env.rng.randbytes(n)", virtual=outside.urandom)
    trap(os, "getrandom", "os.getrandom()", "env.rng.randbytes(n)", virtual=outside.urandom)
    for name, virtual in (("uuid1", outside.uuid1), ("uuid4", outside.uuid4),
                          ("getnode", outside.getnode)):
        trap(uuid, name, f"uuid.{name}()", "uuid.UUID(int=env.rng.getrandbits(128), version=4)",
             virtual=virtual)
    trap(os, "getpid", "os.getpid()", "env.name (the pid differs between processes)",
         virtual=outside.getpid)

    trap(threading.Thread, "start", "threading.Thread.start()", _THREADS)
    trap(subprocess.Popen, "__init__", "subprocess.Popen()", _PROCESSES)
    trap(os, "system", "os.system()", _PROCESSES)
    # An installed library's IPv4 TCP socket in a process (hypercorn's ``serve()`` makes
    # its listeners so) is a stand-in on the simulated network: ``dst.sim.sockets.stdlib``.
    trap(socket.socket, "__init__", "socket.socket()", _NET + ", or a library's IPv4 TCP "
         "listener (hypercorn's serve() bound to 0.0.0.0:PORT)", virtual=stdlib.stand_in,
         accepts=stdlib.wanted, libraries_only=True)
    for name in ("getaddrinfo", "gethostbyname", "gethostbyname_ex", "gethostbyaddr"):
        trap(socket, name, f"socket.{name}()", _NET)
    # The numeric-only lookups trio makes itself, before it asks its resolver, are
    # answered by the simulated network while it is installed (``dst.sim.sockets``).
    for owner, attr, replacement, _ in out:
        if owner is socket and attr == "getaddrinfo" and isinstance(replacement, _Trap):
            replacement.original = numeric_lookups(replacement.original)

    import trio

    def entry(owner: Any, attr: str, what: str, instead: str) -> None:
        trap(owner, attr, what, instead, entry_point=True)

    # A library's worker thread (an SDK computing its platform headers) runs inline.
    trap(trio.to_thread, "run_sync", "trio.to_thread.run_sync()", _THREADS, entry_point=True,
         virtual=outside.run_inline)
    entry(trio.lowlevel, "start_thread_soon", "trio.lowlevel.start_thread_soon()", _THREADS)
    # anyio's asyncio backend starts worker threads of its own (``anyio.to_thread.run_sync``
    # in an asyncio process): inline too, as ``asyncio.to_thread`` is on dst's loop.
    backend = _anyio_asyncio()
    if backend is not None:
        from ..aio import run_sync_inline

        out.append((backend, "run_sync_in_worker_thread", classmethod(_Trap(
            "anyio.to_thread.run_sync()", vars(backend)["run_sync_in_worker_thread"].__func__,
            _THREADS, entry_point=True, virtual=run_sync_inline)), False))
    entry(trio, "run_process", "trio.run_process()", _PROCESSES)
    entry(trio.lowlevel, "open_process", "trio.lowlevel.open_process()", _PROCESSES)
    entry(trio, "open_file", "trio.open_file()", _FILES)
    entry(trio, "wrap_file", "trio.wrap_file()", _FILES)
    for name, method in vars(trio.Path).items():
        function = getattr(method, "__func__", method)
        if not name.startswith("_") and inspect.iscoroutinefunction(function):
            what = f"trio.Path.{name}()"
            if isinstance(method, classmethod):
                out.append((trio.Path, name, classmethod(
                    _Trap(what, function, _FILES, entry_point=True)), False))
            else:
                entry(trio.Path, name, what, _FILES)
    # While dst's simulated network is installed (every batch of runs: ``dst.sim.
    # sockets``), trio's TCP entry points reach it and go through; a socket made
    # from a descriptor, a socket pair, a Unix socket and TLS would be real.
    for name in ("socket", "getaddrinfo", "getnameinfo"):
        trap(trio.socket, name, f"trio.socket.{name}()", _NET, entry_point=True,
             reads=_real_socket)
    for name in ("socketpair", "fromfd"):
        entry(trio.socket, name, f"trio.socket.{name}()", _NET)
    # ... and one of a library's stand-ins is the simulated socket it stands for.
    trap(trio.socket, "from_stdlib_socket", "trio.socket.from_stdlib_socket()", _NET,
         entry_point=True, reads=_real_stdlib_socket)
    out[-1][2].original = stdlib.adopting(out[-1][2].original)
    for name in ("open_tcp_stream", "open_tcp_listeners", "serve_tcp"):
        trap(trio, name, f"trio.{name}()", _NET, entry_point=True, reads=_unsimulated)
    for name in ("open_unix_socket", "open_ssl_over_tcp_stream", "open_ssl_over_tcp_listeners",
                 "serve_ssl_over_tcp"):
        entry(trio, name, f"trio.{name}()", _NET)

    # stdlib logging reads the run's virtual wall clock (what libraries' time.time() reads:
    # a record's created, asctime) instead of tripping a trap, and the process's virtual
    # pid (LogRecord.process), so a handler that keeps records keeps the same ones.
    for name in ("logging", "logging.handlers"):
        module = sys.modules.get(name)
        if module is not None and getattr(module, "time", None) is time:
            out.append((module, "time", _Proxy(time, time=_virtual_wall,
                                                  time_ns=_virtual_wall_ns), False))
    if getattr(logging, "os", None) is os:
        out.append((logging, "os", _Proxy(os, getpid=_virtual_pid), False))
    start = getattr(logging, "_startTime", None)
    if isinstance(start, (int, float)):  # relativeCreated: virtual milliseconds
        epoch = outside.EPOCH * 1_000_000_000 if isinstance(start, int) else outside.EPOCH
        out.append((logging, "_startTime", type(start)(epoch), False))
    return out


def _anyio_asyncio() -> Any:
    """anyio's asyncio backend class, loaded here when anyio is (it loads it on first use)."""
    if "anyio" not in sys.modules:
        return None
    try:
        from anyio._backends._asyncio import AsyncIOBackend
    except ImportError:
        return None
    return AsyncIOBackend if isinstance(
        vars(AsyncIOBackend).get("run_sync_in_worker_thread"), classmethod) else None


def _unsimulated(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a trio TCP entry point would reach the real network (no simulated one)."""
    return not simulating()


def _real_socket(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """``trio.socket.socket()`` is real without the simulated network, or from a descriptor."""
    fileno = args[3] if len(args) > 3 else kwargs.get("fileno")
    return fileno is not None or _unsimulated(args, kwargs)


def _real_stdlib_socket(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """``trio.socket.from_stdlib_socket()`` of anything but a library's stand-in is real."""
    sock = args[0] if args else kwargs.get("sock")
    return stdlib.simulated(sock) is None
