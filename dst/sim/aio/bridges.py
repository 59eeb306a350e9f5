"""The ``env`` calls of a simulated loop's asyncio tasks, made by trio tasks.

An ``env`` call from asyncio (``await env.store.get(k)``, ``env.net.recv()``,
``env.services.call(...)``) runs the trio call in a trio task of the process
(a *bridge*, labelled with the asyncio task that made it), which parks at the
kernel's choice point as any trio call does and resolves an asyncio future
(:class:`_Call`) when it returns; a cancelled caller aborts its bridge at once.
A bridge waits between calls in the loop's pool.  A store call made when the
loop then has nothing else to do is made by the driver itself
(``_call_inline``): the same choice point under the same label; a wake-up from
outside meanwhile hands it to a bridge (``_handoff``).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio
import trio.lowlevel as ll

from ...env import Message
from ...errors import ProcessCrashed
from .. import trio_internals
from ..process import RUNNING, Incarnation
from ..trio_internals import RUN_CONTEXT as _RUN_CONTEXT
from .state import LoopState
from .tasks import SimFuture

if TYPE_CHECKING:
    from ..kernel import Sim

#: ``asyncio.current_task(loop)``: before Python 3.12 a Python function over the dict
#: that asyncio's C ``_enter_task`` keeps, read here directly.
_CURRENT_TASKS: dict[Any, Any] | None = (
    asyncio.tasks._current_tasks if sys.version_info < (3, 12) else None)  # type: ignore[attr-defined]


class _Call(SimFuture):
    """The asyncio side of an ``env`` call: resolved by its bridge, which it cancels."""

    _bridge: ll.Task | None = None
    _sim: Sim | None = None

    def cancel(self, msg: Any = None) -> bool:
        loop = self.get_loop()
        if isinstance(loop, Bridges) and loop._deferred is not None:
            loop._dispatch_deferred()  # as if its bridge had been woken when it was made
        bridge, sim = self._bridge, self._sim
        if bridge is not None and sim is not None and not self.done():
            # The bridge's parked call is taken back now, as a cancelled trio task's is;
            # that wake-up is the cancellation's own, never a new choice point.
            releasing, sim._releasing = sim._releasing, True
            try:
                trio_internals.interrupt(bridge, _CallCancelled())
            finally:
                sim._releasing = releasing
        return super().cancel(msg)


class _CallCancelled(BaseException):
    """Ends a bridge whose asyncio caller was cancelled (thrown where it waits)."""


class _Handoff(BaseException):
    """Takes a call the driver makes itself back from the choice point (``SimLoop._handoff``)."""


class _Retired(BaseException):
    """Ends a bridge waiting in its loop's pool (the loop is over)."""


class Bridges(LoopState):
    """The loop's ``env`` calls and the trio tasks that make them."""

    def env_call(self, inc: Incarnation, op: str, fn: Callable[..., Awaitable[Any]],
                 args: tuple[Any, ...], parks: bool = False) -> asyncio.Future[Any]:
        """Run the trio ``env`` call ``fn(*args)`` in a bridge; the future it resolves.

        ``parks``: the call parks at the kernel's choice point before it does
        anything else (a store call): made from the driver's callbacks while no
        other trio task of the loop is busy, it is held back (``_deferred``), and
        when the loop then has nothing else to do the driver makes it itself
        (``_call_inline``) instead of waking a bridge and waiting for it.
        """
        sim = self._sim
        if inc.state is not RUNNING or self._dead:
            if sim is not None and not sim._stopping:
                sim.fault("refused", inc.name, op)
            raise ProcessCrashed(f"process {inc.name} has crashed; {op} refused")
        if sim is None or sim._stopping:
            from ..kernel import RunStopped

            raise RunStopped("the run has stopped")
        if self._deferred is not None:
            self._dispatch_deferred()
        fut = _Call(loop=self)
        self._made += 1
        fut._dst_seq = self._made
        fut._sim = sim
        current = (_CURRENT_TASKS.get(self) if _CURRENT_TASKS is not None
                   else asyncio.current_task(self))
        label = getattr(current, "_dst_label", "") or self._name
        if parks and self._batch and len(self._bridges) == len(self._pool):
            self._deferred = (fut, fn, args, label)
        else:
            self._dispatch(fut, fn, args, label)
        return fut

    def _dispatch(self, fut: _Call, fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...],
                  label: str) -> None:
        """Hand a call to a bridge: one of the pool, or a new one."""
        pool = self._pool
        if pool:
            # A bridge of the pool makes the call: it goes on at once, as a trio task's
            # own call would (the wake-up is this step's, not a new choice point).
            bridge = pool.pop()
            self._requests[bridge] = (fut, fn, args)
            self._inc.tasks.add(bridge)
            self._sim._task_labels[bridge] = label
            trio_internals.wake(bridge)
        else:
            bridge = self._spawn(_bridge, (self,), label)
            self._requests[bridge] = (fut, fn, args)

    def _dispatch_deferred(self) -> None:
        """The call held back goes to a bridge after all (something else happens)."""
        deferred, self._deferred = self._deferred, None
        if deferred is not None:
            self._dispatch(*deferred)

    async def _call_inline(self) -> None:
        """Make the call held back in the driver itself: it parks at the kernel's
        choice point, labelled by the asyncio task that made it, exactly as its
        bridge would have, and its reply continues the loop in the same step.

        Only when nothing else of the loop can happen meanwhile (no callback
        ready, no timer, no other trio task of the loop busy).  Should anything
        from outside the loop's callbacks wake it all the same (``_wakeup``,
        ``call_at``), the call is taken back (it has done nothing but park) and
        handed to a bridge, and the driver goes on as it would have.
        """
        deferred = self._deferred
        assert deferred is not None
        self._deferred = None
        fut, fn, args, label = deferred
        sim, driver = self._sim, self._driver
        labels = sim._task_labels
        sleepers = sim._sleepers
        if sleepers:
            sleepers.pop(driver, None)  # what ``_wait``'s ``_arm`` does: no timer is left
        if fut.done():
            return
        self._inline = fut
        fut._bridge = driver
        owner = labels.get(driver)
        labels[driver] = label
        try:
            result = await fn(*args)
        except _Handoff:
            self._inline = None
            if not fut.done():
                self._dispatch(fut, fn, args, label)
            return
        except _CallCancelled:
            return
        except BaseException as exc:
            self._inline = None
            if self._dead or sim._stopping or self._inc.state is not RUNNING:
                raise  # the process or the run is over: the driver ends with it
            if isinstance(exc, (KeyboardInterrupt, trio.Cancelled)):
                raise
            if not fut.done():
                fut.set_exception(exc)
            return
        finally:
            self._inline = None
            fut._bridge = None
            fut._sim = None
            if owner is not None:
                labels[driver] = owner
        if not fut.done() and not self._dead:
            self._replying = True
            try:
                fut.set_result(result)
            finally:
                self._replying = False

    def _handoff(self) -> None:
        """The loop is woken from outside while its driver makes a call itself: the
        call is taken back from the choice point, to go to a bridge (``_call_inline``)."""
        driver = self._driver
        if trio_internals.is_blocked(driver):
            sim = self._sim
            releasing, sim._releasing = sim._releasing, True  # no new choice point
            try:
                trio_internals.interrupt(driver, _Handoff())
            finally:
                sim._releasing = releasing

    def _drain_pool(self) -> None:
        """End the bridges waiting in the pool (the process is over)."""
        pool, self._pool = self._pool, []
        sim = self._sim
        releasing, sim._releasing = sim._releasing, True  # no new choice point
        try:
            for bridge in pool:
                if trio_internals.is_blocked(bridge):
                    trio_internals.interrupt(bridge, _Retired())
        finally:
            sim._releasing = releasing

    def _spawn(self, fn: Callable[..., Awaitable[None]], args: tuple[Any, ...],
               label: str) -> ll.Task:
        """Start a trio task of the process (a bridge, a stream's reader or writer,
        a server's acceptor) in the run's nursery, tied to the incarnation and
        labelled ``label``; it ends quietly with its process or the run."""
        if self._deferred is not None:
            self._dispatch_deferred()
        sim, inc = self._sim, self._inc
        sim._starting = True  # tied to the incarnation here, not labelled by trio's hook
        try:
            trio_internals.spawn(self._nursery, fn, args, "asyncio")
        finally:
            sim._starting = False
        task: ll.Task = _RUN_CONTEXT.runner.runq[-1]
        self._bridges[task] = None
        inc.tasks.add(task)
        sim._incarnation_of[task] = inc
        sim._task_labels[task] = label
        return task


def _forget(loop: LoopState) -> None:
    """A task of the loop's (a reader, a writer, an acceptor) is ending."""
    task = _RUN_CONTEXT.task
    loop._bridges.pop(task, None)
    loop._sim._task_labels.pop(task, None)


async def _bridge(loop: LoopState) -> None:
    """``env`` calls of the loop's asyncio tasks, made by a trio task of the same process.

    Between two calls it waits, out of its incarnation's tasks, in the loop's
    pool (``SimLoop.env_call`` hands it the next one).  It runs in the run's
    nursery: whatever ends it when its process crashes or exits or the run stops
    (``ProcessCrashed``, ``RunStopped``, a cancellation) ends it quietly, as the
    end of a process's own task would.
    """
    sim, inc = loop._sim, loop._inc
    task = _RUN_CONTEXT.task
    requests = loop._requests

    def abort(_: object) -> ll.Abort:
        if task in loop._pool:
            loop._pool.remove(task)
        return ll.Abort.SUCCEEDED

    try:
        while True:
            fut, fn, args = requests.pop(task)
            if not await _call_once(loop, task, fut, fn, args):
                return
            # Its call is answered: it waits in the pool for the next one, which is
            # no wait of the process's (a Deadlock never names it).
            inc.tasks.discard(task)
            sim._task_labels.pop(task, None)
            loop._pool.append(task)
            await trio_internals.park(abort)
    except _Retired:
        return
    except BaseException:
        if loop._dead or sim._stopping or inc.state is not RUNNING:
            return
        raise
    finally:
        requests.pop(task, None)
        sim._task_labels.pop(task, None)
        loop._bridges.pop(task, None)


async def _call_once(loop: LoopState, task: ll.Task, fut: _Call,
                     fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...]) -> bool:
    """Make one call and resolve ``fut``; False when the bridge is to end."""
    sim = loop._sim
    try:
        if fut.done() or loop._dead:
            return not loop._dead  # cancelled before it started
        fut._bridge = task
        result = await fn(*args)
        if fut.done():
            if isinstance(result, Message):  # taken by a receiver that was cancelled
                loop._inc.mailbox.appendleft(result)
                lot = loop._inc._mail_lot
                if lot is not None:
                    lot.unpark()
        elif not loop._dead:
            fut.set_result(result)
    except BaseException as exc:
        if loop._dead or sim._stopping or loop._inc.state is not RUNNING:
            return False  # the process or the run is gone: nobody waits for it
        if isinstance(exc, _CallCancelled):
            return True
        if isinstance(exc, (KeyboardInterrupt, trio.Cancelled)):
            raise
        if not fut.done():
            fut.set_exception(exc)
    finally:
        fut._bridge = None
        fut._sim = None
    return not loop._dead
