"""The traps themselves: the callable stand-in for a function that reads the real world,
the stand-ins for ``datetime``'s classes, the module proxies ``logging`` sees, and the
state they judge by (installs in force, the thread that runs the simulation).  See
:mod:`dst.sim.guard` for the design."""

from __future__ import annotations

import datetime as _dt
import os
import sys
import time
import types
from _thread import get_ident
from collections.abc import Callable
from typing import Any

from .. import outside
from ..kernel import ACTIVE
from .blame import _culprit, _fire, _virtualised

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
