"""Durable execution: workflows as async functions whose outside calls are logged steps.

See ``docs/durable.md``.  The pieces: :class:`Worker` (runs and resumes the
workflows of one process and routes messages to their inboxes),
:class:`Context` (``ctx``: steps, waits, signals, children, continue-as-new,
version), :class:`RetryPolicy`, and the errors.  This package sees only
:mod:`dst.env`, so the same workflows run on SQLite and a real clock, or under
the simulator.
"""

from .context import Context, StepCall, StepFn
from .errors import (
    ContinueAsNew,
    DurableError,
    NonDeterminismError,
    StepFailed,
    VersionError,
)
from .layout import inbox_key, log_prefix, meta_key, step_key
from .retry import NO_RETRY, RetryPolicy
from .worker import Worker, WorkflowType

__all__ = [
    "NO_RETRY",
    "Context",
    "ContinueAsNew",
    "DurableError",
    "NonDeterminismError",
    "RetryPolicy",
    "StepCall",
    "StepFailed",
    "StepFn",
    "VersionError",
    "Worker",
    "WorkflowType",
    "inbox_key",
    "log_prefix",
    "meta_key",
    "step_key",
]
