"""Traps the ways code inside a simulated run could read the real world.

Inside a run, the wall clock, the global ``random`` generator, ``os.urandom``,
``uuid1``/``uuid4``, starting a thread and opening a socket each raise
:class:`NondeterminismError`, naming the call site and what to use instead.

How: the guard swaps the module attributes (``time.time``, ``random.random``,
``datetime.datetime``, ...) for traps, and also every reference to them that
non-standard-library modules hold (``from time import time`` in user code), and
puts everything back on exit.  References taken into a local variable or a
default argument before the run cannot be reached; ``docs/design.md``
says so.  trio's own internals are let through: they never decide anything a
run can observe.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import random
import socket
import sys
import sysconfig
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

from ..errors import NondeterminismError

_STDLIB = os.path.realpath(sysconfig.get_paths()["stdlib"])

#: Modules whose references to trapped callables are left alone: trio runs the
#: simulation, and the libraries dst is made of read nothing a run observes.
_EXEMPT_PREFIXES = (
    "trio", "outcome", "sniffio", "structlog", "click", "hypothesis", "_pytest",
    "pytest", "pluggy", "dst.sim", "dst.trace", "dst.runner", "dst.explore", "dst.cli",
    "coverage", "_hypothesis",
)


def _call_site(depth: int = 2) -> tuple[str, str]:
    frame = sys._getframe(depth)
    return frame.f_globals.get("__name__", "?"), f"{frame.f_code.co_filename}:{frame.f_lineno}"


def _exempt(module: str) -> bool:
    return module.startswith(_EXEMPT_PREFIXES)


def _trap(name: str, original: Callable[..., Any], instead: str) -> Callable[..., Any]:
    def trapped(*args: Any, **kwargs: Any) -> Any:
        module, site = _call_site()
        if _exempt(module):
            return original(*args, **kwargs)
        raise NondeterminismError(
            f"{name}() called at {site} inside a simulated run; use {instead} instead"
        )

    trapped.__name__ = getattr(original, "__name__", name)
    trapped.__wrapped__ = original  # type: ignore[attr-defined]
    return trapped


class _GuardedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz: Any = None) -> Any:
        _raise_datetime("datetime.now")

    @classmethod
    def utcnow(cls) -> Any:
        _raise_datetime("datetime.utcnow")

    @classmethod
    def today(cls) -> Any:
        _raise_datetime("datetime.today")


class _GuardedDate(_dt.date):
    @classmethod
    def today(cls) -> Any:
        _raise_datetime("date.today")


def _raise_datetime(name: str) -> None:
    _, site = _call_site(3)
    raise NondeterminismError(
        f"{name}() called at {site} inside a simulated run; use env.clock.now() instead"
    )


_CLOCK = "env.clock.now()"
_RNG = "env.rng (seeded per run)"


def _targets() -> list[tuple[ModuleType, str, Any]]:
    """(module, attribute, replacement) for every trapped name."""
    out: list[tuple[ModuleType, str, Any]] = []
    for name in ("time", "time_ns", "monotonic", "monotonic_ns"):
        out.append((time, name, _trap(f"time.{name}", getattr(time, name), _CLOCK)))
    for name in (
        "random", "randint", "randrange", "choice", "choices", "shuffle", "sample",
        "uniform", "getrandbits", "gauss", "randbytes", "seed",
    ):
        out.append((random, name, _trap(f"random.{name}", getattr(random, name), _RNG)))
    out.append((os, "urandom", _trap("os.urandom", os.urandom, "env.rng.randbytes(n)")))
    for name in ("uuid1", "uuid4"):
        out.append(
            (uuid, name, _trap(f"uuid.{name}", getattr(uuid, name),
                               "uuid.UUID(int=env.rng.getrandbits(128), version=4)"))
        )
    import trio

    no_threads = "a trio task (threads are not simulated)"
    out.append((trio.to_thread, "run_sync",
                _trap("trio.to_thread.run_sync", trio.to_thread.run_sync, no_threads)))
    for name in ("socket", "socketpair"):
        original = getattr(trio.socket, name)
        out.append((trio.socket, name, _trap(f"trio.socket.{name}", original, "env.net")))
    for name in ("open_tcp_stream", "open_tcp_listeners", "serve_tcp"):
        out.append((trio, name, _trap(f"trio.{name}", getattr(trio, name), "env.net")))
    out.append((_dt, "datetime", _GuardedDatetime))
    out.append((_dt, "date", _GuardedDate))
    return out


def _thread_start(self: threading.Thread) -> None:
    module, site = _call_site()
    if _exempt(module):
        return _ORIGINAL_THREAD_START(self)
    raise NondeterminismError(
        f"threading.Thread.start() called at {site} inside a simulated run; "
        "use a trio task (nursery.start_soon) instead"
    )


def _socket_init(self: socket.socket, *args: Any, **kwargs: Any) -> None:
    module, site = _call_site()
    if _exempt(module):
        return _ORIGINAL_SOCKET_INIT(self, *args, **kwargs)
    raise NondeterminismError(
        f"socket.socket() called at {site} inside a simulated run; use env.net instead"
    )


_ORIGINAL_THREAD_START = threading.Thread.start
_ORIGINAL_SOCKET_INIT = socket.socket.__init__


_OUTSIDE_STDLIB: dict[str, bool] = {}


def _user_modules() -> list[ModuleType]:
    mods = []
    for name, mod in list(sys.modules.items()):
        if mod is None or _exempt(name):
            continue
        path = getattr(mod, "__file__", None)
        if not path:
            continue
        outside = _OUTSIDE_STDLIB.get(path)
        if outside is None:
            outside = _OUTSIDE_STDLIB[path] = not os.path.realpath(path).startswith(_STDLIB)
        if not outside:
            continue
        mods.append(mod)
    return mods


class Guard:
    """Installs the traps; ``restore()`` undoes them (idempotent, safe in any ``finally``)."""

    def __init__(self) -> None:
        self._patched: list[tuple[Any, str, Any]] = []
        self.active = False

    def install(self) -> None:
        if not self.active:
            self._patched = _install()
            self.active = True

    def restore(self) -> None:
        if self.active:
            _restore(self._patched)
            self._patched = []
            self.active = False


@contextlib.contextmanager
def guard() -> Iterator[None]:
    """Trap every nondeterministic call for the duration; restore everything after."""
    g = Guard()
    g.install()
    try:
        yield
    finally:
        g.restore()


def _install() -> list[tuple[Any, str, Any]]:
    patched: list[tuple[Any, str, Any]] = []
    replacements: dict[int, Any] = {}
    for module, attr, trap in _targets():
        original = getattr(module, attr)
        replacements[id(original)] = trap
        patched.append((module, attr, original))
        setattr(module, attr, trap)
    for mod in _user_modules():
        namespace = vars(mod)
        for attr, value in list(namespace.items()):
            trap = replacements.get(id(value))
            if trap is not None and not isinstance(value, (int, str)):
                patched.append((mod, attr, value))
                namespace[attr] = trap
    threading.Thread.start = _thread_start  # type: ignore[method-assign]
    socket.socket.__init__ = _socket_init  # type: ignore[method-assign]
    return patched


def _restore(patched: list[tuple[Any, str, Any]]) -> None:
    threading.Thread.start = _ORIGINAL_THREAD_START  # type: ignore[method-assign]
    socket.socket.__init__ = _ORIGINAL_SOCKET_INIT  # type: ignore[method-assign]
    for module, attr, original in reversed(patched):
        setattr(module, attr, original)
