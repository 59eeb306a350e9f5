"""What a blocked asyncio task waits on, for a ``Deadlock`` message.

``"P/worker waits in asyncio.Event.wait at worker.py:23 in worker"``: the
library call the task waits in, and the user's line that made it, read off
the task's coroutine chain.
"""

from __future__ import annotations

import asyncio
import os
from types import FrameType
from typing import Any

from .state import LoopState


class Waits(LoopState):
    """The loop's blocked tasks, described."""

    def stuck(self) -> list[str]:
        """What each blocked asyncio task waits on, for a ``Deadlock`` message."""
        out = []
        for task in self._pending():
            waiter = getattr(task, "_fut_waiter", None)
            if isinstance(waiter, asyncio.Task) or type(waiter).__name__ == "_GatheringFuture":
                continue  # it waits for other tasks, which are named themselves
            label = getattr(task, "_dst_label", "") or self._name
            out.append(f"{label} waits in {_describe(task)}")
        return out


_LIBRARY = ("asyncio", "dst.sim", "trio", "outcome")


def _is_library(frame: FrameType) -> bool:
    module = frame.f_globals.get("__name__", "")
    return any(module == p or module.startswith(p + ".") for p in _LIBRARY)


def _describe(task: asyncio.Task[Any]) -> str:
    """``"asyncio.Event.wait at worker.py:23 in worker"``, or what can be said."""
    frames: list[FrameType] = []
    coro: Any = task.get_coro()
    awaited: Any = None
    for _ in range(200):
        if coro is None:
            break
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None) \
            or getattr(coro, "ag_frame", None)
        if frame is not None:
            frames.append(frame)
        nxt = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None) \
            or getattr(coro, "ag_await", None)
        if nxt is None or not (hasattr(nxt, "cr_frame") or hasattr(nxt, "gi_frame")
                               or hasattr(nxt, "ag_frame")):
            awaited = nxt
            break
        coro = nxt
    user: FrameType | None = None
    lib: FrameType | None = None
    for frame in frames:
        if _is_library(frame):
            if user is not None and not frame.f_code.co_name.startswith("__"):
                lib = frame
                break
            continue
        user = frame
    if lib is None and user is None:
        lib = next((f for f in frames if _is_library(f)), None)  # the task's own function
    if lib is not None:
        owner = lib.f_locals.get("self")
        qual = (f"{type(owner).__name__}.{lib.f_code.co_name}" if owner is not None
                else lib.f_code.co_name)
        module = lib.f_globals.get("__name__", "")
        if module.startswith(__package__ + "."):
            module = __package__  # this package's parts by its name
        what = f"{'asyncio' if module.startswith('asyncio') else module}.{qual}"
    elif awaited is not None:
        kind = type(awaited).__name__
        what = "a future" if asyncio.isfuture(awaited) or kind.endswith("FutureIter") \
            else f"a {kind}"
    else:
        what = "an unknown wait"
    if user is None:
        return what
    code = user.f_code
    return f"{what} at {os.path.basename(code.co_filename)}:{user.f_lineno} in {code.co_name}"
