"""The tasks of a simulated event loop: numbered, labelled, tracked.

Each task and future of a loop is numbered in creation order, which is its
hash (:class:`SimTask`), so that sets of them iterate alike in every run of a
seed.  A task is labelled after its name or its coroutine's function
(``P/worker``, ``P/worker#2``); an ``env`` call wrapped in a task of its own
after the task that made it (``P/task:call``).  The loop holds its tasks
weakly, as asyncio does, in creation order (``_all_tasks``), and
``asyncio.eager_task_factory`` makes tasks of the loop's own.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import weakref
from typing import Any

from .state import LoopState

#: ``asyncio.eager_task_factory`` (Python 3.12+), which builds an ``asyncio.Task`` itself,
#: never asking the loop: while a simulated loop's callbacks run, the loop builds it.
_EAGER: Any = getattr(asyncio.tasks, "eager_task_factory", None)
_EAGER_HOMES = (vars(asyncio), vars(asyncio.tasks))


def _eager_task_factory(loop: Any, coro: Any, *, name: str | None = None,
                        context: Any = None) -> Any:
    """``asyncio.eager_task_factory`` on a simulated loop: a task of the loop's, numbered
    and labelled as ``create_task`` makes them, whose first step runs at once."""
    if isinstance(loop, Tasks):
        return loop._create_task(coro, name, context, True)
    return _EAGER(loop, coro, name=name, context=context)


class SimTask(asyncio.Task):  # type: ignore[type-arg]
    """An asyncio task of a simulated process: labelled, and hashed by creation order.

    A task's hash is its number in its loop, not its address, so that a set of
    tasks (``asyncio.wait``'s ``done`` and ``pending``) iterates in the same
    order in every run of a seed.
    """

    _dst_seq = 0
    _dst_label = ""
    _dst_context: contextvars.Context | None = None

    def __init__(self, coro: Any, *, loop: LoopState, name: str, context: contextvars.Context,
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
        if isinstance(loop, Tasks) and self is not loop._main:
            self._dst_label = loop._relabel(self._dst_label, _short(str(value)))


class SimFuture(asyncio.Future):  # type: ignore[type-arg]
    """A future of a simulated process's loop, hashed by creation order (see SimTask)."""

    _dst_seq = 0

    def __hash__(self) -> int:
        return self._dst_seq


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


#: The code of the ``env`` methods of an asyncio process (``env._ENV_CODES``), read when
#: the first task is made: that module imports the loop, which this module is part of.
_ENV_CODES: frozenset[Any] | None = None


def _env_codes() -> frozenset[Any]:
    global _ENV_CODES
    from .env import _ENV_CODES as codes

    _ENV_CODES = codes
    return codes


class Tasks(LoopState):
    """The loop's tasks and futures, their numbers and labels."""

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
                if getattr(coro, "cr_code", None) in (_ENV_CODES or _env_codes()):
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

    def _pending(self) -> list[asyncio.Task[Any]]:
        return [t for t in self._all_tasks() if not t.done()]
