"""structlog events from the code under test land in the trace.

The processor has structlog's shape, ``(logger, method, event_dict) ->
event_dict``, and stamps each event with the run's step and *virtual* time
(never the wall clock, unlike ``structlog.processors.TimeStamper``), then drops
it: rendering is left to ``dst show``, off the hot path of passing runs.

stdlib ``logging`` is deliberately *not* routed into the trace.  Which of its
records exist depends on the process's logging configuration (levels, filters,
handlers installed by the application or the test runner), not on the scenario,
its config and the seed, so recording them would make the trace depend on the
environment.  They still work inside a run: the guard (``dst/sim/guard/``) has
``logging`` read the run's virtual clock, so ``LogRecord.created`` is virtual
seconds and no record reads the wall clock or trips a trap.

structlog is imported by the code under test, not by dst: a run whose code
never imports it does not pay for it.  A run routes structlog into the trace
from its start when structlog is already imported, and otherwise from the
moment the code under test first imports it (a one-shot import hook, installed
when this module is imported, configures structlog as its import completes), so
the events of a run, and its trace, are the same whenever structlog was
imported.  The same hook imports structlog without rich and asyncio:
``structlog.dev`` and ``structlog.tracebacks`` import rich (and with it pygments
and ``importlib.metadata``, most of structlog's import time) only to render an
exception, which no run does, and ``structlog.stdlib`` and ``structlog._native``
import asyncio only for their ``async`` methods, so they are given stand-ins that
import the real modules the first time they are used (``_Deferred``).  Only in
the ``dst`` program, whose start-up this is for: dst called from Python (a pytest
session) leaves the import of the caller's structlog as it would be without dst.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Iterator, MutableMapping, Sequence
from typing import Any

from .kernel import ACTIVE

#: What the last processor hands the ReturnLogger (which discards it).
_RENDERED: MutableMapping[str, Any] = {}


def capture_into_trace(
    logger: Any, method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    if not ACTIVE:
        return event_dict
    sim = ACTIVE[-1]
    fields = dict(event_dict)
    event = str(fields.pop("event", ""))
    if method not in ("info", "msg"):
        fields["level"] = method
    sim.event(sim.actor(), event, fields)
    return _RENDERED  # to a ReturnLogger: cheaper than raising DropEvent


# -- what dst configures structlog with: made when structlog is first routed ---------------

#: The processor chain dst configures; filled (in place) by ``_prepare``.
_CHAIN: list[Any] = []
#: structlog's prefix of the variables ``bind_contextvars`` makes.
_PREFIX = "structlog_"
#: structlog's registry of the variables ``bind_contextvars`` made (private, so
#: looked up defensively; without it every context variable is scanned).
_STRUCTLOG_VARS: dict[str, contextvars.ContextVar[Any]] | None = None
#: The wrapper class dst configures (``_TraceLogger``, made by ``_prepare``).
_TraceLogger: Any = None
#: structlog's lazy proxy class and its configuration (private: see ``_plain_proxies_record``).
_Proxy: Any = None
_CONFIG: Any = None


def _prepare() -> None:
    """Make what routing needs from structlog's module, once (it is imported by now)."""
    global _PREFIX, _STRUCTLOG_VARS, _TraceLogger, _Proxy, _CONFIG
    if _CHAIN:
        return
    import structlog

    _PREFIX = structlog.contextvars.STRUCTLOG_KEY_PREFIX
    _STRUCTLOG_VARS = getattr(structlog.contextvars, "_CONTEXT_VARS", None)

    class TraceLogger(structlog.make_filtering_bound_logger(0)):  # type: ignore[misc]
        """The same event dict as the chain builds, recorded without running the chain."""

        def _proxy_to_logger(self, method_name: str, event: Any = None,
                             **event_kw: Any) -> Any:
            if not ACTIVE or self._processors is not _CHAIN:
                return super()._proxy_to_logger(method_name, event, **event_kw)
            fields = self._context.copy()
            fields.update(event_kw)
            _record(method_name, event, fields)
            return None

    TraceLogger.__name__ = TraceLogger.__qualname__ = "_TraceLogger"
    _TraceLogger = TraceLogger
    _Proxy = structlog._config.BoundLoggerLazyProxy
    _CONFIG = structlog._config._CONFIG
    _CHAIN.extend([structlog.contextvars.merge_contextvars, capture_into_trace])


def _merge_bound(fields: dict[str, Any]) -> None:
    """Add the values bound with ``bind_contextvars`` that ``fields`` does not set.

    Only structlog's own variables, not every variable of the context: most
    runs bind none, and copying the context costs on every event.
    """
    assert _STRUCTLOG_VARS is not None
    for name, var in _STRUCTLOG_VARS.items():
        value = var.get(Ellipsis)
        if value is not Ellipsis:
            fields.setdefault(name[len(_PREFIX):], value)


def _merge_any(fields: dict[str, Any]) -> None:
    """``_merge_bound`` for a structlog without its registry: scan the whole context."""
    for var in contextvars.copy_context():
        if var.name.startswith(_PREFIX):
            value = var.get()
            if value is not Ellipsis:
                fields.setdefault(var.name[len(_PREFIX):], value)


def _record(level: str, event: Any, fields: dict[str, Any]) -> None:
    """Record ``event`` with ``fields`` (which it may change) and the bound context variables."""
    if event is not None:
        fields["event"] = event
    if _STRUCTLOG_VARS:
        _merge_bound(fields)
    elif _STRUCTLOG_VARS is None:
        _merge_any(fields)
    ACTIVE[-1].logged(level, fields)


#: Logging methods of the filtering logger, by attribute, and the level each logs at.
_LEVEL_METHODS = {
    "debug": "debug", "info": "info", "msg": "info", "warning": "warning", "warn": "warning",
    "error": "error", "critical": "critical", "fatal": "critical",
}


#: Proxies seen while dst records, and whether each is plain (``_is_plain``):
#: what a proxy was made with does not change, so it is looked at once.
_PLAIN: dict[Any, bool] = {}


def _is_plain(proxy: Any) -> bool:
    """Made by a bare ``structlog.get_logger()``, and no logger cached in it since."""
    return bool(not proxy._initial_values and proxy._processors is None
                and proxy._wrapper_class is None and proxy._context_class is None
                and proxy._cache_logger_on_first_use is not True
                and "bind" not in proxy.__dict__)


def _proxy_method(attribute: str, level: str) -> Any:
    """``proxy.info(...)`` for ``structlog.get_logger()``'s lazy proxy, while dst records.

    Without it each call assembles a throwaway bound logger (``__getattr__``,
    ``bind``, the logger's ``__init__``, its level method) only to record the
    event; here a plain proxy (no initial values, processors, wrapper or
    context class of its own, no cached logger) records it at once, with the
    same fields.  Anything else takes structlog's own path, unchanged.
    """

    def method(self: Any, event: Any, *args: Any, **kw: Any) -> Any:
        plain = _PLAIN.get(self)
        if plain is None:
            plain = _PLAIN[self] = _is_plain(self)
        if (plain and ACTIVE and not args and _CONFIG.default_processors is _CHAIN
                and _CONFIG.default_wrapper_class is _TraceLogger):
            if _STRUCTLOG_VARS is not None and not _STRUCTLOG_VARS:
                # Nothing bound with structlog, the common case: the text goes
                # apart, not into ``kw`` only to be taken out again.
                ACTIVE[-1].logged_text(level, "" if event is None else str(event), kw)
            else:
                if event is not None:
                    kw["event"] = event
                _record(level, None, kw)
            return None
        return getattr(self.bind(), attribute)(event, *args, **kw)

    method.__name__ = attribute
    return method


@contextlib.contextmanager
def _plain_proxies_record() -> Iterator[None]:
    """Give the lazy proxy class the level methods of ``_proxy_method`` for the duration."""
    if (_CONFIG.default_context_class is not dict
            or any(name in _Proxy.__dict__ for name in _LEVEL_METHODS)):
        yield  # a configuration or structlog version this shortcut does not know
        return
    for name, level in _LEVEL_METHODS.items():
        setattr(_Proxy, name, _proxy_method(name, level))
    try:
        yield
    finally:
        for name in _LEVEL_METHODS:
            delattr(_Proxy, name)
        _PLAIN.clear()


class _Routing:
    """structlog configured into the trace, from ``start`` to ``stop``, then as it was."""

    def __init__(self) -> None:
        self._previous: dict[str, Any] | None = None
        self._proxies = contextlib.ExitStack()

    def start(self) -> None:
        import structlog

        _prepare()
        self._previous = structlog.get_config()
        structlog.configure(
            processors=_CHAIN,
            # The filtering logger is the fastest structlog wrapper (level 0: keep all).
            wrapper_class=_TraceLogger,
            logger_factory=structlog.ReturnLoggerFactory(),
            cache_logger_on_first_use=False,
        )
        self._proxies.enter_context(_plain_proxies_record())

    def stop(self) -> None:
        previous, self._previous = self._previous, None
        if previous is None:  # never started: structlog was not imported during the run
            return
        import structlog

        try:
            self._proxies.close()
        finally:
            structlog.configure(**previous)


#: Runs waiting for the code under test to import structlog, outermost first.
_WAITING: list[_Routing] = []


@contextlib.contextmanager
def structlog_to_trace() -> Iterator[None]:
    """Route structlog to the active run's trace for the duration, then restore.

    When structlog is not imported yet, routing starts as the code under test
    imports it (``_StructlogImport``), if it does before the end.
    """
    routing = _Routing()
    if "structlog" in sys.modules:
        routing.start()
        try:
            yield
        finally:
            routing.stop()
        return
    _WAITING.append(routing)
    try:
        yield
    finally:
        _WAITING.remove(routing)
        routing.stop()


# -- importing structlog: routed from the moment it is imported, rich and asyncio on use --


class _Deferred(types.ModuleType):
    """A stand-in for a module (rich, asyncio) while structlog imports it.

    Any attribute is a ``_LazyName`` (a dunder is missing, so the import system
    sees a plain module, not a package), so ``from rich.console import Console``
    binds a name that imports ``rich.console`` when it is first called or looked into.
    """

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        real = sys.modules.get(self.__name__)
        if real is not None and real is not self:  # imported since: no detour
            with contextlib.suppress(AttributeError):
                return getattr(real, attr)
        return _LazyName(self.__name__, attr)


class _LazyName:
    """``module.attr``, imported when first used (called, or an attribute looked up)."""

    def __init__(self, module: str, attr: str) -> None:
        self._where = (module, attr)
        self._real: Any = _LazyName

    def _resolve(self) -> Any:
        if self._real is _LazyName:  # not resolved yet
            module, attr = self._where
            real = importlib.import_module(module)
            try:
                self._real = getattr(real, attr)
            except AttributeError:  # a submodule not imported yet: ``rich.pretty``
                self._real = importlib.import_module(f"{module}.{attr}")
        return self._real

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._resolve()(*args, **kwargs)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return getattr(self._resolve(), attr)

    def __repr__(self) -> str:
        return f"<{'.'.join(self._where)}, imported when first used>"


#: Per package structlog imports only to use later (26.1): the modules of it that
#: structlog imports, and the modules of structlog that keep it under its name.
_DEFERRED: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "rich": (("rich", "rich.console", "rich.traceback", "rich.pretty"),
             ("structlog.dev", "structlog.tracebacks")),
    "asyncio": (("asyncio",), ("structlog._native", "structlog.stdlib")),
}


def _standins() -> dict[str, _Deferred]:
    """Stand-ins for the packages of ``_DEFERRED`` not imported yet (and installed).

    Only in the ``dst`` program, whose start-up they shorten: dst called from
    Python (a pytest session, a notebook) leaves the caller's structlog as it
    would be without dst.
    """
    from ..launcher import in_program

    if not in_program():
        return {}
    return {name: _Deferred(name) for package, (modules, _) in _DEFERRED.items()
            if package not in sys.modules and importlib.util.find_spec(package) is not None
            for name in modules}


def _taken(standins: dict[str, _Deferred]) -> bool:
    """Whether structlog took the stand-ins (rather than deciding a package is missing)."""
    return all(isinstance(getattr(sys.modules.get(user), package, None), _Deferred)
               for package, (_, users) in _DEFERRED.items() if package in standins
               for user in users)


#: What the import system sets on a module before running it.
_MODULE_ATTRIBUTES = frozenset({"__name__", "__doc__", "__package__", "__loader__", "__spec__",
                                "__path__", "__file__", "__cached__", "__builtins__"})


class _StructlogLoader(importlib.abc.Loader):
    """structlog's own loader, with the stand-ins of ``_DEFERRED`` in place while it runs."""

    def __init__(self, spec: importlib.machinery.ModuleSpec, loader: Any) -> None:
        self._spec, self._loader = spec, loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        module: types.ModuleType | None = self._loader.create_module(spec)
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        _StructlogImport.remove()
        self._spec.loader = module.__loader__ = self._loader  # structlog's, as it would be
        standins = _standins()
        sys.modules.update(standins)
        try:
            self._loader.exec_module(module)
            lazy = _taken(standins)
        except Exception:
            if not standins:
                raise
            lazy = False
        finally:
            for name, standin in standins.items():
                if sys.modules.get(name) is standin:
                    del sys.modules[name]
        if standins and not lazy:
            # A structlog that uses them otherwise than these stand-ins expect: import
            # it again, as if nothing stood in (its submodules too, which the package
            # would otherwise find as its own attributes).
            for name in [m for m in sys.modules if m.startswith("structlog.")]:
                del sys.modules[name]
            for name in [n for n in vars(module) if n not in _MODULE_ATTRIBUTES]:
                delattr(module, name)
            self._loader.exec_module(module)
        if _WAITING:
            _WAITING[0].start()


class _StructlogImport(importlib.abc.MetaPathFinder):
    """Finds structlog with the finders after it, and gives it ``_StructlogLoader``, once."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != "structlog":
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec: importlib.machinery.ModuleSpec | None = find(fullname, path, target)
            if spec is not None:
                if hasattr(spec.loader, "exec_module"):
                    spec.loader = _StructlogLoader(spec, spec.loader)
                return spec
        return None

    @staticmethod
    def remove() -> None:
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _StructlogImport)]


if "structlog" not in sys.modules:
    sys.meta_path.insert(0, _StructlogImport())
