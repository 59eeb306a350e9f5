"""Traps the ways code inside a simulated run could read the real world.

Inside a run, reading a clock (``time.time``, ``perf_counter``, ``datetime.now``,
``time.localtime()`` with no argument, ...), drawing from the global ``random``
generator, ``SystemRandom``, ``secrets``, an unseeded ``random.Random()``,
``os.urandom``, ``uuid1``/``uuid4``, ``os.getpid``, starting a thread or a
subprocess, opening a socket or resolving a name, and trio's file, thread,
subprocess and network entry points each stop the run with the built-in
violation ``Nondeterminism`` and raise :class:`NondeterminismError`, naming the
call, the site in the user's code and what to use instead.

That is for the user's own code.  The same read made by an installed library
(an SDK's request id, httpx's connection expiry, a thread that computes a
platform string) is plumbing, and gets its value from the simulation instead:
virtual time, entropy seeded from the run, a thread's function run inline
(``dst.sim.outside``, which also says whose code is whose).  Threads,
subprocesses, sockets and files stay refused whoever asks, with one
exception: a library's IPv4 TCP ``socket.socket()`` in a process (hypercorn's
``serve()`` makes its listeners so) is a stand-in on dst's simulated network
(``dst.sim.sockets.stdlib``), and nothing real is opened.

How: the guard swaps module and class attributes (``time.time``,
``random.random``, ``datetime.datetime``, ``threading.Thread.start``, ...) for
traps, and also every reference to them that non-standard-library modules hold
(``from time import time`` in user code), and puts everything back on
``restore()``, including references taken by modules first imported during the
run.  A trap that escapes anyway (into an object, a closure, a default argument)
behaves exactly like the original once the guard is gone.

Clock aliases of ``datetime`` (``NOW = datetime.datetime.now``, ``UTCNOW =
datetime.utcnow``, ``TODAY = date.today`` at a user module's top level) are
trapped like ``from time import time``; see :func:`_clock_alias` for why they
need their own test.  References bound before the run inside functions and
classes of those modules are swapped too: a function's default arguments and
closure cells (``def f(clock=time.time)``; a dataclass's generated
``__init__`` holds ``field(default=time.time)`` there, and a ``default_factory``
in a closure cell), a class's attributes (a dataclass default) and its
dataclass fields (:func:`_swap_inside`).

Who may call what:

* *Readers* of the real world (clocks, generators, threads, sockets, processes)
  are judged by the first caller outside the standard library: trio, structlog,
  the test runner and dst's own machinery are let through (they decide nothing
  a run observes); user code, directly or through a stdlib helper such as
  ``secrets`` or ``email.utils``, is stopped.
* *Entry points* (``trio.to_thread.run_sync``, ``trio.lowlevel.start_thread_soon``,
  ``trio.Path``'s methods, ``trio.open_file``, ``trio.run_process``, trio's
  sockets and ``open_tcp_stream``, ...) are stopped whoever the caller is: they
  are what the user asked for, and trio calls them only on the user's behalf.
  Left alone, the thread or subprocess would run outside the simulation while
  the scheduler declares quiescence, and identical runs would differ.

stdlib ``logging`` keeps working: while the guard is installed, ``logging``
reads the run's virtual clock (``LogRecord.created`` is virtual seconds), so
logging never trips a trap and never reads the wall clock.

Traps cost nothing until called: the guard is installed once per batch of seeds,
and nothing runs per decision.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import inspect
import logging
import os
import random
import re
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import types
import uuid
from _thread import get_ident
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

from ..errors import NondeterminismError
from . import outside
from .kernel import ACTIVE
from .sockets import stdlib
from .sockets.install import numeric_lookups, simulating

#: Top-level packages and subpackages whose calls are let through: trio runs the
#: simulation, and the libraries dst is made of read nothing a run observes.
#: Matched by exact name or at a dot boundary: ``trio_x`` or ``outcomes`` are user code.
_EXEMPT = frozenset({
    "trio", "outcome", "sniffio", "structlog", "click", "hypothesis", "_hypothesis_globals",
    "_hypothesis_pytestplugin", "_hypothesis_ftz_detector", "_pytest", "pytest", "pluggy",
    "coverage", "dst.sim", "dst.trace", "dst.runner", "dst.explore", "dst.cli",
})

_EXEMPT_CACHE: dict[str, bool] = {}


def _exempt(module: str) -> bool:
    known = _EXEMPT_CACHE.get(module)
    if known is None:
        name = module
        while name not in _EXEMPT:
            dot = name.rfind(".")
            if dot < 0:
                break
            name = name[:dot]
        known = _EXEMPT_CACHE[module] = name in _EXEMPT
    return known


_STDLIB = os.path.realpath(sysconfig.get_paths()["stdlib"]) + os.sep
#: Third-party packages installed next to the standard library are not part of it.
_SITE = tuple(
    {os.path.realpath(sysconfig.get_paths()[k]) + os.sep for k in ("purelib", "platlib")}
)

_IN_STDLIB: dict[str, bool] = {}
#: ``os.path.realpath`` of each directory asked about: a few dozen directories hold
#: the hundreds of modules a process has loaded when the guard is first installed.
_REAL_DIRS: dict[str, str] = {}


def _realpath(path: str) -> str:
    """``os.path.realpath(path)``, resolving each directory once (a file that is not a
    symbolic link resolves to its resolved directory and its own name)."""
    head, tail = os.path.split(path)
    if not os.path.isabs(head) or tail in ("", ".", "..") or os.path.islink(path):
        return os.path.realpath(path)
    real = _REAL_DIRS.get(head)
    if real is None:
        real = _REAL_DIRS[head] = os.path.realpath(head)
    return os.path.join(real, tail)


def _in_stdlib(path: str) -> bool:
    """Whether a source file belongs to the standard library (memoized: realpath is slow)."""
    known = _IN_STDLIB.get(path)
    if known is None:
        if path.startswith("<"):
            # Frozen stdlib modules and generated code (``<string>``, attrs'
            # ``__init__``) speak for whoever called them.
            known = True
        else:
            real = _realpath(path)
            known = (real.startswith(_STDLIB) and not real.startswith(_SITE)
                     and "site-packages" not in real)
        _IN_STDLIB[path] = known
    return known


def _module_of(frame: types.FrameType) -> str:
    name = frame.f_globals.get("__name__")
    return name if isinstance(name, str) else "?"


def _culprit(
    frame: types.FrameType | None, entry_point: bool
) -> tuple[types.FrameType, types.FrameType | None] | None:
    """Whom to blame for a trapped call: (their frame, the frame they called), or None.

    The first caller outside the standard library decides: a stdlib helper
    (``secrets.token_hex``, ``email.utils.formatdate``) reads the real world on
    behalf of whoever called it.  None means the call is let through: an exempt
    library made it, and it is not an entry point, or ``platform`` asks the machine's
    processor (``_processor_probe``).  For an entry point the blame
    walks on past trio to the user's code (``AsyncIOWrapper.read`` is trio
    calling ``to_thread.run_sync`` for the user).
    """
    direct = frame
    inner: types.FrameType | None = None
    while frame is not None and _in_stdlib(frame.f_code.co_filename):
        if _processor_probe(frame.f_code):
            return None
        inner, frame = frame, frame.f_back
    if frame is not None and _exempt(_module_of(frame)):
        if not entry_point:
            return None
        while frame is not None and (
            _in_stdlib(frame.f_code.co_filename) or _exempt(_module_of(frame))
        ):
            inner, frame = frame, frame.f_back
    if frame is None:  # nothing but the stdlib and exempt code: blame the direct caller
        assert direct is not None
        return direct, None
    return frame, inner


def _virtualised(frame: types.FrameType, libraries_only: bool = False) -> bool:
    """Whether a read blamed on ``frame`` gets the simulation's value instead of being
    refused: a library's read, or (unless ``libraries_only``) any read under a scenario
    that is not strict."""
    owners = ACTIVE[-1].code_owners or outside.DEFAULT_OWNERS
    module, filename = _module_of(frame), frame.f_code.co_filename
    if libraries_only:
        return not owners.is_users(module, filename)
    return not owners.strict_for(module, filename)


def _asked_by(frame: types.FrameType) -> types.FrameType | None:
    """The user's own line a library was running for when it made a refused call (the
    agent's ``stdio_client(...)`` under the MCP SDK's ``open_process``), or None when
    ``frame`` is the user's already.  dst's own machinery (the kernel, the runners) is
    nobody's line; its runtime, fakes and agents are code written against ``Env``."""
    owners = (ACTIVE[-1].code_owners if ACTIVE else None) or outside.DEFAULT_OWNERS
    at: types.FrameType | None = frame
    while at is not None:
        module, filename = _module_of(at), at.f_code.co_filename
        machinery = (module == "dst" or module.startswith("dst.")) and not module.startswith(
            ("dst.runtime", "dst.fakes", "dst.agents"))
        if not machinery and not _in_stdlib(filename) and owners.is_users(module, filename):
            return None if at is frame else at
        at = at.f_back
    return None


def _file(frame: types.FrameType) -> str:
    """A frame's file by name, as every other finding shows it (the same in any checkout
    and working directory, so a trace replays there); a package's ``__init__.py`` with
    its package's directory."""
    path = frame.f_code.co_filename
    name = os.path.basename(path)
    if name == "__init__.py":
        return f"{os.path.basename(os.path.dirname(path))}/{name}"
    return name


def _fire(
    what: str, instead: str, frame: types.FrameType, inner: types.FrameType | None
) -> NoReturn:
    """Void the active run, then raise: ``except Exception`` cannot turn it back into a pass."""
    via = f" (through {_module_of(inner)})" if inner is not None else ""
    mine = _asked_by(frame)
    if mine is not None:
        via += f", from {_file(mine)}:{mine.f_lineno} in {mine.f_code.co_name},"
    message = (
        f"{what} called at {_file(frame)}:{frame.f_lineno}{via} inside a simulated run; "
        f"use {instead} instead"
    )
    if ACTIVE:
        ACTIVE[-1].trapped(message)
    raise NondeterminismError(message)


def refuse(what: str, instead: str, frame: types.FrameType) -> NoReturn:
    """Refuse a call made at ``frame`` (on a library's stand-in socket, ``dst.sim.sockets.
    stdlib``) as a trap refuses one, blaming the first code past the stdlib and trio."""
    blame = _culprit(frame, True)
    assert blame is not None  # an entry point always has someone to blame
    _fire(what, instead, *blame)


#: Installs in force (a trap left behind after ``restore()`` passes straight through).
_DEPTH = 0
#: The thread that runs the simulation.  Other threads (a logging queue listener,
#: a test runner's watchdog) were started outside any run and are not judged,
#: and a trap must never touch a run from a thread that is not running it.
_GUARDED_THREAD: int | None = None

Predicate = Callable[[tuple[Any, ...], dict[str, Any]], bool]


class _Trap:
    """Stands in for a callable that reads the real world.

    Not a descriptor, like the builtins it mostly replaces: stored as a class
    attribute (``converter = time.localtime``) it does not bind.
    """

    def __init__(
        self,
        what: str,
        original: Any,
        instead: str,
        *,
        entry_point: bool = False,
        reads: Predicate | None = None,
        virtual: Callable[..., Any] | None = None,
        accepts: Predicate | None = None,
        libraries_only: bool = False,
    ) -> None:
        self.what = what
        self.original = original
        self.instead = instead
        self.entry_point = entry_point
        #: Whether a call with these arguments reads the real world (default: always).
        self.reads = reads
        #: What a library's call gets instead (``dst.sim.outside``); None: refused too.
        self.virtual = virtual
        #: Which calls ``virtual`` answers (default: all); the others are refused.
        self.accepts = accepts
        #: ``virtual`` answers libraries only, even under a scenario that is not strict.
        self.libraries_only = libraries_only
        #: What the explorer's state keys call the trap (``dst.explore.memory``): a
        #: library's ``def f(clock=time.time)`` holds one while the guard is installed.
        self._name = what
        self.__wrapped__ = original
        self.__name__ = getattr(original, "__name__", what)
        self.__qualname__ = getattr(original, "__qualname__", what)
        self.__doc__ = getattr(original, "__doc__", None)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # Only inside a run: between two seeds the runner's own callbacks (a
        # benchmark timing each seed, a progress display) are not simulated code.
        if _DEPTH and ACTIVE and (self.reads is None or self.reads(args, kwargs)) \
                and get_ident() == _GUARDED_THREAD:
            blame = _culprit(sys._getframe(1), self.entry_point)
            if blame is not None:
                virtual = self.virtual
                if virtual is not None and _virtualised(blame[0], self.libraries_only) \
                        and (self.accepts is None or self.accepts(args, kwargs)):
                    return virtual(*args, **kwargs)
                _fire(self.what, self.instead, *blame)
        return self.original(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<dst guard trap for {self.what}>"


class _MethodTrap(_Trap):
    """A trap set on a class in place of a method: binds to the instance like a function."""

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        return self if obj is None else types.MethodType(self, obj)


def _without(index: int, keyword: str) -> Predicate:
    """Reads the real world when argument ``index`` (or ``keyword``) is absent or None."""

    def reads(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        value = args[index] if len(args) > index else kwargs.get(keyword)
        return value is None

    return reads


_REAL_DATETIME = _dt.datetime
_REAL_DATE = _dt.date


class _StandIn(type):
    """``isinstance(d, datetime)`` stays true for a datetime made before the run.

    Without it, code that checks types would take another branch inside a run
    than outside, and dst would be testing a different program.
    """

    def __instancecheck__(cls, obj: Any) -> bool:
        real = _STANDS_FOR.get(cls)
        return isinstance(obj, real) if real is not None else type.__instancecheck__(cls, obj)

    def __subclasscheck__(cls, sub: Any) -> bool:
        real = _STANDS_FOR.get(cls)
        return issubclass(sub, real) if real is not None else type.__subclasscheck__(cls, sub)


def _datetime_read(what: str, frame: types.FrameType | None) -> bool:
    """Judge a clock read of ``datetime``'s: True when it gets the virtual time (a
    library's), False when it reads the real clock (outside a run, or exempt code);
    the user's raises."""
    if _DEPTH and ACTIVE and get_ident() == _GUARDED_THREAD:
        blame = _culprit(frame, False)
        if blame is not None:
            if _virtualised(blame[0]):
                return True
            _fire(what, _CLOCK, *blame)
    return False


def _real(cls: type) -> Any:
    """The class a virtual reading is made of: the real one for the stand-in itself (as
    its real clock reading would be), a subclass made during the run for itself."""
    return _STANDS_FOR.get(cls, cls)


class _GuardedDatetime(_dt.datetime, metaclass=_StandIn):
    _name = "datetime.datetime"  # what the explorer's state keys call it

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        # pydantic, asked for a model field annotated with the stand-in (a module
        # whose name ``datetime`` it is while the guard is installed), validates it as
        # the real class: the same program, inside a run or not.
        return handler.generate_schema(_REAL_DATETIME)

    @classmethod
    def now(cls, tz: Any = None) -> Any:
        if _datetime_read("datetime.datetime.now()", sys._getframe(1)):
            return outside.now(_real(cls), tz)
        return _REAL_DATETIME.now(tz)

    @classmethod
    def utcnow(cls) -> Any:
        if _datetime_read("datetime.datetime.utcnow()", sys._getframe(1)):
            return outside.now(_real(cls))
        return _REAL_DATETIME.utcnow()

    @classmethod
    def today(cls) -> Any:
        if _datetime_read("datetime.datetime.today()", sys._getframe(1)):
            return outside.now(_real(cls))
        return _REAL_DATETIME.today()


class _GuardedDate(_dt.date, metaclass=_StandIn):
    _name = "datetime.date"

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        return handler.generate_schema(_REAL_DATE)

    @classmethod
    def today(cls) -> Any:
        if _datetime_read("datetime.date.today()", sys._getframe(1)):
            return outside.today()
        return _REAL_DATE.today()


_STANDS_FOR: dict[type, type] = {_GuardedDatetime: _REAL_DATETIME, _GuardedDate: _REAL_DATE}

#: A clock method of ``datetime`` named in source code (called or taken).
_CLOCK_NAMED = re.compile(rb"\.(?:now|utcnow|today)\b")
_READS_CLOCK: dict[str, bool] = {}


def _names_datetime_clock(module: types.ModuleType) -> bool:
    """Whether ``module``'s source names a clock method of ``datetime`` anywhere
    (``.now``, ``.utcnow``, ``.today``); True when there is no source to read.

    The stand-ins replace ``datetime.datetime`` and ``datetime.date`` only where
    code could read the clock through them.  Elsewhere the real classes stay: a
    module that uses ``datetime`` only as a type (pydantic, when it builds a model's
    schema, asks ``obj is datetime.datetime`` of an annotation that may hold the
    real class, captured before the run) must see the same classes inside a run
    as outside.  Read once per module, from its file: a name in a comment counts
    too, which only keeps the stand-in where it always was.
    """
    name = module.__name__
    known = _READS_CLOCK.get(name)
    if known is None:
        path = getattr(module, "__file__", None)
        try:
            with open(path, "rb") as source:  # type: ignore[arg-type]
                known = _CLOCK_NAMED.search(source.read()) is not None
        except (OSError, TypeError, ValueError):
            known = True
        _READS_CLOCK[name] = known
    return known


#: The ``datetime`` module as a module that never reads its clocks sees it while the
#: guard is installed: with the real classes (see :func:`_names_datetime_clock`).
_PLAIN_DATETIME: Any = None

#: The clock-reading classmethods of ``datetime.datetime`` and ``datetime.date``.
_DATETIME_CLOCKS = frozenset({"now", "utcnow", "today"})
_DATE_CLOCKS = frozenset({"today"})
_BOUND_METHOD_TYPES = (types.BuiltinMethodType, types.MethodType)


def _clock_alias(value: Any) -> Any:
    """The trapping stand-in for a datetime clock method bound before the run, else None.

    ``time.time`` is one object, so a user module's ``from time import time``
    holds that very object and is found by identity and swapped.  A module-level
    ``NOW = datetime.datetime.now`` (or ``datetime.utcnow``, ``date.today``)
    holds no shared object: every attribute access on a class makes a new bound
    method, and ``datetime.datetime`` is a C type whose methods cannot be
    patched, so neither identity nor patching the class reaches the alias.
    What the alias does hold is its binding: a method named ``now``,
    ``utcnow`` or ``today`` whose ``__self__`` is the real ``datetime`` (or
    ``date``) class.  The scan of user modules' globals that swaps ``from time
    import time`` therefore also recognises that shape (one ``type()`` test per
    name, and only on the scans that look at every name) and swaps in the same
    method of the stand-in class (``_GuardedDatetime.now``), which traps exactly
    as ``datetime.datetime.now()`` itself does inside a run, and reads the real
    clock otherwise; ``restore()`` puts the user's own bound method back.

    Rejected alternatives: swapping ``datetime`` itself in user namespaces (done
    already) does not reach an alias taken from it; wrapping the alias needs the
    same recognition and adds a type of its own; ``sys.setprofile``-style call
    hooks would cost every call of every run.  As for ``time.time``, an alias
    kept in a local, a closure, a default argument or a class body is out of
    reach; ``--check-determinism`` is the backstop there.
    """
    if type(value) not in _BOUND_METHOD_TYPES:
        return None
    owner = getattr(value, "__self__", None)  # compared by identity: it may be unhashable
    name = getattr(value, "__name__", None)
    if owner is _REAL_DATETIME and name in _DATETIME_CLOCKS:
        return getattr(_GuardedDatetime, name)
    if owner is _REAL_DATE and name in _DATE_CLOCKS:
        return getattr(_GuardedDate, name)
    return None


class _Proxy:
    """A module as one stdlib module sees it while the guard is installed."""

    def __init__(self, real: types.ModuleType, **overrides: Callable[..., Any]) -> None:
        self._real = real
        self.__dict__.update(overrides)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


_REAL_TIME = time.time
_REAL_TIME_NS = time.time_ns
_REAL_GETPID = os.getpid


def _in_run() -> bool:
    return bool(ACTIVE) and get_ident() == _GUARDED_THREAD


def _virtual_wall() -> float:
    return outside.EPOCH + ACTIVE[-1].now if _in_run() else _REAL_TIME()


def _virtual_wall_ns() -> int:
    return outside.EPOCH * 1_000_000_000 + round(ACTIVE[-1].now * 1_000_000_000) \
        if _in_run() else _REAL_TIME_NS()


def _virtual_pid() -> int:
    return outside.getpid() if _in_run() else _REAL_GETPID()


_CLOCK = "env.clock.now()"
_RNG = "env.rng (seeded per run)"
_THREADS = "a trio task (nursery.start_soon; threads are not simulated)"
_FILES = "env.store (files are not simulated)"
_PROCESSES = "a fake registered with sim.service and called through env.services"
_NET = ("env.net, or trio's own TCP between processes (trio.open_tcp_stream(name, port), "
        "trio.serve_tcp), which dst simulates")

#: (owner, attribute, replacement, shared): ``shared`` replacements also take the
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
        from .aio import run_sync_inline

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


_MISSING = object()


def _is_trio(name: str) -> bool:
    return name == "trio" or name.startswith("trio.")


_USER_MODULES: list[Any] = [None, []]


def _user_modules() -> list[tuple[str, types.ModuleType]]:
    """Loaded modules outside the standard library and the exempt packages.

    Kept while the set of loaded modules is the same (compared by the names'
    tuple, which is cheap next to judging each module again).
    """
    names = tuple(sys.modules)
    if _USER_MODULES[0] == names:
        return list(_USER_MODULES[1])
    mods = []
    for name, mod in list(sys.modules.items()):
        if mod is None or _exempt(name):
            continue
        path = getattr(mod, "__file__", None)
        if path and isinstance(path, str) and not _in_stdlib(path):
            mods.append((name, mod))
    _USER_MODULES[:] = [names, mods]
    return list(mods)


class _Installed:
    """What ``install`` changed, for ``restore`` to undo."""

    def __init__(self) -> None:
        #: (owner, attribute, original or _MISSING) in the order they were set.
        self.patched: list[tuple[Any, str, Any]] = []
        #: id(replacement) -> (replacement, original): to find traps taken mid-run.
        self.originals: dict[int, tuple[Any, Any]] = {}
        self.modules_before: set[str] = set()
        self.user_modules: list[tuple[str, types.ModuleType]] = []


def _plain_datetime() -> Any:
    global _PLAIN_DATETIME
    if _PLAIN_DATETIME is None:
        _PLAIN_DATETIME = _Proxy(_dt, datetime=_REAL_DATETIME, date=_REAL_DATE)
    return _PLAIN_DATETIME


def _processor_probe(code: types.CodeType) -> bool:
    """Whether ``code`` is ``platform``'s own ``uname -p`` (what ``uname().processor`` runs).

    ``platform.uname().processor`` runs ``uname -p`` in a subprocess the first time
    it is asked (``platform.platform()`` asks it), and keeps the answer: one more
    constant of the machine, as ``platform.machine()`` already is.  An SDK computing
    its platform headers inside a run (openai's ``get_platform``, in a worker thread
    that runs inline) gets it, rather than the refusal of a subprocess that anyone
    else asking for one gets; asked when first needed, it costs a run that never
    asks nothing (it used to be asked at every first install: a fork and an exec).
    """
    if not _PROBE:
        found = getattr(getattr(sys.modules.get("platform"), "_Processor", None),
                        "from_subprocess", None)
        if found is None:
            return False
        _PROBE.append(found.__code__)
    return code is _PROBE[0]


#: The code of ``platform._Processor.from_subprocess``, once platform is imported.
_PROBE: list[types.CodeType] = []


def _install() -> _Installed:
    global _DEPTH, _GUARDED_THREAD
    _plain_datetime()
    state = _Installed()
    shared: dict[int, tuple[Any, Any]] = {}
    entry_points: dict[int, tuple[Any, Any]] = {}
    for owner, attr, replacement, is_shared in _targets():
        original = vars(owner).get(attr, _MISSING)
        state.patched.append((owner, attr, original))
        setattr(owner, attr, replacement)
        if is_shared or isinstance(replacement, _Trap):
            state.originals[id(replacement)] = (replacement, original)
        if is_shared:
            shared[id(original)] = (original, replacement)
            if isinstance(replacement, _Trap) and replacement.entry_point:
                entry_points[id(original)] = (original, replacement)
    state.modules_before = set(sys.modules)
    state.user_modules = _user_modules()
    for _, mod in state.user_modules:
        _swap(state, mod, shared, "user")
    # trio's own modules hold entry points too (trio.Path calls ``run_sync`` by a
    # name imported from trio.to_thread); only those are swapped there.
    for name, mod in list(sys.modules.items()):
        if mod is not None and _is_trio(name):
            _swap(state, mod, entry_points, "trio")
    _GUARDED_THREAD = get_ident()
    _DEPTH += 1
    return state


#: Per module namespace and table kind: (namespace, its size, the names that held
#: an original) at the last full scan.  Installing scans every loaded module's
#: namespace, which in a test process with hundreds of modules costs more than a
#: run; a namespace of the same size is looked at again only at the names that
#: matched before.  A module that rebinds one of its names to ``time.time`` while
#: keeping its size is the case this misses; ``--check-determinism`` is the
#: backstop there, as for references taken into locals.
_SCANS: dict[tuple[int, str], tuple[dict[str, Any], int, tuple[str, ...]]] = {}


def _swap(state: _Installed, mod: types.ModuleType, table: dict[int, tuple[Any, Any]],
          kind: str) -> None:
    namespace = vars(mod)
    key = (id(namespace), kind)
    cached = _SCANS.get(key)
    full = cached is None or cached[0] is not namespace or cached[1] != len(namespace)
    names = list(namespace) if full or cached is None else cached[2]
    matched = []
    user = kind == "user"
    name = mod.__name__
    for attr in names:
        value = namespace.get(attr, _MISSING)
        hit = table.get(id(value))
        if hit is not None and hit[0] is value:
            replacement = hit[1]
            if user and replacement in _STANDS_FOR and not _names_datetime_clock(mod):
                continue  # ``from datetime import datetime``, as a type only
        elif user and (alias := _clock_alias(value)) is not None:
            replacement = alias  # ``NOW = datetime.datetime.now``: see _clock_alias
        elif user and value is _dt and not _names_datetime_clock(mod):
            replacement = _PLAIN_DATETIME  # ``import datetime``, as types only
        else:
            if user and _swap_inside(state, value, name, table):
                matched.append(attr)  # looked inside again on the next install
            continue
        matched.append(attr)
        state.patched.append((mod, attr, value))
        namespace[attr] = replacement
    if full:
        _SCANS[key] = (namespace, len(namespace), tuple(matched))


def _replacement(value: Any, table: dict[int, tuple[Any, Any]]) -> Any:
    """The trap (or stand-in) that takes ``value``'s place, or ``_MISSING``."""
    hit = table.get(id(value))
    if hit is not None and hit[0] is value:
        return hit[1]
    alias = _clock_alias(value)
    return _MISSING if alias is None else alias


def _swap_function(state: _Installed, fn: Any, table: dict[int, tuple[Any, Any]]) -> bool:
    """Swap the originals a function holds in its defaults and closure cells."""
    swapped = False
    defaults = fn.__defaults__
    if defaults:
        new = tuple(v if (r := _replacement(v, table)) is _MISSING else r for v in defaults)
        if any(a is not b for a, b in zip(new, defaults, strict=True)):
            state.patched.append((fn, "__defaults__", defaults))
            fn.__defaults__ = new
            swapped = True
    kwdefaults = fn.__kwdefaults__
    if kwdefaults:
        changed = {k: r for k, v in kwdefaults.items()
                   if (r := _replacement(v, table)) is not _MISSING}
        if changed:
            state.patched.append((fn, "__kwdefaults__", kwdefaults))
            fn.__kwdefaults__ = {**kwdefaults, **changed}
            swapped = True
    for cell in fn.__closure__ or ():
        try:
            value = cell.cell_contents
        except ValueError:  # a cell not filled yet
            continue
        replacement = _replacement(value, table)
        if replacement is not _MISSING:
            state.patched.append((cell, "cell_contents", value))
            cell.cell_contents = replacement
            swapped = True
    return swapped


def _swap_inside(state: _Installed, value: Any, module: str,
                 table: dict[int, tuple[Any, Any]]) -> bool:
    """Swap the originals that a function or class defined in ``module`` holds: a
    function's defaults and closure cells (``def f(clock=time.time)``), a class's
    attributes, its methods' defaults and closures (a dataclass's generated
    ``__init__`` keeps ``field(default=time.time)`` as a default and a
    ``default_factory`` in a closure cell) and its dataclass fields.  True when
    anything was swapped.  Bound before the run, these are what library code
    calls its clock through (the MCP SDK's ``clock: Callable = time.time``).
    """
    # Only ``type()`` is asked of what the namespace holds: ``isinstance`` would ask a
    # lazy proxy (openai's ``resources``) for its ``__class__``, importing what it stands for.
    kind = type(value)
    if kind is types.FunctionType:
        return value.__module__ == module and _swap_function(state, value, table)
    if not issubclass(kind, type) or value.__module__ != module:
        return False
    swapped = False
    for attr, member in list(vars(value).items()):
        replacement = _replacement(member, table)
        if replacement is not _MISSING:
            state.patched.append((value, attr, member))
            setattr(value, attr, replacement)
            swapped = True
            continue
        kind = type(member)
        if kind is staticmethod or kind is classmethod:
            member = member.__func__
        elif kind is property:
            member = member.fget
        if type(member) is types.FunctionType:
            swapped = _swap_function(state, member, table) or swapped
    fields = vars(value).get("__dataclass_fields__")
    if isinstance(fields, dict):
        for field in fields.values():
            for attr in ("default", "default_factory"):
                member = getattr(field, attr, None)
                replacement = _replacement(member, table)
                if replacement is not _MISSING:
                    state.patched.append((field, attr, member))
                    setattr(field, attr, replacement)
                    swapped = True
    return swapped


def _put_back(owner: Any, originals: dict[int, tuple[Any, Any]]) -> None:
    for attr, value in list(vars(owner).items()):
        hit = originals.get(id(value))
        if hit is not None and hit[0] is value and hit[1] is not _MISSING:
            setattr(owner, attr, hit[1])


def _restore(state: _Installed) -> None:
    global _DEPTH
    _DEPTH -= 1
    for owner, attr, original in reversed(state.patched):
        if original is _MISSING:
            with contextlib.suppress(AttributeError):
                delattr(owner, attr)
        else:
            setattr(owner, attr, original)
    # References taken while the guard was installed: a user module that did
    # ``x = time.time`` at run time, a module first imported during the run
    # (``from time import time`` bound the trap), and the classes it defined.
    originals = state.originals
    for _, mod in state.user_modules:
        cached = _SCANS.get((id(vars(mod)), "user"))
        if cached is None or cached[1] != len(vars(mod)):
            _put_back(mod, originals)  # names added during the run may hold a trap
    before = state.modules_before
    for name, mod in list(sys.modules.items()):
        if mod is None or name in before:
            continue
        _put_back(mod, originals)
        for value in list(vars(mod).values()):
            if isinstance(value, type) and value.__module__ == name:
                with contextlib.suppress(AttributeError, TypeError):
                    _put_back(value, originals)


class Guard:
    """Installs the traps; ``restore()`` undoes them (idempotent, safe in any ``finally``)."""

    def __init__(self) -> None:
        self._state: _Installed | None = None

    @property
    def active(self) -> bool:
        return self._state is not None

    def install(self) -> None:
        if self._state is None:
            self._state = _install()

    def restore(self) -> None:
        if self._state is not None:
            state, self._state = self._state, None
            _restore(state)


@contextlib.contextmanager
def guard() -> Iterator[None]:
    """Trap every nondeterministic call for the duration; restore everything after."""
    g = Guard()
    g.install()
    try:
        yield
    finally:
        g.restore()
