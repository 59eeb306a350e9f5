"""One error tree for everything dst reports.

User-facing errors carry the culprit and the fix in one line; the CLI turns each
into that line and an exit status (``exit_code``), never a traceback.  Internal
invariant breaks are :class:`InternalError` ("please report it").
"""

from __future__ import annotations


class DstError(Exception):
    """Base of every error dst raises on purpose."""

    #: Exit status the CLI uses when this error reaches it.
    exit_code = 2


class UsageError(DstError):
    """Bad input from the user: an unknown scenario, an ill-typed switch, ..."""


class ScenarioError(DstError):
    """The user's scenario is broken: it does not import, or its setup or a check raised,
    or a run hung a worker.  Not a finding about the system under test, so it has its
    own exit status."""

    exit_code = 4


class CheckResultError(ScenarioError, TypeError):
    """A check of the scenario returned something other than ``True``, ``False`` or a
    message string: an error in the scenario, reported with the check's name and place
    (a ``TypeError`` too, as Python would call it)."""


class TraceFormatError(DstError):
    """A trace file that is not a valid dst trace (truncated, edited, foreign, ...)."""


class DivergenceError(DstError):
    """A replay made a different choice, or produced a different record, than the trace."""

    exit_code = 3


class NondeterminismError(DstError):
    """Code inside a simulated run touched the real world (wall clock, global random, ...).

    An ordinary ``DstError``, so that callers and the CLI handle it like every other
    error dst raises.  Catching it does not rescue the run: before raising, the trap
    has recorded the violation ``Nondeterminism`` and stopped the run, so an
    ``except Exception`` around the call changes nothing about the verdict.
    """


class ProcessCrashed(BaseException):
    """Raised into a crashed process that still tries to touch the world.

    A ``BaseException`` so that an ``except Exception`` in the code under test cannot
    swallow it and carry on as if the crash had not happened.
    """


class InternalError(DstError):
    """A broken invariant inside dst itself."""

    def __init__(self, message: str) -> None:
        super().__init__(f"internal error in dst - please report it: {message}")
