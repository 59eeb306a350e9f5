"""The state of a simulated event loop, which each of its parts reads and writes.

:class:`LoopState` is ``asyncio.BaseEventLoop`` with the fields of dst's loop
(``dst.sim.aio``): its process and run, its tasks, its driver and the trio
tasks that make its ``env`` calls.  Each part of the loop (``tasks``,
``callbacks``, ``timers``, ``driver``, ``bridges``, ``streams``, ``executors``,
``ending``, ``waits``) is a class over it, and :class:`~dst.sim.aio.SimLoop`
is all of them; what one part calls on another is declared here, for the type
checker only.
"""

from __future__ import annotations

import asyncio
import collections
import weakref
from collections.abc import Awaitable, Callable
from threading import get_ident
from typing import TYPE_CHECKING, Any, cast

import trio
import trio.lowlevel as ll

from ..trio_internals import RUN_CONTEXT as _RUN_CONTEXT

if TYPE_CHECKING:
    from asyncio import events

    from ..kernel import Sim
    from ..process import Incarnation
    from .bridges import _Call
    from .loop import SimLoop

#: ``BaseEventLoop.__init__``'s attributes and the names of those that are containers.
_BASE_STATE: tuple[dict[str, Any], tuple[str, ...]] | None = None


def _base_state(cls: type[LoopState]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """What ``BaseEventLoop.__init__`` sets (it reads the environment, the clock's
    resolution, ...), once: a loop per process and seed copies it."""
    global _BASE_STATE
    probe = object.__new__(cls)
    probe._dead = True  # (``set_debug`` asks ``is_running``)
    asyncio.BaseEventLoop.__init__(probe)
    state = dict(vars(probe))
    del state["_dead"]
    state.pop("get_debug", None)
    containers = (collections.deque, list, dict, set, weakref.WeakSet)
    _BASE_STATE = state, tuple(n for n, v in state.items() if isinstance(v, containers))
    return _BASE_STATE


class LoopState(asyncio.BaseEventLoop):
    """The fields of a simulated loop (see the module docstring)."""

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
        state, fresh = _BASE_STATE or _base_state(type(self))
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
        loops[self._driver] = cast("SimLoop", self)  # (the loop is one)

    if TYPE_CHECKING:  # what one part calls on another, defined by that part
        def call_soon(self, callback: Callable[..., object], *args: Any,  # type: ignore[override]
                      context: Any = None) -> events.Handle: ...
        def _all_tasks(self) -> list[asyncio.Task[Any]]: ...
        def _pending(self) -> list[asyncio.Task[Any]]: ...
        def _create_task(self, coro: Any, name: str | None, context: Any,
                         eager: bool) -> asyncio.Task[Any]: ...
        def _relabel(self, old: str, name: str) -> str: ...
        def _enter(self) -> None: ...
        def _exit(self) -> None: ...
        def _report_unseen(self) -> None: ...
        def _asyncgen_firstiter_hook(self, agen: Any) -> None: ...
        def _asyncgen_finalizer_hook(self, agen: Any) -> None: ...
        def _due(self) -> None: ...
        def _arm(self) -> None: ...
        def _wakeup(self) -> None: ...
        def env_call(self, inc: Incarnation, op: str, fn: Callable[..., Awaitable[Any]],
                     args: tuple[Any, ...], parks: bool = False) -> asyncio.Future[Any]: ...
        def _dispatch_deferred(self) -> None: ...
        async def _call_inline(self) -> None: ...
        def _handoff(self) -> None: ...
        def _drain_pool(self) -> None: ...
        def _spawn(self, fn: Callable[..., Awaitable[None]], args: tuple[Any, ...],
                   label: str) -> ll.Task: ...
        def _kill(self) -> None: ...
        def _shutdown(self) -> bool: ...
        def _unretrieved(self) -> tuple[str, BaseException] | None: ...
        def _take(self) -> events.Handle: ...
