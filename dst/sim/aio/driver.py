"""The driver of a simulated loop, and the order in which its ready callbacks run.

The driver (``_drive``) is the process's main trio task: it runs the loop's
ready callbacks and waits, as a trio task, for a timer or a wake-up when
nothing is ready (``_wait``).  A decision's continuation (a reply, a timer
fired) runs first (``_wakeup``); while the run's preemption budget lasts it
runs one callback at a time and takes a trio checkpoint, where the kernel may
choose any ready callback instead (``ready_options``, ``pick``); after, it runs
asyncio's own iteration between two checkpoints.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, cast

import trio
import trio.lowlevel as ll

from ...env import Env
from .. import trio_internals
from ..options import READY
from ..process import RUNNING
from .state import LoopState
from .tasks import SimTask, _callable_name

if TYPE_CHECKING:
    from asyncio import events


class Driver(LoopState):
    """The loop's driver and its callback order (see the module docstring)."""

    async def _drive(self, main: Callable[[Env], Awaitable[object]], env: Env) -> object:
        sim, inc, ready = self._sim, self._inc, self._ready
        driver = self._driver
        labels = sim._task_labels
        self._enter()
        try:
            self._main = main_task = self.create_task(cast("Coroutine[Any, Any, Any]", main(env)))
        finally:
            self._exit()
        try:
            while True:
                if self._unseen:
                    self._report_unseen()
                    await trio.lowlevel.checkpoint()  # raises: the run has stopped
                if self._scheduled:
                    self._due()
                if not ready:
                    if main_task.done() and self._shutdown():
                        break
                    if not ready:
                        await self._wait()
                    continue
                # A decision's continuation first (``_wakeup``); then, while preemptions
                # last, one callback and a checkpoint where the kernel may choose another
                # (``ready_options``); after, asyncio's own iteration.
                urgent = self._urgent
                n = len(urgent) if urgent else (
                    1 if sim._hold_watch is not None else len(ready))
                self._enter()
                self._batch = True
                try:
                    while n and ready:
                        n -= 1
                        handle: Any  # (``_take``, and then ``Handle._run``, in this frame)
                        if urgent and ready[0] is urgent[0] and self._pick is None:
                            handle = ready.popleft()
                            del urgent[0]
                        else:
                            handle = self._take()
                        if handle._cancelled:
                            continue
                        callback = handle._callback
                        owner = getattr(callback, "__self__", None)
                        labels[driver] = (owner._dst_label if type(owner) is SimTask
                                          else self._name)
                        try:
                            handle._context.run(callback, *handle._args)
                        except (SystemExit, KeyboardInterrupt):
                            raise
                        except BaseException as exc:  # what ``Handle._run`` reports
                            self.call_exception_handler({
                                "message": f"Exception in callback {callback!r}",
                                "exception": exc, "handle": handle})
                        del handle, owner, callback
                        if inc.state is not RUNNING or sim._stopping:
                            break
                        if n and ready and self._deferred is not None:
                            self._dispatch_deferred()  # only the batch's last may be held
                finally:
                    self._batch = False
                    self._exit()
                if self._deferred is not None:
                    # What the driver would do next is wait (``_wait``): it makes the
                    # call itself instead, when nothing else of the loop can happen.
                    if (not ready and not self._scheduled and not self._unseen
                            and inc.state is RUNNING and not sim._stopping
                            and not main_task.done() and len(self._bridges) == len(self._pool)):
                        await self._call_inline()
                        continue
                    self._dispatch_deferred()
                if inc.state is not RUNNING or sim._stopping:
                    await trio.lowlevel.checkpoint()  # raises: the process or the run is over
                if self._scheduled:
                    self._due()
                if ready:
                    self._arm()
                    await trio.lowlevel.checkpoint()  # held here while preemptions last
        except BaseException:
            self._kill()  # whatever ends the driver, no callback of this loop runs again
            raise
        labels[driver] = self._name
        if main_task.cancelled() or main_task.exception() is None:
            found = self._unretrieved()
            if found is not None and not sim._stopping:
                self._unseen.append(found)
            if self._unseen:  # the driver's loop is over: nobody else will report it
                self._report_unseen()
        return main_task.result()

    def _take(self) -> Any:
        pick = self._pick
        if pick is not None:
            self._pick = None
        elif self._urgent:
            pick = self._urgent.pop(0)
        else:
            return self._ready.popleft()
        ready = self._ready
        if ready[0] is pick:
            return ready.popleft()
        for i, handle in enumerate(ready):
            if handle is pick:
                del ready[i]
                break
        return pick

    async def _wait(self) -> None:
        """Nothing is ready: wait for the next timer (the kernel's ``timer@T``) or a
        wake-up (a bridge resolving a future, a callback scheduled from outside)."""
        self._arm()
        self._idle = True
        try:
            await trio_internals.park(self._abort)
        finally:
            self._idle = False

    def _abort(self, _: object) -> ll.Abort:
        sleepers = self._sim._sleepers if self._sim is not None else None
        if sleepers:
            sleepers.pop(self._driver, None)
        return ll.Abort.SUCCEEDED

    def _wakeup(self) -> None:
        """Callbacks became ready from outside the loop: run them now.

        They continue the decision that caused them (a parked call chosen, a
        message delivered, a timer fired), as a trio task woken by a decision
        runs at once: the driver, waiting or held at a checkpoint, goes on with
        them first, and its other ready callbacks stay where they were.
        """
        driver = self._driver
        sim = self._sim
        if self._idle:
            if trio_internals.is_blocked(driver):
                sleepers = sim._sleepers
                if sleepers:
                    sleepers.pop(driver, None)
                trio_internals.wake(driver)
        elif self._inline is not None:
            self._handoff()
        elif sim._held.pop(driver, None) is not None:
            trio_internals.release(driver)

    def ready_options(self, options: list[tuple[str, float, int, Any]]) -> Any:
        """List the ready callbacks as options (``P/task@run``); the head's target.

        Timers due now join the queue first, as at the start of asyncio's
        iteration.  None when nothing is ready (the driver then goes on as a
        plain held task).
        """
        if self._scheduled:
            self._due()
        head = None
        seen: set[str] = set()
        for handle in self._ready:
            if handle._cancelled:
                continue
            owner = getattr(handle._callback, "__self__", None)
            if type(owner) is SimTask:
                label = owner._dst_label
            elif isinstance(owner, asyncio.Task):
                label = f"{self._name}/{_callable_name(owner.get_coro())}"
            else:
                label = f"{self._name}/{_callable_name(handle._callback)}"
            if label in seen:
                n = 2
                while f"{label}#{n}" in seen:
                    n += 1
                label = f"{label}#{n}"
            seen.add(label)
            target = (self, handle)
            options.append((label + "@run", 1.0, READY, target))
            if head is None:
                head = target
        return head

    def pick(self, handle: events.Handle) -> None:
        """The kernel chose ``handle`` to run next: let the held driver go."""
        self._pick = handle
        trio_internals.release(self._driver)
