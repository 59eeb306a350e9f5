"""Errors of the durable runtime.

A :class:`NonDeterminismError` is the one error a durable runtime must never
swallow: it means the code now asks for a different step than the one its log
recorded at the same position, so returning the logged output would feed one
step's result to another (a *silent wrong replay*).  It names the workflow, the
step number and both sides, so the fix (a version branch, or letting old
workflows finish on old code) is obvious from the message.
"""

from __future__ import annotations

from dst.env import Json


class DurableError(Exception):
    """Base of the errors the durable runtime raises on purpose."""


class NonDeterminismError(DurableError):
    """Replaying a log on this code asked for a different step than the log holds."""

    def __init__(
        self, workflow: str, step: int, recorded: tuple[str, Json],
        asked: tuple[str, Json] | None,
    ) -> None:
        """``asked`` is ``None`` when the code ended (returned or continued as new) there."""
        self.workflow, self.step, self.recorded, self.asked = workflow, step, recorded, asked
        wants = "ends" if asked is None else f"asks for {asked[0]}({_short(asked[1])})"
        super().__init__(
            f"workflow {workflow} step {step}: the log holds {recorded[0]}({_short(recorded[1])})"
            f" but the code {wants}; add a version branch "
            "(ctx.version) for workflows started on the old code, or let them finish on it"
        )


class VersionError(DurableError):
    """A log was written by a newer code version than the one replaying it."""


class StepFailed(DurableError):
    """A step gave up after its retry policy ran out; the failure is logged like an output."""


class ContinueAsNew(BaseException):
    """Raised by ``ctx.continue_as_new``: end this run, start a new one with ``carried``.

    A ``BaseException`` so that an ``except Exception`` in workflow code cannot
    swallow it.
    """

    def __init__(self, carried: Json) -> None:
        super().__init__("continue as new")
        self.carried = carried


def _short(value: Json, limit: int = 80) -> str:
    import json

    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 3] + "..."
