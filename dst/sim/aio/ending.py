"""How a simulated loop ends: its main returned, its process crashed, the run ended.

When ``main`` returns, the tasks left are cancelled and the async generators
closed, as ``asyncio.run`` does (``_shutdown``).  A crash, or the run's
stop, kills the loop: no callback of it runs again, and each pending task's
coroutine is ended now, its ``finally`` blocks run once (``_kill``).  A task
whose exception nobody retrieved is a ``NoUncaughtError`` at the process's end
or the run's (``report_unretrieved``), never after a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from typing import Any, cast

from .state import LoopState
from .tasks import _Named

_enter_task = asyncio.tasks._enter_task
_leave_task = asyncio.tasks._leave_task


class Ending(LoopState):
    """The loop's shutdown, its death and its retirement."""

    def _shutdown(self) -> bool:
        """The main task is done: as ``asyncio.run`` ends, cancel what is left, then
        close the async generators; True once nothing is left."""
        pending = self._pending()
        if pending:
            if not self._closing:
                self._closing = True
                self._enter()
                try:
                    for task in pending:
                        task.cancel()
                finally:
                    self._exit()
            return False
        agens = [a for _, a in sorted(self._agens.items())] if self._agens else []
        if agens:
            self._agens = None
        if agens:
            self._enter()
            try:
                for agen in agens:
                    self.create_task(agen.aclose())
            finally:
                self._exit()
            return False
        return True

    def _unretrieved(self) -> tuple[str, BaseException] | None:
        """The first task (in creation order) that failed and whose exception nobody
        retrieved, nor will: no callback of the task's is still waiting to run (an
        awaiter's wake-up, ``gather``'s), which would get it first.  Its label and
        its exception, now marked retrieved; None when there is none."""
        main = self._main
        waiting = {id(arg) for handle in self._ready if not handle._cancelled
                   for arg in handle._args}
        for task in self._all_tasks():
            if (task is main or not task.done() or task.cancelled()
                    or not task._log_traceback or id(task) in waiting):
                continue
            exc = task.exception()
            if exc is not None:
                return getattr(task, "_dst_label", "") or self._name, exc
        return None

    def report_unretrieved(self) -> bool:
        """The run ends while this loop's process still runs (at rest, at a ``Deadlock``,
        at the step bound, once every ``eventually`` held): a task that failed and whose
        exception nobody retrieved is the run's ``NoUncaughtError``; True if so.

        asyncio says so when such a task is collected ("Task exception was never
        retrieved"), which ending a program that still holds it would do; a task
        whose process crashed is not reported (``_kill``), as a killed program
        logs nothing.  Asked before the run's other findings at its end (the
        kernel's ``_stop`` and ``_end_quiescent``): the failed task is the likelier
        cause of a ``Deadlock``, and was found first.
        """
        sim = self._sim
        if self._dead or sim._stopping:
            return False
        unseen = self._unseen
        found = unseen[0] if unseen else self._unretrieved()
        if found is None:
            return False
        unseen.clear()
        sim.uncaught(cast("Any", _Named(found[0])), found[1])
        return True

    def crashed(self) -> None:
        """The process crashed (``Sim._bury``): the calls its bridges have parked
        leave the enabled set, unrecorded, as a cancelled trio task's do."""
        self._dead = True
        parked = self._sim._parked
        for bridge in self._bridges:
            parked.pop(bridge, None)
        if self._inline is not None:
            parked.pop(self._driver, None)  # the call its driver makes for a bridge
        self._drain_pool()

    def _kill(self) -> None:
        """The process crashed or the run stopped: no callback of this loop runs again.

        Each pending task's coroutine is ended (creation order, ``_close``), so
        its ``finally`` blocks run now, once, with every ``env`` call refused, as
        a trio task's do while it unwinds; then the loop's async generators that
        no task was inside are closed.
        """
        if self._killed:
            return
        self._killed = self._dead = True
        self._deferred = None
        self._ready.clear()
        self._urgent.clear()
        self._pick = None
        for timer in self._scheduled:
            timer._scheduled = False
        self._scheduled.clear()
        sleepers = self._sim._sleepers
        if sleepers:
            sleepers.pop(self._driver, None)
        tasks = self._all_tasks()
        labels = self._sim._task_labels
        self._enter()
        try:
            for task in tasks:
                labels[self._driver] = getattr(task, "_dst_label", "") or self._name
                task._log_destroy_pending = False  # type: ignore[attr-defined]
                task._log_traceback = False
                if task.done():
                    continue
                coro = task.get_coro()
                # Closed as if in a step of its own task (its context, the current task),
                # as what its finally blocks call may ask (anyio's cancel scopes do).
                context = getattr(task, "_dst_context", None)
                entered = False
                try:
                    _enter_task(self, task)
                    entered = True
                    _close(coro, context)
                finally:
                    if entered:
                        _leave_task(self, task)
            labels[self._driver] = self._name
            for _, agen in sorted(self._agens.items()) if self._agens else ():
                _close_agen(agen)
        finally:
            self._exit()

    def _retire(self) -> None:
        """The driver is leaving: the kernel forgets the loop; nothing keeps the run."""
        sim = self._sim
        self._dead = True
        loops = sim._loops
        if loops is not None:
            loops.pop(self._driver, None)
        sleepers = sim._sleepers
        if sleepers:
            sleepers.pop(self._driver, None)
        for task in self._all_tasks():
            task._log_destroy_pending = False  # type: ignore[attr-defined]
            task._log_traceback = False
        self._ready.clear()
        self._scheduled.clear()
        self._drain_pool()
        # Nothing reaches the loop from its main task any more: without that cycle
        # (loop, main task, coroutine; loop, its hooks) the loop, its tasks and its
        # driver are freed here, not by the collector between seeds.
        self._main = None
        self._hooks = None


#: Awaits a killed task's finally blocks may start before it is left as it is (each
#: one is interrupted at once): bounds a finally that awaits in a loop.
_CLOSE_TRIES = 100


class _Killed(BaseException):
    """Raised at each await a killed task's finally blocks make (``_close``)."""


def _close(coro: Any, context: contextvars.Context | None) -> None:
    """End a killed task's coroutine now, its finally blocks run to their end.

    ``close()`` would throw ``GeneratorExit`` where the task waits, but a
    ``GeneratorExit`` is never passed on through an async generator's
    ``asend``/``athrow`` (an ``async with`` over ``@asynccontextmanager``, an
    ``async for``): the generators the task was inside would be left suspended
    mid-``finally``, for the garbage collector to close later, outside the loop
    and the task's context.  :class:`_Killed` is passed on everywhere; each await
    a finally block makes gets it too, at once (as a trio task's awaits in a
    cancelled scope raise), until the coroutine is over.
    """
    throw = getattr(coro, "throw", None)
    if throw is None:
        close = getattr(coro, "close", None)
        if close is not None:
            with contextlib.suppress(BaseException):
                close()
        return
    for _ in range(_CLOSE_TRIES):
        try:
            if context is not None:
                context.run(throw, _Killed())
            else:
                throw(_Killed())
        except BaseException:
            return  # over: _Killed, or what a finally raised instead
    with contextlib.suppress(BaseException):  # a finally that awaits for ever
        coro.close()


def _close_agen(agen: Any) -> None:
    """Close an async generator of a killed loop that no task was inside."""
    if getattr(agen, "ag_frame", None) is None or getattr(agen, "ag_running", False):
        return
    closing = agen.aclose()
    try:
        closing.send(None)
    except BaseException:
        return
    for _ in range(_CLOSE_TRIES):
        try:
            closing.throw(_Killed())
        except BaseException:
            return
    with contextlib.suppress(BaseException):
        closing.close()
