"""One run of a ``@dst.test`` body: the setup that starts it as the process ``test``,
and what the run's checks read of it.

The body's ``AssertionError`` (or ``pytest.fail()``) is the violation ``assert``,
its ``pytest.skip()`` or ``pytest.xfail()`` skips the seed (recorded as an event
and on the run, :func:`skip_reason`), and a body that awaits the other runtime's
primitives is refused in one line (:func:`_misused`), not reported as a finding.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Coroutine
from typing import Any

from ..errors import UsageError
from ..sim.kernel import Sim
from .assertion import _without_libraries, assertion_message
from .watchdog import _SeedTimedOut

#: The name of the process the body runs as, in stories and traces.
PROCESS = "test"
#: The durable store ``env.store`` is (``env.stores["main"]``).
STORE = "main"

TestBody = Callable[..., Coroutine[Any, Any, object]]


def _leaf(exc: BaseException) -> BaseException:
    """The first exception of ``exc``'s groups, however deep (``exc`` itself if none)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


class _Outcome:
    """The world of one run: the failed assertion's message, once the body raised it,
    and whether the body has finished."""

    def __init__(self, sim: Sim, bound: int) -> None:
        self.failed: str | None = None
        #: The one line saying the body used the wrong runtime (raised by ``check``).
        self.misused: str | None = None
        self.done = False
        self.sim = sim
        #: The test's own step bound (``@dst.test(max_steps=...)``).
        self.bound = bound

    def check(self) -> bool | str:
        if self.misused is not None:  # no finding: the test is written wrong
            raise UsageError(self.misused)
        return True if self.failed is None else self.failed

    def finished(self) -> bool | str:
        """``Unfinished``: the body still running when the run reaches the test's bound.

        Checked before every decision, so it speaks just before the kernel would cut
        the run.  A run under another bound (``dst explore --max-steps``) is cut by
        that bound as any scenario's run is.
        """
        sim = self.sim
        if self.done or sim.step < self.bound or sim.max_steps != self.bound:
            return True
        return (f"the test body had not finished after {self.bound:,} steps, the test's "
                "bound: make the body finish (a loop that never ends? a task never "
                "cancelled?), or raise @dst.test(max_steps=...)")


class _Setup:
    """``setup(sim, config)`` of a test's scenario: the body as the process ``test``.

    A callable object rather than a closure so that it can carry the body's module
    and code: the scenario's *origin*, which decides which code is the user's
    (``Scenario.user_code``) as for a scenario written in the test's module.
    """

    def __init__(self, fn: TestBody, asked: frozenset[str], bound: int,
                 runtime: str = "trio") -> None:
        self.fn = fn
        self.asked = asked
        self.bound = bound
        self.runtime = runtime
        #: Seed -> the failed assertion's full text (pytest's explanation, not recorded).
        self.explained: dict[int, str] = {}
        #: Seed -> the ``pytest.skip()`` (or ``pytest.xfail()``) its body called.
        self.skipped: dict[int, BaseException] = {}
        #: Seeds started so far, and the last one (read by :class:`dst.small.watchdog._Watchdog`).
        self.started = 0
        self.seed = 0
        self.__module__ = fn.__module__
        self.__code__ = fn.__code__

    def __call__(self, sim: Sim, config: dict[str, Any]) -> _Outcome:
        outcome = _Outcome(sim, self.bound)
        plan, seed = sim.faults, sim.seed
        self.started += 1
        self.seed = seed
        fn, asked, explained = self.fn, self.asked, self.explained

        async def main(env: Any) -> None:
            given = {"env": env, "faults": plan}
            try:
                await fn(**{k: v for k, v in given.items() if k in asked})
            except BaseException as exc:  # an assertion, however deep in task groups
                leaf = _leaf(exc)
                if isinstance(leaf, _SeedTimedOut):
                    raise leaf from None  # the run is abandoned: out of the kernel at once
                if _is_skip(leaf):
                    self.skipped.setdefault(seed, leaf)
                    _skipped(sim, leaf)
                    return
                if _awaited_other_runtime(leaf, self.runtime):
                    outcome.misused = _misused(fn.__name__, leaf, self.runtime)
                    return
                if not isinstance(leaf, AssertionError) and not _is_fail(leaf):
                    raise
                outcome.failed = assertion_message(leaf)
                explained[seed] = str(leaf)
            finally:
                outcome.done = True

        sim.process(PROCESS, main, stores=[STORE], runtime=self.runtime)
        return outcome


def _is_skip(exc: BaseException) -> bool:
    """``pytest.skip()`` or ``pytest.xfail()``: the seed tested nothing."""
    runner = sys.modules.get("pytest")
    return runner is not None and isinstance(exc, (runner.skip.Exception,
                                                   runner.xfail.Exception))


def _is_fail(exc: BaseException) -> bool:
    """``pytest.fail(msg)``: a failed test, as a failed ``assert`` is (not an xfail)."""
    runner = sys.modules.get("pytest")
    return runner is not None and isinstance(exc, runner.fail.Exception) and not \
        isinstance(exc, runner.xfail.Exception)


#: What trio says when a task awaits something of another event loop's (asyncio's).
_FOREIGN = "trio.run received unrecognized yield message"
#: What asyncio says when a task awaits something of another event loop's (trio's).
_BAD_YIELD = "Task got bad yield: "


def _awaited_other_runtime(exc: BaseException, runtime: str) -> bool:
    """Whether ``exc`` is trio refusing what an asyncio awaitable yielded, or asyncio
    refusing one of trio's traps."""
    if runtime == "trio":
        return isinstance(exc, TypeError) and str(exc).startswith(_FOREIGN)
    if not isinstance(exc, RuntimeError) or not str(exc).startswith(_BAD_YIELD):
        return False
    tb = exc.__traceback__  # thrown in where trio's trap yielded: trio's frames
    while tb is not None:
        if str(tb.tb_frame.f_globals.get("__name__", "")).partition(".")[0] == "trio":
            return True
        tb = tb.tb_next
    return False


def _misused(name: str, exc: BaseException, runtime: str) -> str:
    """One line: the body awaited the other runtime, and how to write the test."""
    if runtime == "trio":
        return (f"{name}: the test body awaited asyncio{_where(exc)}, which a trio test "
                'cannot run; write @dst.test(runtime="asyncio") and make the body '
                "asyncio code")
    return (f"{name}: the test body awaited trio{_where(exc)}, which an asyncio test "
            'cannot run; drop runtime="asyncio" (a trio test) or make the body asyncio code')


def _where(exc: BaseException) -> str:
    """`` at FILE:LINE in FUNCTION``: the user's innermost frame of ``exc``, if any."""
    from ..sim.blocked import user_frames

    frames = user_frames(_without_libraries(exc.__traceback__))
    return f" at {frames[-1]}" if frames else ""


def _reason(exc: BaseException) -> str:
    """The reason ``pytest.skip(reason)`` gave (``xfail: reason`` for ``pytest.xfail``)."""
    reason = str(getattr(exc, "msg", None) or exc).strip().partition("\n")[0]
    runner = sys.modules.get("pytest")
    if runner is not None and isinstance(exc, runner.xfail.Exception):
        return f"{_XFAIL}: {reason}" if reason else _XFAIL
    return reason or "skipped"


#: How the reason of a seed whose body called ``pytest.xfail()`` reads: ``xfail: reason``.
_XFAIL = "xfail"


def xfail_reason(reason: str) -> str | None:
    """What ``pytest.xfail(reason)`` gave, from a seed's skip reason (``"xfail: reason"``;
    ``""`` when it gave none); None when the body called ``pytest.skip()``."""
    if reason == _XFAIL:
        return ""
    head, colon, rest = reason.partition(": ")
    return rest if colon and head == _XFAIL else None


#: The event a run records when its body calls ``pytest.skip()``, and the attribute
#: of the run that holds the skip's reason (read by :func:`skip_reason`).
SKIPPED = "skipped"
_REASON = "dst_skip_reason"


def _skipped(sim: Sim, exc: BaseException) -> None:
    """Record that the body skipped: an event of the process ``test`` with the reason
    (``dst show`` tells it), and the reason on the run, for ``dst run`` to count the
    seed as skipped rather than passed (it tested nothing)."""
    reason = _reason(exc)
    sim.event(PROCESS, SKIPPED, {"reason": reason})
    setattr(sim, _REASON, reason)


def skip_reason(sim: Sim) -> str | None:
    """Why the body of a ``@dst.test`` skipped in the run ``sim`` (``pytest.skip(reason)``),
    or None when it did not."""
    reason = sim.__dict__.get(_REASON)
    return reason if isinstance(reason, str) else None
