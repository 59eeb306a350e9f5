"""structlog events from the code under test land in the trace.

The processor has structlog's shape, ``(logger, method, event_dict) ->
event_dict``, and stamps each event with the run's step and *virtual* time
(never the wall clock, unlike ``structlog.processors.TimeStamper``), then drops
it: rendering is left to ``dst show``, off the hot path of passing runs.

stdlib ``logging`` is deliberately *not* routed into the trace.  Which of its
records exist depends on the process's logging configuration (levels, filters,
handlers installed by the application or the test runner), not on the scenario,
its config and the seed, so recording them would make the trace depend on the
environment.  They still work inside a run: the guard (``dst/sim/guard.py``) has
``logging`` read the run's virtual clock, so ``LogRecord.created`` is virtual
seconds and no record reads the wall clock or trips a trap.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, MutableMapping
from typing import Any

import structlog

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


_CHAIN = [structlog.contextvars.merge_contextvars, capture_into_trace]
_PREFIX = structlog.contextvars.STRUCTLOG_KEY_PREFIX
#: structlog's registry of the variables ``bind_contextvars`` made (private, so
#: looked up defensively; without it every context variable is scanned).
_STRUCTLOG_VARS: dict[str, contextvars.ContextVar[Any]] | None = getattr(
    structlog.contextvars, "_CONTEXT_VARS", None
)


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


class _TraceLogger(structlog.make_filtering_bound_logger(0)):  # type: ignore[misc]
    """The same event dict as the chain builds, recorded without running the chain."""

    def _proxy_to_logger(self, method_name: str, event: Any = None, **event_kw: Any) -> Any:
        if not ACTIVE or self._processors is not _CHAIN:
            return super()._proxy_to_logger(method_name, event, **event_kw)
        fields = self._context.copy()
        fields.update(event_kw)
        _record(method_name, event, fields)
        return None


def _record(level: str, event: Any, fields: dict[str, Any]) -> None:
    """Record ``event`` with ``fields`` (which it may change) and the bound context variables."""
    if event is not None:
        fields["event"] = event
    if _STRUCTLOG_VARS:
        _merge_bound(fields)
    elif _STRUCTLOG_VARS is None:
        _merge_any(fields)
    ACTIVE[-1].logged(level, fields)


_Proxy = structlog._config.BoundLoggerLazyProxy
_CONFIG = structlog._config._CONFIG

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


@contextlib.contextmanager
def structlog_to_trace() -> Iterator[None]:
    """Route structlog to the active run's trace for the duration, then restore."""
    previous = structlog.get_config()
    structlog.configure(
        processors=_CHAIN,
        # The filtering logger is the fastest structlog wrapper (level 0: keep all).
        wrapper_class=_TraceLogger,
        logger_factory=structlog.ReturnLoggerFactory(),
        cache_logger_on_first_use=False,
    )
    try:
        with _plain_proxies_record():
            yield
    finally:
        structlog.configure(**previous)
