"""The thread that stops a ``@dst.test`` seed running past its wall-clock timeout."""

from __future__ import annotations

import ctypes
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .body import _Setup


class _SeedTimedOut(KeyboardInterrupt):
    """Raised in the test's thread by :class:`_Watchdog`: a seed ran past its timeout.

    A ``KeyboardInterrupt``, so that it leaves the run as Ctrl-C does: a process's
    other exceptions are findings the run carries on after.
    """


#: Wakes of the watchdog per timeout: how late past it a stuck seed may be stopped.
_TICKS = 4


class _Watchdog:
    """A thread that stops a seed running longer than ``timeout`` wall-clock seconds.

    A loop without ``await`` never hands the scheduler a decision, so nothing in the
    simulation can stop it (and nothing there reads the wall clock).  ``dst run``
    stops such a seed's worker process; a test runs its seeds in pytest's own
    process, so this thread raises :class:`_SeedTimedOut` in the test's thread
    instead (``PyThreadState_SetAsyncExc``: delivered between two bytecodes of the
    loop).  The run it interrupts is abandoned: the test fails naming the seed.
    A seed is seen to start by its setup (``_Setup.started``), so the thread wakes
    four times a ``timeout`` and costs the seeds nothing: a seed is stopped between
    one and one and a quarter ``timeout`` after it started, and again a ``timeout``
    later if the first stop was caught on its way (by code under test, say).
    """

    def __init__(self, setup: _Setup, timeout: float) -> None:
        self.setup = setup
        self.timeout = timeout
        self.target = threading.get_ident()
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="dst-seed-timeout",
                                       daemon=True)

    def __enter__(self) -> _Watchdog:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self.lock:  # no stop is raised once the seeds are done
            self.done.set()
        self.thread.join()

    def _watch(self) -> None:
        seen, ticks = self.setup.started, 0
        while not self.done.wait(self.timeout / _TICKS):
            with self.lock:
                if self.done.is_set():
                    return
                if self.setup.started != seen:
                    seen, ticks = self.setup.started, 0
                    continue
                ticks += 1
                if ticks == _TICKS:  # the same seed for a whole timeout at least
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(
                        ctypes.c_ulong(self.target), ctypes.py_object(_SeedTimedOut))
                    ticks = 0
