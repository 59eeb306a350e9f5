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
trapped like ``from time import time``; see :func:`.install._clock_alias` for why they
need their own test.  References bound before the run inside functions and
classes of those modules are swapped too: a function's default arguments and
closure cells (``def f(clock=time.time)``; a dataclass's generated
``__init__`` holds ``field(default=time.time)`` there, and a ``default_factory``
in a closure cell), a class's attributes (a dataclass default) and its
dataclass fields (:func:`.install._swap_inside`).

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

Where each part lives: ``blame`` decides whom a trapped call is charged to (the
user's code, a library's, exempt code) and refuses it; ``traps`` holds the traps,
the stand-ins for ``datetime``'s classes and the state they judge by; ``targets``
lists what is replaced and what a library's call gets instead; ``install`` sets the
traps, swaps them into the references user modules hold, and puts everything back.
This module is the face: :class:`Guard`, :func:`guard` and :func:`refuse`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from .blame import _in_stdlib as _in_stdlib
from .blame import _module_of as _module_of
from .blame import refuse as refuse
from .install import _install, _Installed, _restore


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
