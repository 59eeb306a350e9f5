"""What asyncio code calls on a simulated loop, and asyncio's view while it runs.

``call_soon`` (a ``Handle`` filled without its ``__init__``; one made from
outside the loop's callbacks continues the decision that made it, and wakes
the driver), the debug flag, the exception handler (an exception nobody will
see is a finding), the async generator hooks, and what ``_enter`` sets while
the loop's callbacks run: the running loop, sniffio's answer, the hooks and
``asyncio.eager_task_factory``.  ``run_forever``, ``run_until_complete`` and
``close`` are refused: dst runs the loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
import weakref
from asyncio import events
from collections.abc import Callable
from typing import Any, cast

import sniffio

from .state import LoopState
from .tasks import _EAGER, _EAGER_HOMES, _eager_task_factory, _Named

_set_running_loop = events._set_running_loop
_get_hooks = sys.get_asyncgen_hooks
_set_hooks = sys.set_asyncgen_hooks
_sniffio_local = sniffio.thread_local

_Handle = events.Handle
_new_handle = events.Handle.__new__
#: Whether ``call_soon`` may fill a ``Handle``'s fields itself: they are those it knows.
_FAST_HANDLE = set(getattr(_Handle, "__slots__", ())) == {
    "_callback", "_args", "_cancelled", "_loop", "_source_traceback", "_repr", "__weakref__",
    "_context"}


class Callbacks(LoopState):
    """The loop as asyncio code sees it (see the module docstring)."""

    def call_soon(self, callback: Callable[..., object], *args: Any,  # type: ignore[override]
                  context: Any = None) -> events.Handle:
        handle: Any
        if not _FAST_HANDLE or self._debug:
            handle = events.Handle(callback, args, self, context)
        else:  # ``Handle.__init__`` without its frame and its ``get_debug`` call
            handle = _new_handle(_Handle)
            handle._context = contextvars.copy_context() if context is None else context
            handle._loop = self
            handle._callback = callback
            handle._args = args
            handle._cancelled = False
            handle._repr = None
            handle._source_traceback = None
        if self._dead:
            handle.cancel()
            return handle  # type: ignore[no-any-return]
        self._ready.append(handle)
        if self._saved is None:  # not from a callback of this loop: a decision's continuation
            self._urgent.append(handle)
            if not self._replying:  # (the driver's own reply to its call: it runs now)
                self._wakeup()
        return handle  # type: ignore[no-any-return]

    def set_debug(self, enabled: bool) -> None:
        super().set_debug(enabled)
        # What asyncio's futures and tasks ask at their creation, answered in C.
        self.get_debug = bool(enabled).__bool__  # type: ignore[method-assign]

    call_soon_threadsafe = call_soon  # type: ignore[assignment]

    def _write_to_self(self) -> None:
        pass  # no threads, no self-pipe

    def run_forever(self) -> None:
        raise RuntimeError("dst runs this event loop: await what you would have run on it")

    def run_until_complete(self, future: Any) -> Any:
        close = getattr(future, "close", None)
        if close is not None and asyncio.iscoroutine(future):
            close()
        raise RuntimeError("dst runs this event loop: await what you would have run on it")

    def close(self) -> None:
        raise RuntimeError("Cannot close a running event loop")

    def is_running(self) -> bool:
        return not self._dead

    def __del__(self) -> None:
        pass  # never closed by its user: dst ends it (asyncio would warn "unclosed")

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        """An exception nobody will see (a task's never retrieved, a callback's): a finding.

        Reported at once when it is found while the loop's callbacks run; found
        elsewhere (a finalizer run wherever the task's last reference went,
        inside the kernel even), it waits for the driver's next step.
        """
        exc = context.get("exception")
        if exc is None or self._dead or self._sim._stopping:
            return
        task = context.get("task") or context.get("future")
        label = getattr(task, "_dst_label", "") or self._name
        if self._saved is not None:
            self._sim.uncaught(cast("Any", _Named(label)), exc)
            return
        self._unseen.append((label, exc))
        if self._idle or self._inline is not None:
            self._wakeup()

    def _report_unseen(self) -> None:
        label, exc = self._unseen.pop(0)
        self._unseen.clear()
        if not self._sim._stopping:
            self._sim.uncaught(cast("Any", _Named(label)), exc)

    def _asyncgen_firstiter_hook(self, agen: Any) -> None:
        self._made += 1
        if self._agens is None:
            self._agens = weakref.WeakValueDictionary()
        self._agens[self._made] = agen
        self._asyncgens.add(agen)

    def _asyncgen_finalizer_hook(self, agen: Any) -> None:
        self._asyncgens.discard(agen)
        if not self._dead:
            self.call_soon(self.create_task, agen.aclose())

    def _enter(self) -> None:
        """asyncio's view while the loop's callbacks run: its running loop, sniffio's
        answer, the async generator hooks and ``asyncio.eager_task_factory`` are this
        loop's."""
        _set_running_loop(self)
        self._saved = (_sniffio_local.name, _get_hooks())
        _sniffio_local.name = "asyncio"
        hooks = self._hooks or (self._asyncgen_firstiter_hook, self._asyncgen_finalizer_hook)
        _set_hooks(hooks[0], hooks[1])
        if _EAGER is not None:
            for home in _EAGER_HOMES:
                home["eager_task_factory"] = _eager_task_factory

    def _exit(self) -> None:
        _set_running_loop(None)
        saved = self._saved
        if saved is not None:
            self._saved = None
            _sniffio_local.name = saved[0]
            hooks = saved[1]
            _set_hooks(hooks[0], hooks[1])
        if _EAGER is not None:
            for home in _EAGER_HOMES:
                home["eager_task_factory"] = _EAGER
