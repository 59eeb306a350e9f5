"""structlog events from the code under test land in the trace.

The processor has structlog's shape, ``(logger, method, event_dict) ->
event_dict``, and stamps each event with the run's step and *virtual* time
(never the wall clock, unlike ``structlog.processors.TimeStamper``), then drops
it: rendering is left to ``dst show``, off the hot path of passing runs.
"""

from __future__ import annotations

import contextlib
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


@contextlib.contextmanager
def structlog_to_trace() -> Iterator[None]:
    """Route structlog to the active run's trace for the duration, then restore."""
    previous = structlog.get_config()
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, capture_into_trace],
        # The filtering logger is the fastest structlog wrapper (level 0: keep all).
        wrapper_class=structlog.make_filtering_bound_logger(0),
        logger_factory=structlog.ReturnLoggerFactory(),
        cache_logger_on_first_use=False,
    )
    try:
        yield
    finally:
        structlog.configure(**previous)
