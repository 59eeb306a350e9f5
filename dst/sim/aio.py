"""asyncio processes: a dst event loop, driven by a trio task of the process.

``sim.process(name, main, runtime="asyncio")`` runs the coroutine function
``main(env)`` on a :class:`SimLoop`, an ``asyncio.BaseEventLoop`` whose
``_run_once`` is the process's main trio task (the *driver*, :meth:`SimLoop._drive`).
Unmodified asyncio code runs on it (tasks, ``gather``, ``wait_for``,
``asyncio.timeout``, ``TaskGroup``, queues, locks, events, conditions,
semaphores, ``call_soon``/``call_later``, ``to_thread`` for pure work), beside
the trio processes of the same run, and everything that varies is one of the
kernel's choices:

* *Ready callbacks.*  asyncio runs its ready queue first in, first out.  While
  the run's preemption budget lasts, the driver runs one callback at a time and
  then takes a trio checkpoint, where the preemption watch holds it
  (``dst.sim.preemption``); at the next quiescence every ready callback of its
  queue is an option (``P/task@run``, labelled by the asyncio task it steps),
  beside every other option of the run.  Running the queue's head is the
  ordinary choice; anything else spends a preemption, exactly as for trio's
  checkpoints.  Without preemptions left the driver runs asyncio's own
  iteration (every callback ready at its start) between two trio checkpoints.
* *Timers.*  ``loop.time()`` is the run's virtual time.  The loop's next timer
  is one of the kernel's sleepers (``Scheduler._sleepers``), so it is offered as
  ``timer@T`` exactly as a trio deadline would be, and performing it wakes the
  driver, which moves the due timers to its ready queue.
* *The world.*  ``env`` calls made from asyncio (``await env.store.get(k)``,
  ``env.net.send/recv``, ``env.services.call``) each run the trio call in a
  trio task of the process (a *bridge*, labelled with the asyncio task that
  made the call), which parks at the kernel's choice point as any trio call
  does and resolves an asyncio future when it returns; a cancelled asyncio
  caller aborts its bridge at once.  A store call made when the loop then has
  nothing else to do is made by the driver itself (``SimLoop._call_inline``):
  the same choice point under the same label, its reply running the caller in
  the same step; a wake-up from outside meanwhile hands it to a bridge.

A crash stops the loop for good: its ready queue and timers are dropped, no
callback of it ever runs again, and every pending asyncio task's coroutine is
closed (its ``finally`` blocks run once, with every ``env`` call refused and
recorded, as a trio task's do while it unwinds).  A task whose exception
nobody retrieves is a ``NoUncaughtError`` (found when it is collected, when
``main`` returns, or when the run ends while the process still holds it:
``SimLoop.report_unretrieved``), as is an exception escaping a callback; tasks
blocked forever at rest are named in the ``Deadlock`` message.
``docs/design.md`` ("asyncio under the same scheduler") says why this design.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import functools
import heapq
import math
import os
import socket
import sys
import weakref
from asyncio import events
from collections.abc import Awaitable, Callable, Coroutine
from threading import get_ident
from types import FrameType
from typing import TYPE_CHECKING, Any, cast

import sniffio
import trio
import trio.lowlevel as ll

from ..env import Env, Json, Message
from ..errors import ProcessCrashed
from . import trio_internals
from .env import SimServices, SimStoreHandle, SimTransport
from .options import READY
from .process import _CURRENT, RUNNING, Incarnation
from .trio_internals import RUN_CONTEXT as _RUN_CONTEXT

if TYPE_CHECKING:
    from .kernel import Sim

_running_loop = events._get_running_loop
_set_running_loop = events._set_running_loop
_enter_task = asyncio.tasks._enter_task
_get_hooks = sys.get_asyncgen_hooks
_set_hooks = sys.set_asyncgen_hooks
_sniffio_local = sniffio.thread_local
#: ``asyncio.current_task(loop)``: before Python 3.12 a Python function over the dict
#: that asyncio's C ``_enter_task`` keeps, read here directly.
_CURRENT_TASKS: dict[Any, Any] | None = (
    asyncio.tasks._current_tasks if sys.version_info < (3, 12) else None)  # type: ignore[attr-defined]

_Handle = events.Handle
_new_handle = events.Handle.__new__
#: Whether ``call_soon`` may fill a ``Handle``'s fields itself: they are those it knows.
_FAST_HANDLE = set(getattr(_Handle, "__slots__", ())) == {
    "_callback", "_args", "_cancelled", "_loop", "_source_traceback", "_repr", "__weakref__",
    "_context"}
_leave_task = asyncio.tasks._leave_task


#: ``asyncio.eager_task_factory`` (Python 3.12+), which builds an ``asyncio.Task`` itself,
#: never asking the loop: while a simulated loop's callbacks run, the loop builds it.
_EAGER: Any = getattr(asyncio.tasks, "eager_task_factory", None)
_EAGER_HOMES = (vars(asyncio), vars(asyncio.tasks))


def _eager_task_factory(loop: Any, coro: Any, *, name: str | None = None,
                        context: Any = None) -> Any:
    """``asyncio.eager_task_factory`` on a simulated loop: a task of the loop's, numbered
    and labelled as ``create_task`` makes them, whose first step runs at once."""
    if isinstance(loop, SimLoop):
        return loop._create_task(coro, name, context, True)
    return _EAGER(loop, coro, name=name, context=context)


def asyncio_main(main: Callable[[Env], Awaitable[object]]) -> Callable[[Env], Awaitable[object]]:
    """The trio program of an asyncio process whose asyncio program is ``main(env)``."""

    async def run_asyncio(env: Env) -> object:
        inc = _CURRENT.get()
        assert inc is not None, "an asyncio process runs as a process of a simulated run"
        sim = inc.sim
        aenv = _asyncio_env(sim, inc, env)
        # The bridges are started in the run's nursery, not one of the process's own:
        # closing a nursery is a checkpoint, which a trio process's end does not take.
        assert sim._nursery is not None
        loop = SimLoop(sim, inc, sim._nursery)
        try:
            return await loop._drive(main, aenv)
        finally:
            loop._retire()

    run_asyncio.__qualname__ = run_asyncio.__name__ = getattr(main, "__name__", "main")
    return run_asyncio


class SimTask(asyncio.Task):  # type: ignore[type-arg]
    """An asyncio task of a simulated process: labelled, and hashed by creation order.

    A task's hash is its number in its loop, not its address, so that a set of
    tasks (``asyncio.wait``'s ``done`` and ``pending``) iterates in the same
    order in every run of a seed.
    """

    _dst_seq = 0
    _dst_label = ""
    _dst_context: contextvars.Context | None = None

    def __init__(self, coro: Any, *, loop: SimLoop, name: str, context: contextvars.Context,
                 seq: int, label: str, eager: bool = False) -> None:
        # Numbered and labelled first: an eager task's first step runs in here.
        self._dst_seq = seq
        self._dst_label = label
        self._dst_context = context
        if eager:
            super().__init__(coro, loop=loop, name=name, context=context,  # type: ignore[call-arg]
                             eager_start=True)
        else:
            super().__init__(coro, loop=loop, name=name, context=context)

    def __hash__(self) -> int:
        return self._dst_seq

    def set_name(self, value: object) -> None:
        """Named after its creation (``TaskGroup.create_task(coro, name=...)`` does
        that): the label follows the name."""
        super().set_name(value)
        loop = self.get_loop()
        if isinstance(loop, SimLoop) and self is not loop._main:
            self._dst_label = loop._relabel(self._dst_label, _short(str(value)))


class SimFuture(asyncio.Future):  # type: ignore[type-arg]
    """A future of a simulated process's loop, hashed by creation order (see SimTask)."""

    _dst_seq = 0

    def __hash__(self) -> int:
        return self._dst_seq


class _Call(SimFuture):
    """The asyncio side of an ``env`` call: resolved by its bridge, which it cancels."""

    _bridge: ll.Task | None = None
    _sim: Sim | None = None

    def cancel(self, msg: Any = None) -> bool:
        loop = self.get_loop()
        if isinstance(loop, SimLoop) and loop._deferred is not None:
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


class _Named:
    """Stands for a process in a finding about one of its asyncio tasks."""

    def __init__(self, name: str) -> None:
        self.name = name


def _short(name: str) -> str:
    """A task name made of a qualified function name (anyio names its tasks so:
    ``pkg.module.func.<locals>._run``) labels it by the function's own name."""
    if "." in name and " " not in name:
        return name.rsplit(".", 1)[-1] or name
    return name


def _callable_name(callback: Any) -> str:
    while isinstance(callback, functools.partial):
        callback = callback.func
    name = getattr(callback, "__name__", None)
    if not isinstance(name, str):
        name = type(callback).__name__
    return name.rsplit(".", 1)[-1]


#: ``BaseEventLoop.__init__``'s attributes and the names of those that are containers.
_BASE_STATE: tuple[dict[str, Any], tuple[str, ...]] | None = None


def _base_state() -> tuple[dict[str, Any], tuple[str, ...]]:
    """What ``BaseEventLoop.__init__`` sets (it reads the environment, the clock's
    resolution, ...), once: a loop per process and seed copies it."""
    global _BASE_STATE
    probe = object.__new__(SimLoop)
    probe._dead = True  # (``set_debug`` asks ``is_running``)
    asyncio.BaseEventLoop.__init__(probe)
    state = dict(vars(probe))
    del state["_dead"]
    state.pop("get_debug", None)
    containers = (collections.deque, list, dict, set, weakref.WeakSet)
    _BASE_STATE = state, tuple(n for n, v in state.items() if isinstance(v, containers))
    return _BASE_STATE


class SimLoop(asyncio.BaseEventLoop):
    """The event loop of one incarnation of an asyncio process (see the module docstring)."""

    # ``BaseEventLoop``'s own state, which typeshed does not declare (handles as Any:
    # their fields are private too).
    _ready: collections.deque[Any]
    _scheduled: list[Any]
    _timer_cancelled_count: int
    _asyncgens: weakref.WeakSet[Any]
    _debug: bool

    def __init__(self, sim: Sim, inc: Incarnation, nursery: trio.Nursery) -> None:
        # ``BaseEventLoop.__init__``'s state, copied from one it made (``_base_state``):
        # the same attributes, each container a new one.
        state, fresh = _BASE_STATE or _base_state()
        d = self.__dict__
        d.update(state)
        for name in fresh:
            d[name] = type(state[name])()
        self.get_debug = bool(self._debug).__bool__  # type: ignore[method-assign]
        #: True once the loop may never run a callback again (a crash, the run's end).
        self._dead = False
        self._sim = sim
        self._inc = inc
        self._nursery = nursery
        self._driver: ll.Task = _RUN_CONTEXT.task
        self._name = inc.name
        #: Tasks and futures made so far (their numbers), labels given so far.
        self._made = 0
        self._label_counts: dict[str, int] = {}
        #: The loop's tasks by number, in creation order (held weakly, as asyncio does;
        #: those gone are dropped now and then, ``_create_task``).
        self._tasks: dict[int, weakref.ref[asyncio.Task[Any]]] = {}
        self._prune_at = 64
        #: Async generators first iterated here, in that order (made on the first).
        self._agens: weakref.WeakValueDictionary[int, Any] | None = None
        #: The async generator hooks while its callbacks run (``_enter``).
        self._hooks: tuple[Any, Any] | None = (self._asyncgen_firstiter_hook,
                                               self._asyncgen_finalizer_hook)
        #: The ready callback the kernel chose to run next (None: the queue's head).
        self._pick: events.Handle | None = None
        #: Callbacks made ready from outside the loop's own callbacks (a bridge's
        #: reply, a timer the kernel fired): the decision's continuation, run first.
        self._urgent: list[events.Handle] = []
        #: Exceptions nobody will see, found outside the loop's callbacks (a task's
        #: finalizer run by the kernel): reported by the driver when it next runs.
        self._unseen: list[tuple[str, BaseException]] = []
        #: The trio tasks of the loop alive (bridges, readers...), in the order they started.
        self._bridges: dict[ll.Task, None] = {}
        #: Bridges waiting for a call, and the call handed to each bridge.
        self._pool: list[ll.Task] = []
        self._requests: dict[ll.Task, tuple[_Call, Callable[..., Awaitable[Any]],
                                            tuple[Any, ...]]] = {}
        #: True while the driver waits for a timer or a wake-up (``_wait``).
        self._idle = False
        #: True while the driver runs a batch of callbacks (``_drive``).
        self._batch = False
        #: A call held back for the driver to make itself (``env_call``), and the
        #: future of the call it is making (``_call_inline``).
        self._deferred: tuple[_Call, Callable[..., Awaitable[Any]], tuple[Any, ...],
                              str] | None = None
        self._inline: _Call | None = None
        #: True while the driver resolves the call it made itself (``call_soon``).
        self._replying = False
        self._closing = False
        self._killed = False
        self._main: asyncio.Task[Any] | None = None
        self._saved: tuple[Any, Any] | None = None
        self._thread_id = get_ident()
        loops = sim._loops
        if loops is None:
            loops = sim._loops = {}
        loops[self._driver] = self

    # -- what asyncio code sees ------------------------------------------------

    def time(self) -> float:
        return trio.current_time()

    def create_future(self) -> asyncio.Future[Any]:
        fut = SimFuture(loop=self)
        self._made += 1
        fut._dst_seq = self._made
        return fut

    def create_task(self, coro: Any, *, name: str | None = None,  # type: ignore[override]
                    context: Any = None) -> asyncio.Task[Any]:
        # ``loop.set_task_factory(asyncio.eager_task_factory)`` makes every task eager;
        # any other factory is not called (the loop's tasks are its own).
        eager = _EAGER is not None and self.get_task_factory() in (_EAGER, _eager_task_factory)
        return self._create_task(coro, name, context, eager)

    def _create_task(self, coro: Any, name: str | None, context: Any,
                     eager: bool) -> asyncio.Task[Any]:
        if self._dead:
            close = getattr(coro, "close", None)
            if close is not None:
                close()
            raise RuntimeError(f"process {self._name} has stopped: its event loop runs no more")
        if self._main is None:
            label = self._name
            name = self._name if name is None else name
        else:
            if name is not None:
                label = self._label(f"{self._name}/{_short(str(name))}")
            else:
                qual = getattr(coro, "__qualname__", None)
                base = qual.rsplit(".", 1)[-1] if isinstance(qual, str) else "task"
                if getattr(coro, "cr_code", None) in _ENV_CODES:
                    # An env call wrapped in a task of its own (``wait_for``, ``gather``,
                    # ``shield``): named after the task that made it.
                    current = asyncio.current_task(self)
                    owner = getattr(current, "_dst_label", "") or self._name
                    label = self._label(f"{owner}:{base}")
                else:
                    label = self._label(f"{self._name}/{base}")
                name = label[len(self._name) + 1:] if label.startswith(self._name + "/") \
                    else label
        if context is None:
            context = contextvars.copy_context()  # what the task would copy; kept for _kill
        self._made += 1
        seq = self._made
        if not eager:
            task = SimTask(coro, loop=self, name=name, context=context, seq=seq, label=label)
        else:  # its first step runs now, as the task's own (what it logs, the calls it makes)
            labels = self._sim._task_labels
            creator = labels.get(self._driver)
            labels[self._driver] = label
            try:
                task = SimTask(coro, loop=self, name=name, context=context, seq=seq,
                               label=label, eager=True)
            finally:
                if creator is not None:
                    labels[self._driver] = creator
        tasks = self._tasks
        tasks[seq] = weakref.ref(task)
        if len(tasks) >= self._prune_at:
            self._tasks = tasks = {n: ref for n, ref in tasks.items() if ref() is not None}
            self._prune_at = 2 * len(tasks) + 64
        return task

    def _all_tasks(self) -> list[asyncio.Task[Any]]:
        """The loop's tasks still alive, in creation order."""
        out = []
        for ref in list(self._tasks.values()):  # (numbers only grow: creation order)
            task = ref()
            if task is not None:
                out.append(task)
        return out

    def _label(self, base: str) -> str:
        n = self._label_counts.get(base, 0) + 1
        self._label_counts[base] = n
        return base if n == 1 else f"{base}#{n}"

    def _relabel(self, old: str, name: str) -> str:
        """A task's label for its new name; the old label is given back if it was the
        last one given (a task named right after its creation leaves no gap)."""
        base, sep, n = old.rpartition("#")
        if not sep or not n.isdigit():
            base, n = old, "1"
        counts = self._label_counts
        if counts.get(base) == int(n):
            counts[base] -= 1
        return self._label(f"{self._name}/{name}")

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

    def call_at(self, when: float, callback: Callable[..., object], *args: Any,  # type: ignore[override]
                context: Any = None) -> Any:
        timer: Any = events.TimerHandle(when, callback, args, self, context)
        if self._dead:
            timer.cancel()
            return timer
        heapq.heappush(self._scheduled, timer)
        timer._scheduled = True
        if self._idle and trio_internals.is_blocked(self._driver):
            self._arm()  # a timer set from outside the loop's callbacks
        elif self._inline is not None:
            self._handoff()  # the driver waits for it again once the call is handed over
        return timer

    def run_in_executor(self, executor: Any, func: Callable[..., Any],  # type: ignore[override]
                        *args: Any) -> asyncio.Future[Any]:
        """Pure work handed to a thread runs inline, as one step (threads are not simulated)."""
        fut = self.create_future()
        try:
            result = func(*args)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            fut.set_exception(exc)
        else:
            fut.set_result(result)
        return fut

    async def shutdown_default_executor(self, timeout: float | None = None) -> None:
        return None

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

    # -- the world, from asyncio -----------------------------------------------

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
            from .kernel import RunStopped

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

    # -- streams over the simulated network ------------------------------------------

    async def getaddrinfo(self, host: Any, port: Any, *, family: int = 0,
                          type: int = 0, proto: int = 0, flags: int = 0) -> list[Any]:
        """The simulated network's names (``dst.sim.sockets``): a process's name,
        ``localhost`` or a numeric address; IPv4 only."""
        from .sockets.hosts import numeric, port_number
        from .sockets.install import SimResolver

        if isinstance(host, bytes):
            host = host.decode("ascii", "replace")
        if host is not None and numeric(host):
            return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "",
                     (host, port_number(port)))]
        return await SimResolver().getaddrinfo(host, port, family, type, proto, flags)

    async def getnameinfo(self, sockaddr: Any, flags: int = 0) -> tuple[str, str]:
        from .sockets.install import SimResolver

        return await SimResolver().getnameinfo(sockaddr, flags)

    def _socket(self) -> Any:
        from .sockets.network import network
        from .sockets.simsocket import SimSocket

        return SimSocket(network(self._sim), self._inc)

    async def create_connection(
            self, protocol_factory: Callable[[], asyncio.BaseProtocol], host: Any = None,
            port: Any = None, *, ssl: Any = None, family: int = 0, proto: int = 0,
            flags: int = 0, sock: Any = None, local_addr: Any = None,
            server_hostname: Any = None, **kwargs: Any) -> tuple[Any, Any]:
        """A TCP connection over the simulated network (``asyncio.open_connection``):
        the connect is the network's choice point, made by a bridge."""
        if ssl:
            raise NotImplementedError("dst simulates plain TCP: TLS is not simulated")
        if sock is not None or local_addr is not None:
            raise NotImplementedError("dst simulates connections by host and port only")
        infos = await self.getaddrinfo(host, port, family=family, proto=proto, flags=flags)
        address = infos[0][4]
        conn = self._socket()
        try:
            await self.env_call(self._inc, f"tcp.connect({host}:{port})", conn.connect,
                                (address,))
        except BaseException:
            conn.close()
            raise
        protocol = protocol_factory()
        transport = _StreamTransport(self, conn, protocol)
        transport._start()
        return transport, protocol

    async def create_server(  # type: ignore[override]
            self, protocol_factory: Callable[[], asyncio.BaseProtocol], host: Any = None,
            port: Any = None, *, family: int = 0, flags: int = socket.AI_PASSIVE,
            sock: Any = None, backlog: int = 100, ssl: Any = None,
            start_serving: bool = True, **kwargs: Any) -> asyncio.AbstractServer:
        """A TCP listener on the simulated network (``asyncio.start_server``): its
        process is the host, a connection accepted at the network's choice point."""
        if ssl:
            raise NotImplementedError("dst simulates plain TCP: TLS is not simulated")
        if sock is not None:
            raise NotImplementedError("dst simulates listeners by host and port only")
        if isinstance(host, (list, tuple)):
            host = host[0] if host else None
        listener = self._socket()
        try:
            await self.env_call(self._inc, f"tcp.bind({port})", listener.bind,
                                (("" if host is None else host, int(port or 0)),))
            listener.listen(backlog)
        except BaseException:
            listener.close()
            raise
        server = _Server(self, listener, protocol_factory)
        if start_serving:
            server._start()
        return server

    async def sock_connect(self, sock: Any, address: Any) -> None:
        raise NotImplementedError("dst simulates asyncio's streams (open_connection, "
                                  "start_server), not its raw socket calls")

    # -- the driver --------------------------------------------------------------

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

    def _due(self) -> None:
        """Move the timers due now to the ready queue, as asyncio's ``_run_once`` does."""
        scheduled = self._scheduled
        if self._timer_cancelled_count > 100 and self._timer_cancelled_count * 2 > len(scheduled):
            kept = [h for h in scheduled if not h._cancelled]
            for h in scheduled:
                if h._cancelled:
                    h._scheduled = False
            heapq.heapify(kept)
            self._scheduled = scheduled = kept
            self._timer_cancelled_count = 0
        now = trio.current_time()
        while scheduled:
            handle = scheduled[0]
            if handle._cancelled:
                heapq.heappop(scheduled)
                handle._scheduled = False
                self._timer_cancelled_count -= 1
                continue
            if handle._when > now:
                break
            heapq.heappop(scheduled)
            handle._scheduled = False
            self._ready.append(handle)

    def _next_timer(self) -> float | None:
        scheduled = self._scheduled
        while scheduled and scheduled[0]._cancelled:
            handle = heapq.heappop(scheduled)
            handle._scheduled = False
            self._timer_cancelled_count -= 1
        return scheduled[0]._when if scheduled else None

    def _arm(self) -> None:
        """Tell the kernel when the loop's next timer is due (a sleeper of its own)."""
        sim = self._sim
        sleepers = sim._sleepers
        when = self._next_timer()
        if when is None or not math.isfinite(when):
            if sleepers:
                sleepers.pop(self._driver, None)
            return
        if sleepers is None:
            sleepers = sim._sleepers = {}
        sleepers[self._driver] = when

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

    def timers_due(self) -> None:
        """The kernel fired the loop's timer while its driver was held (``_wake_sleepers``):
        the callbacks due go first, as a trio task woken by its deadline would."""
        scheduled = self._scheduled
        now = trio.current_time()
        while scheduled and (scheduled[0]._cancelled or scheduled[0]._when <= now):
            handle = heapq.heappop(scheduled)
            handle._scheduled = False
            if handle._cancelled:
                self._timer_cancelled_count -= 1
                continue
            self._ready.append(handle)
            self._urgent.append(handle)
        if self._urgent:
            self._wakeup()

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

    def _pending(self) -> list[asyncio.Task[Any]]:
        return [t for t in self._all_tasks() if not t.done()]

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

    # -- the kernel's side ---------------------------------------------------------

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

    def pick(self, handle: events.Handle) -> None:
        """The kernel chose ``handle`` to run next: let the held driver go."""
        self._pick = handle
        trio_internals.release(self._driver)

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


async def run_sync_inline(_backend: object, func: Callable[..., Any], args: tuple[Any, ...],
                          abandon_on_cancel: bool = False, limiter: object = None) -> Any:
    """anyio's ``to_thread.run_sync`` in an asyncio process (its backend's
    ``run_sync_in_worker_thread``, swapped by the guard): after anyio's own checkpoint,
    the function runs inline, in a copy of the caller's context, as one step, as
    ``SimLoop.run_in_executor`` runs it (threads are not simulated)."""
    await asyncio.sleep(0)
    return contextvars.copy_context().run(func, *args)


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


class _StreamTransport(asyncio.Transport):
    """An asyncio transport over a simulated socket.

    Its bytes go through trio tasks of the process: a reader that receives and
    hands each chunk to the protocol (``data_received``, ``eof_received``), and
    a writer started while bytes wait to be sent.  Both wait at the network's
    choice points (``tcp.recv``, ``tcp.send``), labelled by the connection.
    Reading is never paused: what the peer sends is buffered in the protocol.
    """

    def __init__(self, loop: SimLoop, sock: Any, protocol: asyncio.BaseProtocol) -> None:
        super().__init__()
        self._loop = loop
        self._sock = sock
        self._protocol = protocol
        self._buffer = bytearray()
        self._writing = False
        self._closing = False
        self._eof_sent = False
        self._lost = False
        self._paused = False
        self._extra = {"peername": sock._remote, "sockname": sock._local, "socket": sock}
        cid = sock._cid or "tcp"
        self._label = f"{loop._name}/{cid}"

    def _start(self) -> None:
        """The protocol is connected, and the reader starts (asyncio's order)."""
        self._protocol.connection_made(self)
        self._loop._spawn(_read, (self._loop, self), self._label)

    # -- asyncio.Transport ---------------------------------------------------------

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._extra.get(name, default)

    def is_closing(self) -> bool:
        return self._closing

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    def is_reading(self) -> bool:
        return not (self._closing or self._paused)

    def pause_reading(self) -> None:
        self._paused = True  # nothing to do: the bytes wait in the protocol's buffer

    def resume_reading(self) -> None:
        self._paused = False

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return len(self._buffer)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return (0, 0)

    def write(self, data: Any) -> None:
        if self._closing or self._eof_sent or self._lost:
            return  # asyncio logs and drops writes after close; so does this
        if not data:
            return
        self._buffer += data
        self._flush()

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def write_eof(self) -> None:
        if self._closing or self._eof_sent:
            return
        self._eof_sent = True
        self._flush()

    def can_write_eof(self) -> bool:
        return True

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._flush()

    def abort(self) -> None:
        self._buffer.clear()
        self._closing = True
        self._finish(None)

    # -- the trio side -------------------------------------------------------------

    def _flush(self) -> None:
        if self._writing or self._lost or self._loop._dead:
            return  # (a dead loop's sockets were closed with its process)
        if self._buffer or self._eof_sent or self._closing:
            self._writing = True
            self._loop._spawn(_write, (self._loop, self), self._label)

    def _finish(self, exc: BaseException | None) -> None:
        """The connection is over: close the socket, tell the protocol once."""
        if self._lost:
            return
        self._lost = True
        self._closing = True
        self._sock.close()
        if not self._loop._dead:
            self._loop.call_soon(self._protocol.connection_lost, exc)


async def _read(loop: SimLoop, transport: _StreamTransport) -> None:
    """A connection's reader: hands what arrives to the protocol."""
    sock = transport._sock
    protocol = cast("asyncio.Protocol", transport._protocol)
    try:
        while not transport._lost:
            data = await sock.recv(65536)
            if loop._dead or transport._lost:
                return
            if not data:
                break
            loop.call_soon(_received, transport, data)
        if not loop._dead and not transport._lost:
            loop.call_soon(_eof, transport)
    except (OSError, trio.ClosedResourceError) as exc:
        if not loop._dead and not transport._lost:
            loop.call_soon(transport._finish, exc if isinstance(exc, OSError) else None)
    except BaseException as exc:
        if loop._dead or loop._sim._stopping or loop._inc.state is not RUNNING:
            return
        raise exc
    finally:
        _forget(loop)
    del protocol


def _received(transport: _StreamTransport, data: bytes) -> None:
    if not transport._lost:
        cast("asyncio.Protocol", transport._protocol).data_received(data)


def _eof(transport: _StreamTransport) -> None:
    if transport._lost:
        return
    keep_open = cast("asyncio.Protocol", transport._protocol).eof_received()
    if not keep_open:
        transport.close()


async def _write(loop: SimLoop, transport: _StreamTransport) -> None:
    """A connection's writer, while bytes (or the end) wait to be sent."""
    sock = transport._sock
    try:
        while transport._buffer and not transport._lost:
            chunk = bytes(transport._buffer)
            transport._buffer.clear()
            await sock.send(chunk)
        if transport._lost or loop._dead:
            return
        if transport._closing:
            transport._finish(None)
        elif transport._eof_sent:
            sock.shutdown(socket.SHUT_WR)
    except (OSError, trio.ClosedResourceError) as exc:
        if not loop._dead:
            transport._buffer.clear()
            transport._finish(exc if isinstance(exc, OSError) else None)
    except BaseException as exc:
        if loop._dead or loop._sim._stopping or loop._inc.state is not RUNNING:
            return
        raise exc
    finally:
        transport._writing = False
        _forget(loop)
        if transport._buffer and not transport._lost and not loop._dead:
            transport._flush()


class _Server(asyncio.AbstractServer):
    """``asyncio.Server`` over a simulated listener: an acceptor task of the process
    takes each connection (the network's ``tcp.accept`` choice point)."""

    def __init__(self, loop: SimLoop, listener: Any,
                 protocol_factory: Callable[[], asyncio.BaseProtocol]) -> None:
        self._loop = loop
        self._listener = listener
        self._factory = protocol_factory
        self._serving = False
        self._closed = False
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def sockets(self) -> tuple[Any, ...]:
        return () if self._closed else (self._listener,)

    def _start(self) -> None:
        if self._serving or self._closed:
            return
        self._serving = True
        self._loop._spawn(_accept, (self._loop, self),
                          f"{self._loop._name}/accept-{self._listener._port}")

    def _accepted(self, conn: Any) -> None:
        if self._closed:
            conn.close()
            return
        transport = _StreamTransport(self._loop, conn, self._factory())
        transport._start()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._serving = False
        self._listener.close()
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def is_serving(self) -> bool:
        return self._serving

    async def start_serving(self) -> None:
        self._start()

    async def serve_forever(self) -> None:
        self._start()
        waiter = self._loop.create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        finally:
            self.close()

    async def wait_closed(self) -> None:
        if self._closed:
            return
        waiter = self._loop.create_future()
        self._waiters.append(waiter)
        await waiter

    def close_clients(self) -> None:
        pass

    def abort_clients(self) -> None:
        pass


async def _accept(loop: SimLoop, server: _Server) -> None:
    """A server's acceptor: each connection becomes a transport and a protocol."""
    try:
        while not server._closed:
            conn, _ = await server._listener.accept()
            if loop._dead:
                conn.close()
                return
            loop.call_soon(server._accepted, conn)
    except (OSError, trio.ClosedResourceError):
        return
    except BaseException as exc:
        if loop._dead or loop._sim._stopping or loop._inc.state is not RUNNING:
            return
        raise exc
    finally:
        _forget(loop)


def _forget(loop: SimLoop) -> None:
    """A task of the loop's (a reader, a writer, an acceptor) is ending."""
    task = _RUN_CONTEXT.task
    loop._bridges.pop(task, None)
    loop._sim._task_labels.pop(task, None)


async def _bridge(loop: SimLoop) -> None:
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


async def _call_once(loop: SimLoop, task: ll.Task, fut: _Call,
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


class _Retired(BaseException):
    """Ends a bridge waiting in its loop's pool (the loop is over)."""


# -- the env of an asyncio process ------------------------------------------------


class AioStoreHandle(SimStoreHandle):
    """``env.store`` in an asyncio process: each call a bridge to the trio call."""

    __slots__ = ()

    def _call(self, op: str, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        loop = _running_loop()
        if type(loop) is not SimLoop:
            return fn(self, *args)  # from trio code: the trio call itself
        return loop.env_call(self._proc, f"{self._name}.{op}", fn, (self, *args), True)

    async def get(self, key: str) -> Json:
        return await self._call(f"get({key})", SimStoreHandle.get, key)  # type: ignore[no-any-return]

    async def put(self, key: str, value: Json) -> None:
        await self._call(f"put({key})", SimStoreHandle.put, key, value)

    async def cas(self, key: str, expected: Json, new: Json) -> bool:
        return await self._call(f"cas({key})", SimStoreHandle.cas, key, expected, new)  # type: ignore[no-any-return]

    async def delete(self, key: str) -> None:
        await self._call(f"delete({key})", SimStoreHandle.delete, key)

    async def scan(self, prefix: str) -> list[tuple[str, Json]]:
        return await self._call(f"scan({prefix})", SimStoreHandle.scan, prefix)  # type: ignore[no-any-return]


class AioTransport(SimTransport):
    """``env.net`` in an asyncio process."""

    __slots__ = ()

    async def send(self, dest: str, body: Json) -> None:
        loop = _running_loop()
        if type(loop) is not SimLoop:
            return await SimTransport.send(self, dest, body)
        await loop.env_call(self._proc, f"send({dest})", SimTransport.send, (self, dest, body))

    async def recv(self) -> Message:
        loop = _running_loop()
        if type(loop) is not SimLoop:
            return await SimTransport.recv(self)
        return await loop.env_call(  # type: ignore[no-any-return]
            self._proc, "recv", SimTransport.recv, (self,))


class AioServices(SimServices):
    """``env.services`` in an asyncio process."""

    __slots__ = ()

    async def call(self, service: str, op: str, request: Json) -> Json:
        loop = _running_loop()
        if type(loop) is not SimLoop:
            return await SimServices.call(self, service, op, request)
        return await loop.env_call(  # type: ignore[no-any-return]
            self._proc, f"call:{service}.{op}", SimServices.call, (self, service, op, request))


class AioClock:
    """``env.clock`` in an asyncio process: virtual time; ``sleep`` is asyncio's."""

    def now(self) -> float:
        return trio.current_time()

    async def sleep(self, seconds: float) -> None:
        loop = _running_loop()
        if type(loop) is not SimLoop:
            await trio.sleep(seconds)
            return
        await asyncio.sleep(seconds)


_AIO_CLOCK = AioClock()

#: The code of the ``env`` methods of an asyncio process (see ``SimLoop.create_task``).
_ENV_CODES = frozenset(
    getattr(cls, name).__code__
    for cls, names in ((AioStoreHandle, ("get", "put", "cas", "delete", "scan")),
                       (AioTransport, ("send", "recv")), (AioServices, ("call",)),
                       (AioClock, ("sleep",)))
    for name in names)


def _asyncio_env(sim: Sim, inc: Incarnation, env: Env) -> Env:
    stores = {name: AioStoreHandle(sim, sim.stores[name], inc) for name in env.stores}
    aenv = Env(env.name, _AIO_CLOCK, AioTransport(sim, inc), AioServices(sim, inc), env.rng,
               stores)
    sim._envs.append(aenv)
    return aenv


# -- what a blocked asyncio task waits on ---------------------------------------------

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
