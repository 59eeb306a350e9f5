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


class _TraceLogger(structlog.make_filtering_bound_logger(0)):  # type: ignore[misc]
    """The same event dict as the chain builds, recorded without running the chain."""

    def _proxy_to_logger(self, method_name: str, event: Any = None, **event_kw: Any) -> Any:
        if not ACTIVE or self._processors is not _CHAIN:
            return super()._proxy_to_logger(method_name, event, **event_kw)
        fields = self._context.copy()
        fields.update(event_kw)
        if event is not None:
            fields["event"] = event
        if _STRUCTLOG_VARS is not None:
            # Only structlog's own variables, not every variable of the context:
            # most runs bind none, and copying the context costs on every event.
            for name, var in _STRUCTLOG_VARS.items():
                value = var.get(Ellipsis)
                if value is not Ellipsis:
                    fields.setdefault(name[len(_PREFIX):], value)
        else:
            for var in contextvars.copy_context():
                if var.name.startswith(_PREFIX):
                    value = var.get()
                    if value is not Ellipsis:
                        fields.setdefault(var.name[len(_PREFIX):], value)
        sim = ACTIVE[-1]
        text = str(fields.pop("event", ""))
        if method_name not in ("info", "msg"):
            fields["level"] = method_name
        sim.event(sim.actor(), text, fields)
        return None


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
        yield
    finally:
        structlog.configure(**previous)
