"""What a blocked task waits on, in the user's words: for deadlock reports.

A task blocked at the end of a run is suspended in a chain of coroutines, from
the user's function down to a trio primitive (``Lock.acquire``,
``Event.wait``, ``sleep_forever``, a channel's ``receive``...).  The report
names the primitive (the outermost frame inside trio) and where the user's
code awaited it (the innermost frame outside trio and dst), which is the line
a reader needs to find the wait.
"""

from __future__ import annotations

import os
from types import CodeType, FrameType
from typing import Any

import trio.lowlevel as ll

from .outside import dst_machinery

_LIBRARY_PREFIXES = ("trio", "dst.sim", "outcome")


def _frames(task: ll.Task) -> list[FrameType]:
    """The suspended frames of ``task``, outermost first."""
    out: list[FrameType] = []
    coro: Any = task.coro
    seen = 0
    while coro is not None and seen < 200:
        seen += 1
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            out.append(frame)
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return out


#: Module name -> whether it belongs to trio, the kernel or outcome (asked per frame).
_LIBRARY: dict[str, bool] = {}


def _is_library(frame: FrameType) -> bool:
    module = frame.f_globals.get("__name__", "")
    known = _LIBRARY.get(module)
    if known is None:
        known = _LIBRARY[module] = any(
            module == p or module.startswith(p + ".") for p in _LIBRARY_PREFIXES)
    return known


#: Module name -> whether it is dst's machinery outside :data:`_LIBRARY_PREFIXES`
#: (``outside.dst_machinery``: the small form's wrapper around a test body, the
#: runners, the commands), nobody's line; dst's runtime, fakes and agents can be one.
_MACHINERY: dict[str, bool] = {}


def _is_machinery(frame: FrameType) -> bool:
    module = frame.f_globals.get("__name__", "")
    known = _MACHINERY.get(module)
    if known is None:
        known = _MACHINERY[module] = dst_machinery(module)
    return known


def _where(frame: FrameType) -> str:
    code: CodeType = frame.f_code
    return f"{os.path.basename(code.co_filename)}:{frame.f_lineno} in {code.co_name}"


def _waited_in(task: ll.Task) -> tuple[FrameType | None, FrameType | None]:
    """The library frame ``task`` waits in, and the user frame that awaited it.

    The library frame is the first one inside trio, the kernel or outcome below
    a user frame (a dunder such as ``__aenter__`` skipped: the method it calls
    is the wait); with no user frame above a library one, the task's own
    function is the wait, and it is the outermost library frame.
    """
    frames = _frames(task)
    user: FrameType | None = None
    for frame in frames:
        if _is_library(frame):
            if user is None or frame.f_code.co_name.startswith("__"):
                continue  # dst's own wrapper around the process's main; ``async with``
            return frame, user
        if not _is_machinery(frame):
            user = frame
    for frame in frames:
        if _is_library(frame):
            return frame, user
    return None, user


def _named(frame: FrameType) -> str:
    owner = frame.f_locals.get("self")
    name = frame.f_code.co_name
    qual = f"{type(owner).__name__}.{name}" if owner is not None else name
    module = frame.f_globals.get("__name__", "")
    return f"{'trio' if module.startswith('trio') else module}.{qual}"


def describe_wait(task: ll.Task) -> str:
    """``"trio.Lock.acquire at bank.py:23 in withdraw"``, or what can be said."""
    frame, user = _waited_in(task)
    waits_on = _named(frame) if frame is not None else "an unknown wait"
    return f"{waits_on} at {_where(user)}" if user is not None else waits_on


def lock_waited_on(task: ll.Task) -> Any:
    """The ``trio.Lock`` (or other owned lock) ``task`` is blocked acquiring, if any."""
    for frame in _frames(task):
        if _is_library(frame) and frame.f_code.co_name == "acquire":
            lock = frame.f_locals.get("self")
            stats = getattr(lock, "statistics", None)
            if stats is not None and hasattr(stats(), "owner"):
                return lock
    return None


def in_lock_cycle(task: ll.Task) -> bool:
    """``task`` waits for a lock whose owner waits (transitively) for one ``task`` holds."""
    seen: set[int] = set()
    current: ll.Task | None = task
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        lock = lock_waited_on(current)
        if lock is None:
            return False
        current = lock.statistics().owner
        if current is task:
            return True
    return False


def user_frames(tb: Any, limit: int = 8) -> tuple[str, ...]:
    """``file:line in func`` for a traceback's frames outside trio, the kernel and the
    rest of dst's machinery (the small form's wrapper around a test body).

    File names are base names: a trace must read the same on every machine.
    The innermost frame comes last, as in a Python traceback.
    """
    out: list[str] = []
    while tb is not None:
        frame = tb.tb_frame
        if not _is_library(frame) and not _is_machinery(frame):
            code = frame.f_code
            out.append(f"{os.path.basename(code.co_filename)}:{tb.tb_lineno} in {code.co_name}")
        tb = tb.tb_next
    return tuple(out[-limit:])

def users_line(tb: Any, owners: Any) -> str | None:
    """``file:line in func`` of the innermost frame of ``tb`` that is the user's code (by
    ``owners``, a :class:`~dst.sim.outside.CodeOwners`): not the standard library, not an
    installed library, not trio or dst's machinery; None when no frame is."""
    from .guard import _in_stdlib, _module_of

    found: str | None = None
    while tb is not None:
        frame = tb.tb_frame
        module, filename = _module_of(frame), frame.f_code.co_filename
        if not _is_library(frame) and not _is_machinery(frame) \
                and not _in_stdlib(filename) and owners.is_users(module, filename):
            found = f"{os.path.basename(filename)}:{tb.tb_lineno} in {frame.f_code.co_name}"
        tb = tb.tb_next
    return found


def task_name(task: ll.Task) -> str:
    """A task's readable, stable name: its function's, never a memory address.

    trio names a task after its function, or after ``repr`` of a callable
    object, which holds an address that differs between runs (and would sort
    the enabled options differently).
    """
    name = task.name
    if " at 0x" in name or name.startswith("<"):
        qual = getattr(task.coro, "__qualname__", "") or "task"
        name = qual[: -len(".__call__")] if qual.endswith(".__call__") else qual
    return name.rsplit(".", 1)[-1]
