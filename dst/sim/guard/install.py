"""Installing and restoring the traps: setting them on their owners, swapping them into
every reference a user module holds (``from time import time``, clock aliases of
``datetime``, defaults and closure cells of its functions, its classes' attributes and
dataclass fields) and trio's own, then putting everything back, references taken during
the run included.  See :mod:`dst.sim.guard` for the design."""

from __future__ import annotations

import contextlib
import datetime as _dt
import re
import sys
import types
from _thread import get_ident
from typing import Any

from . import traps
from .blame import _exempt, _in_stdlib
from .targets import _targets
from .traps import (
    _REAL_DATE,
    _REAL_DATETIME,
    _STANDS_FOR,
    _GuardedDate,
    _GuardedDatetime,
    _Proxy,
    _Trap,
)

#: A clock method of ``datetime`` named in source code (called or taken).
_CLOCK_NAMED = re.compile(rb"\.(?:now|utcnow|today)\b")
_READS_CLOCK: dict[str, bool] = {}


def _names_datetime_clock(module: types.ModuleType) -> bool:
    """Whether ``module``'s source names a clock method of ``datetime`` anywhere
    (``.now``, ``.utcnow``, ``.today``); True when there is no source to read.

    The stand-ins replace ``datetime.datetime`` and ``datetime.date`` only where
    code could read the clock through them.  Elsewhere the real classes stay: a
    module that uses ``datetime`` only as a type (pydantic, when it builds a model's
    schema, asks ``obj is datetime.datetime`` of an annotation that may hold the
    real class, captured before the run) must see the same classes inside a run
    as outside.  Read once per module, from its file: a name in a comment counts
    too, which only keeps the stand-in where it always was.
    """
    name = module.__name__
    known = _READS_CLOCK.get(name)
    if known is None:
        path = getattr(module, "__file__", None)
        try:
            with open(path, "rb") as source:  # type: ignore[arg-type]
                known = _CLOCK_NAMED.search(source.read()) is not None
        except (OSError, TypeError, ValueError):
            known = True
        _READS_CLOCK[name] = known
    return known


#: The ``datetime`` module as a module that never reads its clocks sees it while the
#: guard is installed: with the real classes (see :func:`_names_datetime_clock`).
_PLAIN_DATETIME: Any = None

#: The clock-reading classmethods of ``datetime.datetime`` and ``datetime.date``.
_DATETIME_CLOCKS = frozenset({"now", "utcnow", "today"})
_DATE_CLOCKS = frozenset({"today"})
_BOUND_METHOD_TYPES = (types.BuiltinMethodType, types.MethodType)


def _clock_alias(value: Any) -> Any:
    """The trapping stand-in for a datetime clock method bound before the run, else None.

    ``time.time`` is one object, so a user module's ``from time import time``
    holds that very object and is found by identity and swapped.  A module-level
    ``NOW = datetime.datetime.now`` (or ``datetime.utcnow``, ``date.today``)
    holds no shared object: every attribute access on a class makes a new bound
    method, and ``datetime.datetime`` is a C type whose methods cannot be
    patched, so neither identity nor patching the class reaches the alias.
    What the alias does hold is its binding: a method named ``now``,
    ``utcnow`` or ``today`` whose ``__self__`` is the real ``datetime`` (or
    ``date``) class.  The scan of user modules' globals that swaps ``from time
    import time`` therefore also recognises that shape (one ``type()`` test per
    name, and only on the scans that look at every name) and swaps in the same
    method of the stand-in class (``_GuardedDatetime.now``), which traps exactly
    as ``datetime.datetime.now()`` itself does inside a run, and reads the real
    clock otherwise; ``restore()`` puts the user's own bound method back.

    Rejected alternatives: swapping ``datetime`` itself in user namespaces (done
    already) does not reach an alias taken from it; wrapping the alias needs the
    same recognition and adds a type of its own; ``sys.setprofile``-style call
    hooks would cost every call of every run.  As for ``time.time``, an alias
    kept in a local, a closure, a default argument or a class body is out of
    reach; ``--check-determinism`` is the backstop there.
    """
    if type(value) not in _BOUND_METHOD_TYPES:
        return None
    owner = getattr(value, "__self__", None)  # compared by identity: it may be unhashable
    name = getattr(value, "__name__", None)
    if owner is _REAL_DATETIME and name in _DATETIME_CLOCKS:
        return getattr(_GuardedDatetime, name)
    if owner is _REAL_DATE and name in _DATE_CLOCKS:
        return getattr(_GuardedDate, name)
    return None


_MISSING = object()


def _is_trio(name: str) -> bool:
    return name == "trio" or name.startswith("trio.")


_USER_MODULES: list[Any] = [None, []]


def _user_modules() -> list[tuple[str, types.ModuleType]]:
    """Loaded modules outside the standard library and the exempt packages.

    Kept while the set of loaded modules is the same (compared by the names'
    tuple, which is cheap next to judging each module again).
    """
    names = tuple(sys.modules)
    if _USER_MODULES[0] == names:
        return list(_USER_MODULES[1])
    mods = []
    for name, mod in list(sys.modules.items()):
        if mod is None or _exempt(name):
            continue
        path = getattr(mod, "__file__", None)
        if path and isinstance(path, str) and not _in_stdlib(path):
            mods.append((name, mod))
    _USER_MODULES[:] = [names, mods]
    return list(mods)


class _Installed:
    """What ``install`` changed, for ``restore`` to undo."""

    def __init__(self) -> None:
        #: (owner, attribute, original or _MISSING) in the order they were set.
        self.patched: list[tuple[Any, str, Any]] = []
        #: id(replacement) -> (replacement, original): to find traps taken mid-run.
        self.originals: dict[int, tuple[Any, Any]] = {}
        self.modules_before: set[str] = set()
        self.user_modules: list[tuple[str, types.ModuleType]] = []


def _plain_datetime() -> Any:
    global _PLAIN_DATETIME
    if _PLAIN_DATETIME is None:
        _PLAIN_DATETIME = _Proxy(_dt, datetime=_REAL_DATETIME, date=_REAL_DATE)
    return _PLAIN_DATETIME


def _install() -> _Installed:
    _plain_datetime()
    state = _Installed()
    shared: dict[int, tuple[Any, Any]] = {}
    entry_points: dict[int, tuple[Any, Any]] = {}
    for owner, attr, replacement, is_shared in _targets():
        original = vars(owner).get(attr, _MISSING)
        state.patched.append((owner, attr, original))
        setattr(owner, attr, replacement)
        if is_shared or isinstance(replacement, _Trap):
            state.originals[id(replacement)] = (replacement, original)
        if is_shared:
            shared[id(original)] = (original, replacement)
            if isinstance(replacement, _Trap) and replacement.entry_point:
                entry_points[id(original)] = (original, replacement)
    state.modules_before = set(sys.modules)
    state.user_modules = _user_modules()
    for _, mod in state.user_modules:
        _swap(state, mod, shared, "user")
    # trio's own modules hold entry points too (trio.Path calls ``run_sync`` by a
    # name imported from trio.to_thread); only those are swapped there.
    for name, mod in list(sys.modules.items()):
        if mod is not None and _is_trio(name):
            _swap(state, mod, entry_points, "trio")
    traps._GUARDED_THREAD = get_ident()
    traps._DEPTH += 1
    return state


#: Per module namespace and table kind: (namespace, its size, the names that held
#: an original) at the last full scan.  Installing scans every loaded module's
#: namespace, which in a test process with hundreds of modules costs more than a
#: run; a namespace of the same size is looked at again only at the names that
#: matched before.  A module that rebinds one of its names to ``time.time`` while
#: keeping its size is the case this misses; ``--check-determinism`` is the
#: backstop there, as for references taken into locals.
_SCANS: dict[tuple[int, str], tuple[dict[str, Any], int, tuple[str, ...]]] = {}


def _swap(state: _Installed, mod: types.ModuleType, table: dict[int, tuple[Any, Any]],
          kind: str) -> None:
    namespace = vars(mod)
    key = (id(namespace), kind)
    cached = _SCANS.get(key)
    full = cached is None or cached[0] is not namespace or cached[1] != len(namespace)
    names = list(namespace) if full or cached is None else cached[2]
    matched = []
    user = kind == "user"
    name = mod.__name__
    for attr in names:
        value = namespace.get(attr, _MISSING)
        hit = table.get(id(value))
        if hit is not None and hit[0] is value:
            replacement = hit[1]
            if user and replacement in _STANDS_FOR and not _names_datetime_clock(mod):
                continue  # ``from datetime import datetime``, as a type only
        elif user and (alias := _clock_alias(value)) is not None:
            replacement = alias  # ``NOW = datetime.datetime.now``: see _clock_alias
        elif user and value is _dt and not _names_datetime_clock(mod):
            replacement = _PLAIN_DATETIME  # ``import datetime``, as types only
        else:
            if user and _swap_inside(state, value, name, table):
                matched.append(attr)  # looked inside again on the next install
            continue
        matched.append(attr)
        state.patched.append((mod, attr, value))
        namespace[attr] = replacement
    if full:
        _SCANS[key] = (namespace, len(namespace), tuple(matched))


def _replacement(value: Any, table: dict[int, tuple[Any, Any]]) -> Any:
    """The trap (or stand-in) that takes ``value``'s place, or ``_MISSING``."""
    hit = table.get(id(value))
    if hit is not None and hit[0] is value:
        return hit[1]
    alias = _clock_alias(value)
    return _MISSING if alias is None else alias


def _swap_function(state: _Installed, fn: Any, table: dict[int, tuple[Any, Any]]) -> bool:
    """Swap the originals a function holds in its defaults and closure cells."""
    swapped = False
    defaults = fn.__defaults__
    if defaults:
        new = tuple(v if (r := _replacement(v, table)) is _MISSING else r for v in defaults)
        if any(a is not b for a, b in zip(new, defaults, strict=True)):
            state.patched.append((fn, "__defaults__", defaults))
            fn.__defaults__ = new
            swapped = True
    kwdefaults = fn.__kwdefaults__
    if kwdefaults:
        changed = {k: r for k, v in kwdefaults.items()
                   if (r := _replacement(v, table)) is not _MISSING}
        if changed:
            state.patched.append((fn, "__kwdefaults__", kwdefaults))
            fn.__kwdefaults__ = {**kwdefaults, **changed}
            swapped = True
    for cell in fn.__closure__ or ():
        try:
            value = cell.cell_contents
        except ValueError:  # a cell not filled yet
            continue
        replacement = _replacement(value, table)
        if replacement is not _MISSING:
            state.patched.append((cell, "cell_contents", value))
            cell.cell_contents = replacement
            swapped = True
    return swapped


def _swap_inside(state: _Installed, value: Any, module: str,
                 table: dict[int, tuple[Any, Any]]) -> bool:
    """Swap the originals that a function or class defined in ``module`` holds: a
    function's defaults and closure cells (``def f(clock=time.time)``), a class's
    attributes, its methods' defaults and closures (a dataclass's generated
    ``__init__`` keeps ``field(default=time.time)`` as a default and a
    ``default_factory`` in a closure cell) and its dataclass fields.  True when
    anything was swapped.  Bound before the run, these are what library code
    calls its clock through (the MCP SDK's ``clock: Callable = time.time``).
    """
    # Only ``type()`` is asked of what the namespace holds: ``isinstance`` would ask a
    # lazy proxy (openai's ``resources``) for its ``__class__``, importing what it stands for.
    kind = type(value)
    if kind is types.FunctionType:
        return value.__module__ == module and _swap_function(state, value, table)
    if not issubclass(kind, type) or value.__module__ != module:
        return False
    swapped = False
    for attr, member in list(vars(value).items()):
        replacement = _replacement(member, table)
        if replacement is not _MISSING:
            state.patched.append((value, attr, member))
            setattr(value, attr, replacement)
            swapped = True
            continue
        kind = type(member)
        if kind is staticmethod or kind is classmethod:
            member = member.__func__
        elif kind is property:
            member = member.fget
        if type(member) is types.FunctionType:
            swapped = _swap_function(state, member, table) or swapped
    fields = vars(value).get("__dataclass_fields__")
    if isinstance(fields, dict):
        for field in fields.values():
            for attr in ("default", "default_factory"):
                member = getattr(field, attr, None)
                replacement = _replacement(member, table)
                if replacement is not _MISSING:
                    state.patched.append((field, attr, member))
                    setattr(field, attr, replacement)
                    swapped = True
    return swapped


def _put_back(owner: Any, originals: dict[int, tuple[Any, Any]]) -> None:
    for attr, value in list(vars(owner).items()):
        hit = originals.get(id(value))
        if hit is not None and hit[0] is value and hit[1] is not _MISSING:
            setattr(owner, attr, hit[1])


def _restore(state: _Installed) -> None:
    traps._DEPTH -= 1
    for owner, attr, original in reversed(state.patched):
        if original is _MISSING:
            with contextlib.suppress(AttributeError):
                delattr(owner, attr)
        else:
            setattr(owner, attr, original)
    # References taken while the guard was installed: a user module that did
    # ``x = time.time`` at run time, a module first imported during the run
    # (``from time import time`` bound the trap), and the classes it defined.
    originals = state.originals
    for _, mod in state.user_modules:
        cached = _SCANS.get((id(vars(mod)), "user"))
        if cached is None or cached[1] != len(vars(mod)):
            _put_back(mod, originals)  # names added during the run may hold a trap
    before = state.modules_before
    for name, mod in list(sys.modules.items()):
        if mod is None or name in before:
            continue
        _put_back(mod, originals)
        for value in list(vars(mod).values()):
            if isinstance(value, type) and value.__module__ == name:
                with contextlib.suppress(AttributeError, TypeError):
                    _put_back(value, originals)
