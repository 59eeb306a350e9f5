"""What a run finds: invariants after every step, checks at the end, built-in findings.

A finding is recorded (a ``violation`` record) and stops the run at once, so
that no later step of the code under test can hide it: an invariant that
fails, an end-of-run check that fails, a process that raised
(``NoUncaughtError``, with the user's frames), a guard trap
(``Nondeterminism``).  ``Deadlock`` and ``Livelock`` are found by the parts
that see them (``liveness`` and ``busy``) and recorded the same way.
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable
from typing import Any

from ..errors import CheckResultError, ProcessCrashed
from .blocked import user_frames, users_line
from .outside import DEFAULT_OWNERS
from .process import Process
from .state import SimState


class Findings(SimState):
    """The part of :class:`~dst.sim.kernel.Sim` that records what a run found."""

    def _check_invariants(self) -> bool:
        """Run every invariant; on the first violation record it, stop, return True.

        Pending ``eventually`` properties are looked at here too: the run ends
        (True) once every one of them has held.
        """
        for name, check in self._invariants:
            result = check()
            if result is True:
                continue
            message = violation_message(name, result, check, self._seed)
            self._violate(name, message)
            return True
        if self._pending:
            return self._check_eventually()
        return False

    def _violate(self, name: str, message: str) -> None:
        self.records.append(("violation", self.step, self.now, name, message))
        if name not in self.violated:
            self.violated.append(name)
        self._stop("violation")

    def trapped(self, message: str) -> None:
        """A guard trap fired: the run is void, whatever the code under test does next.

        Recorded as the built-in violation ``Nondeterminism`` and the run stopped
        at once, so that ``except Exception`` around the offending call cannot
        turn the run back into a pass.
        """
        if "Nondeterminism" not in self.violated:
            self._violate("Nondeterminism", message)

    def uncaught(self, proc: Process, exc: BaseException) -> None:
        """A process raised: that is a finding, not a dst failure.

        The violation names the exception and where the user's code raised it;
        the record carries the user's frames (``file:line in func``) for
        ``dst show --verbose``.
        """
        leaf = exc
        while isinstance(leaf, BaseExceptionGroup):
            leaf = leaf.exceptions[0]
        frames = user_frames(leaf.__traceback__)
        where = f" at {frames[-1]}" if frames else ""
        if frames:  # raised inside the standard library or a library: name the user's line
            mine = users_line(leaf.__traceback__, self.code_owners or DEFAULT_OWNERS)
            if mine is not None and mine != frames[-1]:
                where = f" at {mine} (raised at {frames[-1]})"
        message = f"{proc.name} raised {type(leaf).__name__}: {leaf}{where}"
        if isinstance(leaf, ProcessCrashed):
            message += (" (a task started by a crashed process died with it inside this "
                        "process's nursery; processes should not share nurseries)")
        self.records.append(("violation", self.step, self.now, "NoUncaughtError", message, frames))
        if "NoUncaughtError" not in self.violated:
            self.violated.append("NoUncaughtError")
        self._stop("violation")

    def _run_end_checks(self) -> None:
        """Run every end-of-run check: their results first, then their violations, so
        that the story tells nothing after its first ``VIOLATED`` line but verdicts."""
        failed: list[tuple[str, str]] = []
        for name, check in self._end_checks:
            result = check()
            ok = result is True
            message = "" if ok else violation_message(name, result, check, self._seed,
                                                      "end-of-run check")
            self.records.append(("check", self.step, self.now, name, ok, message))
            if not ok:
                failed.append((name, message))
        for name, message in failed:
            self.records.append(("violation", self.step, self.now, name, message))
            if name not in self.violated:
                self.violated.append(name)

    @property
    def verdict(self) -> str:
        return "fail" if self.violated else "pass"


def violation_message(name: str, result: object, check: Callable[..., object],
                      seed: int | None, kind: str = "invariant") -> str:
    """What a check's answer other than ``True`` says: ``False``, or its own message.

    Any other answer is an error in the scenario, not a verdict (:func:`wrong_answer`).
    """
    if result is False:
        return f"{name} does not hold"
    if isinstance(result, str):
        return result
    raise wrong_answer(kind, name, check, result, seed)


def wrong_answer(kind: str, name: str, check: Callable[..., object], result: object,
                 seed: int | None) -> CheckResultError:
    """The one-line error for a check of ``kind`` that returned ``result``, neither
    ``True``, ``False`` nor a string: named by the check and where the user defined it."""
    at = defined_at(check)
    what = "None (it returned nothing)" if result is None else \
        f"{reprlib.repr(result)} ({type(result).__name__})"
    run = "" if seed is None else f" (seed {seed})"
    return CheckResultError(
        f"{kind} {name}{at} returned {what}{run}; a check returns True when it "
        "holds, and False or a message string saying what is wrong when it does not: "
        "fix the check to return one of those")


def defined_at(fn: Any) -> str:
    """`` (defined at FILE:LINE)`` of the scenario's function behind ``fn`` (bound to the
    world it looks at, or not), for an error about what it returned; "" when it has no code."""
    for attr in ("__func__", "func"):
        fn = getattr(fn, attr, fn)
    code = getattr(getattr(fn, "__wrapped__", fn), "__code__", None)
    if code is None:
        return ""
    from ..registry import shown_path  # an error path: loaded long before a run

    return f" (defined at {shown_path(code.co_filename)}:{code.co_firstlineno})"
