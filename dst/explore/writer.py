"""How the explorer writes an object out exactly, for a state's key.

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

What is written (each task's frames, scopes and context, the watched modules'
globals) is chosen by :mod:`dst.explore.memory`.
"""

from __future__ import annotations

import contextvars
import dis
import functools
import gc
import io
import os
import pickle
import random
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import trio
import trio.lowlevel as ll

from .watched import _stdlib, opaque, watched


def _filters_state(t: type) -> bool:
    """Whether instances of ``t`` decide what pickle sees of them (``__getstate__``,
    ``__reduce__``) in code that is not Python's own: such a method may leave out a
    field that steers the code, so the writer reads the instance's fields instead."""
    for c in t.__mro__:
        if c is object or _stdlib(c.__module__):
            continue
        if any(k in vars(c) for k in ("__getstate__", "__reduce__", "__reduce_ex__")):
            return True
    return False


class Unreadable(Exception):
    """An object whose state this module cannot read (so states cannot be cached)."""


def _token(*parts: Any) -> tuple[Any, ...]:
    """What a token unpickles to (never called: keys are only compared)."""
    return parts


_PLAIN, _TASK, _KERNEL, _FUNCTION, _RNG, _CLASS, _MODULE, _CORO, _FRAME, _SCOPE, _NURSERY, \
    _LOT, _FIELDS, _VAR, _CACHE, _CODE = range(16)

#: How objects of each type are written (see ``_kind_of``), found once per type.
_KINDS: dict[type, int] = {}
#: The token each class is written as.
_NAMED: dict[type, Any] = {}


def _kind_of(t: type) -> int:
    if issubclass(t, ll.Task):
        return _TASK
    if issubclass(t, random.Random):  # the kernel's generators too: their state steers
        return _RNG
    if opaque(t.__module__):
        return _KERNEL
    for kind, types_ in _KIND_TYPES:
        if issubclass(t, types_):
            return kind
    if _filters_state(t) and (hasattr(t, "__dict__") or hasattr(t, "__slots__")):
        return _FIELDS
    return _PLAIN


_KIND_TYPES: tuple[tuple[int, Any], ...] = (
    (_FUNCTION, types.FunctionType), (_RNG, random.Random), (_CLASS, type),
    (_MODULE, types.ModuleType), (_CORO, (types.CoroutineType, types.GeneratorType)),
    (_FRAME, (types.TracebackType, types.FrameType)), (_SCOPE, trio.CancelScope),
    (_NURSERY, trio.Nursery), (_LOT, ll.ParkingLot), (_VAR, contextvars.ContextVar),
    (_CACHE, functools._lru_cache_wrapper), (_CODE, types.CodeType),
)

#: Watched modules the writer met (a module, or a function or class defined in one):
#: the explorer reads their globals too (:func:`dst.explore.memory.modules_state`).
#: Cleared by the reader.
MET: set[str] = set()

#: Public attributes dst's own objects keep (their state is the kernel's part of a
#: key); any other public attribute on one of them was put there by the code under
#: test, and is read like any object's.
_KERNEL_OWN: dict[str, frozenset[str]] = {
    "SimStore": frozenset({"data", "name", "version"}),
    "Process": frozenset({"crash_label", "crashable", "idle", "live", "main", "name",
                          "restart_label", "sim", "store_names"}),
    "Network": frozenset({"in_flight", "sim"}),
    "VirtualClock": frozenset({"now", "on_quiescence"}),
    "RandomWalk": frozenset({"uniform"}),
    # The guard's traps (a library's default argument may hold one): named by what
    # they stand for, never by their original, which pickle would look up by a name
    # that now names the trap.
    "_Trap": frozenset({"what", "original", "instead", "entry_point", "reads", "virtual"}),
    "_MethodTrap": frozenset({"what", "original", "instead", "entry_point", "reads",
                              "virtual"}),
    # ... and their stand-ins for ``datetime``'s classes (of their metaclass, which
    # a module's ``NOW = datetime.datetime.now`` reaches through the bound method).
    "_StandIn": frozenset({"now", "utcnow", "today"}),
}


def _user_attributes(obj: Any) -> list[tuple[str, Any]] | None:
    """The public attributes the code under test put on one of dst's objects."""
    fields = getattr(obj, "__dict__", None)
    if not fields:
        return None
    t = type(obj)
    own = _KERNEL_OWN.get(t.__qualname__, frozenset())
    found = [(k, v) for k, v in fields.items()
             if not k.startswith("_") and k not in own and not hasattr(t, k)]
    if t.__qualname__ == "FaultPlan" or not found:
        return None
    return sorted(found, key=_by_name)


def _cached(cache: Any) -> list[tuple[str, Any]]:
    """The entries of a ``functools`` cache, by the text of their keys (the order of
    use is not state the code reads).  The C cache has no API for its entries; the
    garbage collector's view of it lists them: an unbounded cache's dict of results,
    or a bounded one's links as (key, result) pairs."""
    if not cache.cache_info().currsize:
        return []
    own = getattr(cache, "__dict__", None)
    wrapped = getattr(cache, "__wrapped__", None)
    found: list[Any] = []
    for ref in gc.get_referents(cache):
        if ref is own or ref is wrapped or isinstance(ref, type) or type(ref) is object:
            continue
        if type(ref) is dict:
            values = list(ref.values())
            if values and type(values[0]).__name__ == "_lru_list_elem":
                continue  # a bounded cache's index: its links are listed one by one
            if own is None or ref is not own:
                if cache.cache_parameters().get("maxsize") is None:
                    return sorted(((repr(k), v) for k, v in ref.items()), key=_by_name)
        found.append(ref)
    if len(found) % 2:
        raise pickle.PicklingError(f"the entries of functools cache {cache.__qualname__} "
                                   "could not be read")
    return sorted(((repr(found[i]), found[i + 1]) for i in range(0, len(found), 2)),
                  key=_by_name)


def _in_loop(code: types.CodeType, lasti: int) -> bool:
    """Whether instruction ``lasti`` of ``code`` is inside a ``for`` loop, whose
    iterator lives on the interpreter's stack, out of every reader's sight."""
    ranges = _LOOPS.get(code)
    if ranges is None:
        ranges = _LOOPS[code] = tuple(
            (ins.offset, int(ins.argval)) for ins in dis.get_instructions(code)
            if ins.opname == "FOR_ITER" and isinstance(ins.argval, int))
    return any(start < lasti < end for start, end in ranges)


_LOOPS: dict[types.CodeType, tuple[tuple[int, int], ...]] = {}


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
            if isinstance(obj.__module__, str) and watched(obj.__module__):
                MET.add(obj.__module__)
                attrs = class_state(obj)
                if attrs:  # its class attributes, as pickle's state (cycles are fine)
                    return (*named, attrs)
            return named
        if kind == _TASK:
            return _token, ("task", self.label(obj))
        if kind == _KERNEL:
            extra = _user_attributes(obj)
            if extra:
                return _token, ("kernel", t.__qualname__, _name_of(obj)), extra
            return _token, ("kernel", t.__qualname__, _name_of(obj))
        if kind == _FUNCTION:
            module = obj.__module__
            if isinstance(module, str) and watched(module):
                MET.add(module)
            if obj.__closure__ is None and "<" not in obj.__qualname__:
                # By its name, with what it holds: defaults and attributes.
                held = (obj.__defaults__, obj.__kwdefaults__,
                        getattr(obj, "__dict__", None) or None)
                if any(held):
                    return _token, ("def", module, obj.__qualname__), held
                return _token, ("def", module, obj.__qualname__)
            if opaque(obj.__module__):
                return _token, ("kernel", obj.__qualname__)
            cells = tuple(_cell(c) for c in obj.__closure__ or ())
            return _token, ("fn", obj.__module__, obj.__qualname__, cells, obj.__defaults__,
                            obj.__kwdefaults__, getattr(obj, "__dict__", None) or None)
        if kind == _VAR:  # its values are read with each task's context
            return _token, ("contextvar", obj.name)
        if kind == _FIELDS:
            # Its fields, not what its ``__getstate__`` chooses to show; written as
            # pickle's state (after the object is memoised, so cycles are fine).
            fields = dict(getattr(obj, "__dict__", None) or {})
            for name in _slots(t):
                if hasattr(obj, name):
                    fields[name] = getattr(obj, name)
            return _token, ("fields", _class_token(t)), sorted(fields.items())
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
            if watched(obj.__name__):
                MET.add(obj.__name__)
            return _token, ("module", obj.__name__)
        if kind == _CORO:
            found = _frames_of(obj)
            if type(obj) is types.GeneratorType and any(
                    _in_loop(f.f_code, f.f_lasti) for f in found):
                raise pickle.PicklingError(
                    f"generator {obj.__qualname__} is suspended in a for loop, whose "
                    "iterator dst cannot read")
            return _token, ("coroutine", frames(found))
        if kind == _CACHE:
            # A cache's results are memory its callers share (a cached "singleton"
            # dict changed by one task is seen by every other): read them.
            return _token, ("cache", obj.__module__, obj.__qualname__), _cached(obj)
        if kind == _FRAME:
            return _token, ("frame",)  # where an exception was raised: never steers code
        if kind == _CODE:  # immutable: where it was compiled is all there is to it
            return _token, ("code", obj.co_filename, obj.co_qualname, obj.co_firstlineno)
        if kind == _SCOPE:
            return _token, ("scope", *_scope(obj))
        if kind == _NURSERY:
            return _token, ("nursery", tuple(sorted(self.label(c) for c in obj.child_tasks)))
        return _token, ("lot", tuple(self.label(task) for task in getattr(obj, "_parked", ())))


_MISSING = ("missing",)


def _class_token(t: type) -> tuple[str, str]:
    return (t.__module__, t.__qualname__)


def _slots(t: type) -> list[str]:
    out: list[str] = []
    for c in t.__mro__:
        slots = vars(c).get("__slots__", ())
        out.extend([slots] if isinstance(slots, str) else
                   [n for n in slots if n not in ("__dict__", "__weakref__")])
    return out


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


def _by_name(pair: tuple[str, Any]) -> str:
    return pair[0]


#: Class attributes that Python keeps for itself (an ABC's subclass caches).
_CLASS_CACHES = frozenset({"_abc_impl"})


def class_state(cls: type) -> list[tuple[str, Any]]:
    """What a class holds that code may change: its attributes that are data (not its
    methods, properties and other descriptors), a method's defaults and attributes,
    and what the code under test put on an enum's members."""
    attrs: list[tuple[str, Any]] = []
    members = getattr(cls, "_member_map_", None)
    for key, value in sorted(vars(cls).items(), key=_by_name):
        if (key.startswith("__") and key.endswith("__")) or key in _CLASS_CACHES:
            continue
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if isinstance(value, types.FunctionType):
            held = (value.__defaults__, value.__kwdefaults__,
                    getattr(value, "__dict__", None) or None)
            if any(held):
                attrs.append((key, held))
            continue
        if isinstance(value, type) or hasattr(type(value), "__get__"):
            continue  # a nested class (read where it is met), a property, a descriptor
        if members is not None and key in members:
            extra = {k: v for k, v in vars(value).items() if k not in _ENUM_OWN}
            if extra:
                attrs.append((key, sorted(extra.items())))
            continue
        attrs.append((key, value))
    return attrs


_ENUM_OWN = frozenset({"_value_", "_name_", "__objclass__", "_sort_order_", "__init__"})
