"""What every task holds: the memory the explorer reads off the tasks' frames.

State caching (``dst explore`` with an exact ``@scenario.fingerprint``) skips a
state it has explored before, which is sound only if the state's key determines
everything the system does next.  The kernel knows its own part (stores,
messages, budgets, virtual time, the enabled options); the scenario's exact
fingerprint names the objects shared outside processes (fakes, probes).  This
module supplies the rest: for every live task of every process, where it is
(the code and instruction offset of each frame it is suspended in) and what it
holds (the frames' local variables, followed to every object they reach), and
the cancel scopes it runs in (their deadlines).

What frames do not show, and so the key does not hold: a value held only on
the interpreter's stack across an ``await`` (a ``for`` loop's iterator, the
first operand of ``f(await a(), await b())``), and module globals.  A task's
position in a loop whose variable does not change is told apart anyway by the
number of steps the task has taken (the explorer adds it); the rest is what an
exact fingerprint promises does not steer the code under test
(``docs/design.md``, "States").

How an object is written out is :mod:`dst.explore.writer`; whose module's
globals count as the system's, :mod:`dst.explore.watched`.
"""

from __future__ import annotations

import builtins
import logging
import os
import sys
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import trio.lowlevel as ll

from .watched import opaque, watched
from .writer import MET, Reads, Unreadable, _by_name, _frames_of, _scope, frames, write

__all__ = ["MET", "Reads", "Unreadable", "modules_of", "modules_state", "opaque",
           "shared_objects", "tasks_memory", "write"]


def _scopes(task: ll.Task) -> tuple[Any, ...]:
    """The cancel scopes ``task`` runs in that can change what it does (a deadline, a
    cancellation, a shield), innermost first, each with its place in the chain."""
    out = []
    status = getattr(task, "_cancel_status", None)
    depth = 0
    while status is not None:
        scope = getattr(status, "_scope", None)
        if scope is not None:
            deadline, cancelled, shield = _scope(scope)
            if cancelled or shield or deadline != _INF:
                out.append((depth, deadline, cancelled, shield))
        depth += 1
        status = getattr(status, "_parent", None)
    return tuple(out)


_INF = float("inf")


def tasks_memory(tasks: Iterable[tuple[str, ll.Task]], label: Callable[[ll.Task], str],
                 shared: Mapping[int, int] | None = None, reads: Reads | None = None) -> bytes:
    """Where each of ``tasks`` (``(label, task)`` pairs, in a stable order) is suspended,
    what its frames hold, the cancel scopes it runs in and the context variables it
    sees (a dict two tasks inherit through a ``ContextVar`` is memory they share),
    written out exactly; an object ``shared`` numbers (one the processes share, read
    elsewhere) by its number.  ``reads`` keeps what was read of this state for the
    next call on it."""
    if reads is None:
        return write(tuple((name, _scopes(task), frames(_frames_of(task.coro)),
                            _context(task)) for name, task in tasks), label, shared)
    entries = []
    for name, task in tasks:
        known = reads.get(id(task))
        if known is None:
            known = reads[id(task)] = (task, (_scopes(task), frames(_frames_of(task.coro)),
                                              _context(task)))
        entries.append((name, *known[1]))
    return write(tuple(entries), label, shared, reads)


def _context(task: ll.Task) -> tuple[tuple[str, Any], ...]:
    """The context variables ``task`` runs with, by name (a variable object cannot be
    written), in a stable order."""
    context = getattr(task, "context", None)
    if not context:
        return ()
    return tuple(sorted(((var.name, value) for var, value in context.items()),
                        key=_by_name))


def modules_of(tasks: Iterable[ll.Task]) -> set[str]:
    """The watched modules whose code ``tasks`` are suspended in, and every watched
    module their globals reach (a module, or a function or class defined in one)."""
    found: set[str] = set()
    for task in tasks:
        for f in _frames_of(task.coro):
            name = f.f_globals.get("__name__")
            if isinstance(name, str) and watched(name):
                found.add(name)
    todo = list(found)
    while todo:
        for other in _reached(todo.pop()):
            if other not in found:
                found.add(other)
                todo.append(other)
    return found


def _reached(name: str) -> tuple[str, ...]:
    module = sys.modules.get(name)
    out = set()
    for value in list(vars(module).values()) if module is not None else ():
        if isinstance(value, types.ModuleType):
            other = value.__name__
        elif isinstance(value, (type, types.FunctionType)):
            other = value.__module__
        else:
            continue
        if isinstance(other, str) and other != name and watched(other):
            out.add(other)
    return tuple(sorted(out))


#: Names in ``builtins`` and ``sys`` when dst was imported: any other was put there
#: by the code under test, and is shared by every task of every process.
_BASELINE = {m.__name__: frozenset(vars(m)) for m in (builtins, sys)}


def _world() -> tuple[Any, ...]:
    """Process-wide state outside every module the explorer watches that code reads
    and changes: the environment, loggers' levels, what was put on ``builtins`` and
    ``sys``."""
    manager = logging.Logger.manager
    loggers = sorted((name, lg.level, lg.disabled, lg.propagate)
                     for name, lg in list(manager.loggerDict.items())
                     if isinstance(lg, logging.Logger))
    root = logging.getLogger()
    extras = tuple(
        (m.__name__, sorted((k, v) for k, v in vars(m).items()
                            if k not in _BASELINE[m.__name__]
                            and not isinstance(v, types.ModuleType)))
        for m in (builtins, sys))
    return (sorted(os.environ.items()), (root.level, root.disabled), loggers,
            manager.disable, extras)


def modules_state(names: Iterable[str], label: Callable[[ll.Task], str],
                  reads: Reads | None = None) -> bytes:
    """The globals of the modules ``names``, written out exactly (a class with its
    class attributes, a function with its defaults and attributes: see the writer),
    and the process-wide state of :func:`_world`.

    Module globals, class attributes, function attributes and mutable defaults are
    memory every task of every process shares: a step that changes them is
    dependent with every other (:mod:`dst.explore.independence`).
    Raises :class:`Unreadable`.
    """
    entries = []
    for name in sorted(names):
        module = sys.modules.get(name)
        if module is None:
            continue
        entries.append((name, [(k, v) for k, v in sorted(vars(module).items(), key=_by_name)
                               if not (k.startswith("__") and k.endswith("__"))]))
    return write((tuple(entries), _world()), label, reads=reads)


def shared_objects(value: Any) -> dict[int, int]:
    """The objects an exact fingerprint names (the items of the tuple, list or dict it
    returns, or the value itself), numbered by their ids."""
    if isinstance(value, dict):
        items: Iterable[Any] = value.values()
    elif isinstance(value, (tuple, list)):
        items = value
    else:
        items = (value,)
    return {id(x): i for i, x in enumerate(items)
            if not isinstance(x, (str, int, float, bool, bytes, type(None)))}
