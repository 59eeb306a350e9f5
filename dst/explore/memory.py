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

Objects are written out *exactly*, by ``pickle`` (C speed, and it already knows
what an object's state is): a dict in insertion order, a set in iteration
order, two references to one object as one object and a back reference
(aliasing can steer what code does), a ``random.Random`` by its state.  A few
objects are written as tokens instead (:meth:`_Writer.reducer_override`): a
task by its label, the kernel's own objects (the run, a process, a store
handle) by name, since their state is in the kernel's part of the key; a
function by its code and the cells it closes over; a coroutine or generator
held in a variable by its frames; a cancel scope by its
deadline; logging objects (they never steer code) by class; and an object the
exact fingerprint names (read with the world) by its number.  An object pickle
cannot write (a lock of the ``threading`` kind, a socket) raises
:class:`Unreadable`, and the explorer then explores without caching states,
which is slower but never wrong.

What frames do not show, and so the key does not hold: a value held only on
the interpreter's stack across an ``await`` (a ``for`` loop's iterator, the
first operand of ``f(await a(), await b())``), and module globals.  A task's
position in a loop whose variable does not change is told apart anyway by the
number of steps the task has taken (the explorer adds it); the rest is what an
exact fingerprint promises does not steer the code under test
(``docs/design.md``, "States").
"""

from __future__ import annotations

import io
import os
import pickle
import random
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import trio
import trio.lowlevel as ll

#: Modules whose objects stand for themselves by class and name: the kernel
#: (its state is in the kernel's part of the key) and logging (never steers code).
_OPAQUE_MODULES = ("dst.sim.", "structlog", "logging")


class Unreadable(Exception):
    """An object whose state this module cannot read (so states cannot be cached)."""


def _token(*parts: Any) -> tuple[Any, ...]:
    """What a token unpickles to (never called: keys are only compared)."""
    return parts


_PLAIN, _TASK, _KERNEL, _FUNCTION, _RNG, _CLASS, _MODULE, _CORO, _FRAME, _SCOPE, _NURSERY, \
    _LOT = range(12)

#: How objects of each type are written (see ``_kind_of``), found once per type.
_KINDS: dict[type, int] = {}
#: The token each class is written as.
_NAMED: dict[type, Any] = {}


def _kind_of(t: type) -> int:
    if issubclass(t, ll.Task):
        return _TASK
    if issubclass(t, random.Random):  # the kernel's generators too: their state steers
        return _RNG
    if (t.__module__ or "").startswith(_OPAQUE_MODULES):
        return _KERNEL
    for kind, types_ in _KIND_TYPES:
        if issubclass(t, types_):
            return kind
    return _PLAIN


_KIND_TYPES: tuple[tuple[int, Any], ...] = (
    (_FUNCTION, types.FunctionType), (_RNG, random.Random), (_CLASS, type),
    (_MODULE, types.ModuleType), (_CORO, (types.CoroutineType, types.GeneratorType)),
    (_FRAME, (types.TracebackType, types.FrameType)), (_SCOPE, trio.CancelScope),
    (_NURSERY, trio.Nursery), (_LOT, ll.ParkingLot),
)


class _Writer(pickle.Pickler):
    """A pickler that writes tasks, kernel objects, functions and scopes as tokens."""

    def __init__(self, out: io.BytesIO, label: Callable[[ll.Task], str],
                 shared: Mapping[int, int] | None = None,
                 reads: Reads | None = None) -> None:
        super().__init__(out, protocol=pickle.HIGHEST_PROTOCOL)
        self.label = label
        self.shared = shared
        self.reads = reads
        # The callables every key's tokens are made of, as if written already: pickle
        # then refers to them by number instead of importing their modules to check
        # their names, every time.
        self.memo = _PRELUDE

    def reducer_override(self, obj: Any) -> Any:
        if self.shared:
            ref = self.shared.get(id(obj))
            if ref is not None:
                return _token, ("shared", ref)
        t = type(obj)
        kind = _KINDS.get(t)
        if kind is None:
            kind = _KINDS[t] = _kind_of(t)
        if kind == _PLAIN:
            return NotImplemented
        if kind == _CLASS:  # by its name, without importing its module to check it
            named = _NAMED.get(obj)
            if named is None:
                named = _NAMED[obj] = (_token, ("class", obj.__module__, obj.__qualname__))
            return named
        if kind == _TASK:
            return _token, ("task", self.label(obj))
        if kind == _KERNEL:
            return _token, ("kernel", t.__qualname__, _name_of(obj))
        if kind == _FUNCTION:
            if obj.__closure__ is None and "<" not in obj.__qualname__:
                return _token, ("def", obj.__module__, obj.__qualname__)  # by its name
            if (obj.__module__ or "").startswith(_OPAQUE_MODULES):
                return _token, ("kernel", obj.__qualname__)
            cells = tuple(_cell(c) for c in obj.__closure__ or ())
            return _token, ("fn", obj.__module__, obj.__qualname__, cells, obj.__defaults__,
                            obj.__kwdefaults__)
        if kind == _RNG:
            text = vars(obj).get("_text")
            if text is not None:  # seeded on first use, and not used yet
                return _token, ("rng", text)
            reads = self.reads
            if reads is None:
                return _token, ("rng", hash(obj.getstate()))
            known = reads.get(id(obj))
            if known is None:
                known = reads[id(obj)] = (obj, (_token, ("rng", hash(obj.getstate()))))
            return known[1]
        if kind == _MODULE:
            return _token, ("module", obj.__name__)
        if kind == _CORO:
            return _token, ("coroutine", frames(_frames_of(obj)))
        if kind == _FRAME:
            return _token, ("frame",)  # where an exception was raised: never steers code
        if kind == _SCOPE:
            return _token, ("scope", *_scope(obj))
        if kind == _NURSERY:
            return _token, ("nursery", tuple(sorted(self.label(c) for c in obj.child_tasks)))
        return _token, ("lot", tuple(self.label(task) for task in getattr(obj, "_parked", ())))


_MISSING = ("missing",)


def _cell(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return _MISSING


def _name_of(x: Any) -> Any:
    """What a kernel object is called (a process, an incarnation and its number, a store)."""
    value = getattr(x, "name", None)
    if not isinstance(value, str):
        value = getattr(x, "_name", None)
        if not isinstance(value, str):
            return None
    number = getattr(x, "number", None)
    return (value, number) if isinstance(number, int) else value


def _scope(scope: Any) -> tuple[Any, Any, Any]:
    # The private fields: reading ``cancel_called`` may cancel the scope.
    return (getattr(scope, "_deadline", None), getattr(scope, "_cancel_called", None),
            getattr(scope, "_shield", None))


def _frames_of(coro: Any) -> list[types.FrameType]:
    """The frames a coroutine is suspended in, outermost first (as trio walks them)."""
    out = []
    while coro is not None:
        if type(coro) is types.CoroutineType:
            frame = coro.cr_frame
            coro = coro.cr_await
        elif type(coro) is types.GeneratorType:
            frame = coro.gi_frame
            coro = coro.gi_yieldfrom
        else:
            break
        if frame is not None:
            out.append(frame)
    return out


#: trio's own frames (a sleep, a lock's acquire, a parking lot): what they hold is
#: held by the objects they wait on (a scope's deadline, a lock's owner and waiters, a
#: channel's buffer), which the key reads where the tasks' own frames reach them.
_TRIO = os.path.dirname(trio.__file__) + os.sep


def frames(found: Iterable[types.FrameType]) -> tuple[Any, ...]:
    """Where each frame is suspended (its code, by number, and the instruction), and the
    values of its local variables, in the order of their sorted names (``_UNBOUND`` for
    one not bound yet).

    By name, not in the order of ``f_locals``: that dict is kept on the frame
    and refreshed in place, so its order depends on when it was read before.
    """
    out: list[tuple[Any, ...]] = []
    for f in found:
        code = f.f_code
        known = _CODES.get(code)
        if known is None:
            names = (() if code.co_filename.startswith(_TRIO) else tuple(
                sorted(set(code.co_varnames + code.co_cellvars + code.co_freevars))))
            known = _CODES[code] = (len(_CODES), names)
        number, names = known
        if names:
            get = f.f_locals.get
            out.append((number, f.f_lasti, [get(n, _UNBOUND) for n in names]))
        else:
            out.append((number, f.f_lasti))
    return tuple(out)


class _Unbound:
    """What a key holds for a local variable not bound yet (in every key's prelude)."""


_UNBOUND = _Unbound()

#: What every pickle starts from: ``_token`` (what every token is written with),
#: ``_UNBOUND`` and ``getattr`` (how pickle writes a bound method), numbered.
_PRELUDE = {id(x): (i, x) for i, x in enumerate((_token, _UNBOUND, getattr))}

#: Each code object seen: a number (in the order first seen in this process: keys are
#: compared within one search) and its variable names, sorted (none for trio's own code).
_CODES: dict[types.CodeType, tuple[int, tuple[str, ...]]] = {}


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


#: What was read of one state, to read it once for its key and for the tasks' views:
#: by id, the object and what was read of it (a task's frames, a generator's state).
#: Valid only while no code runs: a new one for each state.
Reads = dict[int, tuple[Any, Any]]


def write(value: Any, label: Callable[[ll.Task], str],
          shared: Mapping[int, int] | None = None, reads: Reads | None = None) -> bytes:
    """``value`` written out exactly (tasks named by ``label``; the objects whose ids
    ``shared`` numbers, by that number), as bytes.

    Raises :class:`Unreadable` for an object whose state cannot be read.
    """
    out = io.BytesIO()
    try:
        _Writer(out, label, shared, reads).dump(value)
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError) as exc:
        raise Unreadable(f"a task holds an object whose state cannot be read ({exc})") from None
    return out.getvalue()


def tasks_memory(tasks: Iterable[tuple[str, ll.Task]], label: Callable[[ll.Task], str],
                 shared: Mapping[int, int] | None = None, reads: Reads | None = None) -> bytes:
    """Where each of ``tasks`` (``(label, task)`` pairs, in a stable order) is suspended,
    what its frames hold, and the cancel scopes it runs in, written out exactly; an
    object ``shared`` numbers (one the processes share, read elsewhere) by its number.
    ``reads`` keeps what was read of this state for the next call on it."""
    if reads is None:
        return write(tuple((name, _scopes(task), frames(_frames_of(task.coro)))
                           for name, task in tasks), label, shared)
    entries = []
    for name, task in tasks:
        known = reads.get(id(task))
        if known is None:
            known = reads[id(task)] = (task, (_scopes(task), frames(_frames_of(task.coro))))
        entries.append((name, *known[1]))
    return write(tuple(entries), label, shared, reads)


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
