"""The small form: a test function is a scenario (``@dst.test``).

A scenario module declares switches, a setup, processes and named checks; a
small test needs none of that::

    @dst.test(seeds=2000)
    async def test_two_bumps_make_two():
        count = 0

        async def bump():
            nonlocal count
            seen = count
            await trio.sleep(0)
            count = seen + 1

        async with trio.open_nursery() as nursery:
            nursery.start_soon(bump)
            nursery.start_soon(bump)
        assert count == 2, f"lost update: count is {count}"

The decorator builds a real :class:`~dst.Scenario` named after the function
(``test_two_bumps_make_two.scenario``): its setup starts the body as one
simulated process, ``test``, so every trio checkpoint of its tasks is the
scheduler's choice while the plan's preemptions last, and seeds, traces,
replay and shrinking work as for any scenario.  An ``AssertionError`` escaping
the body (from the body itself or from any task of its nurseries) is the
violation ``assert``; any other exception is ``NoUncaughtError``, a stuck task
``Deadlock``, as everywhere in dst; a body still running at the test's step bound
is ``Unfinished``: a scenario's run cut at its bound is counted as cut, but a test
whose body never finished has not passed (its last asserts never ran).
``pytest.fail(msg)`` in the body is the violation ``assert`` too; ``pytest.skip()``
and ``pytest.xfail()`` skip the seed (it tested nothing): the test is skipped (xfailed)
only when every seed it ran did, else it passed or failed on the others.

``@dst.test(runtime="asyncio")`` runs the body as the main of an asyncio process
(``dst.sim.aio``); a body that awaits the other runtime's primitives is refused in
one line (:func:`_misused`), not reported as a finding.

What the decorator returns is a plain function of no arguments: pytest collects
and calls it like any other test (no trio or anyio plugin is involved).  It runs
the seeds in order (:func:`dst.testing.check_seeds`) and fails at the first
failing one, with that run's story and the one command that replays it; the
trace is written under ``traces/failures/`` as ``MODULE.NAME-SEED.jsonl`` (two
files may each hold a ``test_x``).  A seed that takes more than ``seed_timeout``
wall-clock seconds (a loop without ``await``) is stopped from another thread
(:class:`_Watchdog`), and the test fails naming it.  The trace header records the
test's file, so ``dst replay TRACE`` finds the test alone; ``--scenario
path/to/test_file.py::test_name`` names it explicitly.

The message a violation records must read the same in ``dst replay`` as under
pytest, which rewrites ``assert`` statements to explain them
(``assert 1 == 2``): so the trace holds the first line of the assertion's own
message, or, for a bare ``assert``, the statement's source, and pytest's
explanation is printed beside the story, not recorded.
"""

from __future__ import annotations

import ast
import ctypes
import inspect
import linecache
import os
import sys
import threading
from collections.abc import Callable, Coroutine, Iterable
from types import TracebackType
from typing import Any, overload

from .errors import DstError, UsageError
from .registry import shown_path
from .scenario import Scenario
from .sim.faults import NO_FAULTS, FaultPlan
from .sim.kernel import Sim
from .sim.state import DEFAULT_MAX_STEPS

__all__ = ["ASSERT", "DEFAULT_SEEDS", "PARAMETERS", "PROCESS", "RUNTIMES", "SEED_TIMEOUT",
           "STORE", "UNFINISHED", "test"]

#: Seeds a test runs when it does not say (as many as ``check_seeds`` runs).
DEFAULT_SEEDS = 500
#: The name of the process the body runs as, in stories and traces.
PROCESS = "test"
#: The durable store ``env.store`` is (``env.stores["main"]``).
STORE = "main"
#: The violation a failing ``assert`` is.
ASSERT = "assert"
#: Wall-clock seconds a seed may take when pytest runs a test (``dst run``'s default
#: ``--seed-timeout``, ``dst.runner.workers.SEED_TIMEOUT``, kept equal by a test):
#: a seed that takes longer is stuck in a loop without ``await`` or a blocking call.
SEED_TIMEOUT = 60.0
#: The violation a body still running at the test's step bound is: a test whose
#: body never finished has not passed (its last asserts never ran).
UNFINISHED = "Unfinished"
#: The runtimes a body may be written for (``@dst.test(runtime=...)``).
RUNTIMES = ("trio", "asyncio")
#: What a test function may ask for, by parameter name, and what it gets.
PARAMETERS = {
    "env": "the dst.Env of the simulated process the body runs as",
    "faults": "the FaultPlan the run is under",
}

TestBody = Callable[..., Coroutine[Any, Any, object]]


@overload
def test(fn: TestBody, /) -> Callable[[], None]: ...


@overload
def test(
    *, seeds: int | Iterable[int] = DEFAULT_SEEDS, faults: FaultPlan | None = None,
    max_steps: int = DEFAULT_MAX_STEPS, seed_timeout: float = SEED_TIMEOUT,
    runtime: str = "trio",
) -> Callable[[TestBody], Callable[[], None]]: ...


def test(
    fn: TestBody | None = None, /, *, seeds: int | Iterable[int] = DEFAULT_SEEDS,
    faults: FaultPlan | None = None, max_steps: int = DEFAULT_MAX_STEPS,
    seed_timeout: float = SEED_TIMEOUT, runtime: str = "trio",
) -> Callable[[], None] | Callable[[TestBody], Callable[[], None]]:
    """Decorator: run an ``async def test_...`` body over ``seeds`` simulated runs.

    ``seeds``: a count (``2000`` is seeds 0..1999) or the seeds themselves.
    ``faults``: the :class:`~dst.FaultPlan` every run is under (default: no
    faults, two preemptions at trio checkpoints).  ``max_steps``: decisions within
    which the body must finish (else the violation ``Unfinished``).
    ``seed_timeout``: wall-clock seconds a seed may take when the test runs (as
    ``dst run --seed-timeout``): past it, the seed is stopped and the test fails
    (a loop without ``await`` never lets the scheduler decide).  The body may ask
    for ``env`` and ``faults`` by parameter name.  ``runtime="asyncio"``: the body
    is asyncio code, run as the main of an asyncio process (``sim.process(...,
    runtime="asyncio")``).  Without parentheses (``@dst.test``) it runs
    ``DEFAULT_SEEDS`` seeds.
    """
    settings = _Settings(seeds, faults, max_steps, seed_timeout, runtime)
    if fn is not None:
        return settings.wrap(fn)
    return settings.wrap


test.__test__ = False  # type: ignore[attr-defined]  # pytest: a decorator, not a test


class _Settings:
    """The decorator's keywords, checked once, when the test module is imported."""

    def __init__(self, seeds: int | Iterable[int], faults: FaultPlan | None,
                 max_steps: int, seed_timeout: float, runtime: str = "trio") -> None:
        if isinstance(seeds, (bool, str, bytes)) or not isinstance(seeds, (int, Iterable)) or (
                isinstance(seeds, int) and seeds < 1):
            raise UsageError(f"@dst.test(seeds=...) is a count of 1 or more or the seeds "
                             f"themselves (seeds=500, seeds=range(100, 200)), not {seeds!r}")
        if not isinstance(seeds, int):
            given, seeds = seeds, tuple(seeds)
            if not seeds:
                raise UsageError(f"@dst.test(seeds={given!r}) gives no seed to run; give a "
                                 "count (seeds=500) or at least one seed")
            wrong = [s for s in seeds if isinstance(s, bool) or not isinstance(s, int) or s < 0]
            if wrong:
                raise UsageError(f"@dst.test(seeds=...) lists seeds, integers 0 or more, "
                                 f"not {wrong[0]!r}")
        if faults is not None and not isinstance(faults, FaultPlan):
            raise UsageError(f"@dst.test(faults=...) is a dst.FaultPlan(...), not {faults!r}")
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise UsageError(f"@dst.test(max_steps=...) is a step count of 1 or more, "
                             f"not {max_steps!r}")
        if isinstance(seed_timeout, bool) or not isinstance(seed_timeout, (int, float)) or \
                not 0 < seed_timeout < float("inf"):
            raise UsageError(f"@dst.test(seed_timeout=...) is a number of seconds above 0, "
                             f"not {seed_timeout!r}")
        if runtime not in RUNTIMES:
            raise UsageError(f"@dst.test(runtime=...) is 'trio' (the default) or 'asyncio', "
                             f"not {runtime!r}")
        self.runtime = runtime
        self.seeds = seeds
        self.faults = faults if faults is not None else NO_FAULTS
        self.max_steps = max_steps
        self.seed_timeout = float(seed_timeout)

    def wrap(self, fn: TestBody) -> Callable[[], None]:
        name = getattr(fn, "__name__", None)
        if not inspect.iscoroutinefunction(fn) or not isinstance(name, str):
            raise UsageError(f"@dst.test decorates an 'async def' test function, not "
                             f"{_named(fn)}; make it 'async def {name or 'test_...'}(...)'")
        asked = _parameters(fn, name)
        doc = (inspect.getdoc(fn) or "").strip().partition("\n")[0]
        scenario = Scenario(name, doc=doc or f"the dst test {name}", faults=self.faults,
                            max_steps=self.max_steps)
        setup = _Setup(fn, asked, self.max_steps, self.runtime)
        scenario.setup(setup)
        scenario.invariant(ASSERT)(_Outcome.check)
        scenario.invariant(UNFINISHED)(_Outcome.finished)
        scenario.at_end(ASSERT)(_Outcome.check)
        seeds, timeout = self.seeds, self.seed_timeout
        filename = inspect.getsourcefile(fn) or fn.__code__.co_filename
        # Failing traces are named after the module too: two test files may each
        # hold a test_x, and one run of pytest must not write both to test_x-SEED.
        module = fn.__module__ if fn.__module__ not in (None, "__main__") else \
            os.path.splitext(os.path.basename(filename))[0]

        def run() -> None:
            from .testing import SeedFailed, check_seeds  # loaded when a test runs

            ref = f"{shown_path(filename)}::{name}"
            setup.explained.clear()
            setup.skipped.clear()
            runs = 0
            try:
                with _Watchdog(setup, timeout):
                    try:
                        runs = check_seeds(scenario, seeds, scenario_ref=ref, verbose=True,
                                           trace_name=f"{module}.{name}").runs
                        failure = None
                    except SeedFailed as exc:
                        failure = str(exc) + _explanation(setup.explained.get(exc.seed))
            except BaseException as exc:  # the watchdog's stop, maybe in trio's groups
                leaf = _leaf(exc)
                if isinstance(leaf, DstError):  # the body awaited asyncio in a trio test
                    failure = str(leaf)
                elif isinstance(leaf, _SeedTimedOut):
                    failure = (f"{name}: seed {setup.seed} ran for more than {timeout:g}s of "
                               "wall-clock time without finishing, so it was stopped: a "
                               "loop without await, or a call that blocks, in the body? "
                               "(raise @dst.test(seed_timeout=...) if it is only slow)")
                else:
                    raise
            if failure is not None:  # outside the except: the message alone, not a chain
                _fail(failure)
            _after_skips(ref, setup.skipped, runs)

        run.__name__ = name
        run.__qualname__ = fn.__qualname__
        run.__module__ = fn.__module__
        run.__doc__ = fn.__doc__
        # Where pytest reports the test (its own attribute for wrapped tests).
        run.compat_co_firstlineno = fn.__code__.co_firstlineno  # type: ignore[attr-defined]
        run.scenario = scenario  # type: ignore[attr-defined]
        if hasattr(fn, "pytestmark"):  # @pytest.mark.xfail(...) under @dst.test
            run.pytestmark = fn.pytestmark  # type: ignore[attr-defined]
        return run


#: Under pytest, one line for each test that passed while some of its seeds skipped
#: (told at the end of the session by dst's plugin, ``partly_skipped``).
_PARTLY_SKIPPED: list[str] = []


def _after_skips(ref: str, skipped: dict[int, BaseException], runs: int) -> None:
    """A test skipped by ``pytest.skip()`` (or ``pytest.xfail()``) on every seed it ran is
    skipped (xfailed); one that ran on other seeds passed on those, as under ``dst run``,
    and the end of the session says how many seeds skipped."""
    if not skipped:
        return
    if len(skipped) >= runs:  # every seed: the test is skipped (xfailed)
        first = next(iter(skipped.values()))
        raise first  # its traceback ends at the user's skip() line
    reasons = sorted({_reason(exc) for exc in skipped.values()})
    _PARTLY_SKIPPED.append(
        f"{ref}: {len(skipped)} of {runs} seeds skipped ({'; '.join(reasons)}); it passed "
        f"on the other {runs - len(skipped)}")


def partly_skipped() -> list[str]:
    """The lines :func:`_after_skips` kept: tests that passed with some seeds skipped."""
    return list(_PARTLY_SKIPPED)


def _leaf(exc: BaseException) -> BaseException:
    """The first exception of ``exc``'s groups, however deep (``exc`` itself if none)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _named(fn: object) -> str:
    name = getattr(fn, "__name__", None)
    kind = "a plain function" if inspect.isfunction(fn) else type(fn).__name__
    return f"{kind} {name}" if isinstance(name, str) else repr(fn)


def _parameters(fn: TestBody, name: str) -> frozenset[str]:
    """The names of what the body asks for; anything else is refused in one line."""
    asked = set()
    for n, param in enumerate(inspect.signature(fn).parameters.values()):
        if param.name not in PARAMETERS or param.kind in (
                param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            offered = ", ".join(PARAMETERS)
            star = "*" * (param.kind == param.VAR_POSITIONAL) + "**" * (
                param.kind == param.VAR_KEYWORD)
            if n == 0 and param.name in ("self", "cls"):
                instead = ("a dst test is a module-level function: move it out of its "
                           "class (the class's setup does not run in a simulated run)")
            else:
                instead = ("pytest fixtures and @pytest.mark.parametrize cannot reach a "
                           "simulated run: loop over the values in the body, or write a "
                           "Scenario with a switch (docs/scenarios.md)")
            raise UsageError(f"{name} asks for {star}{param.name}, which a dst test cannot "
                             f"give; it may ask for {offered} by name (and needs no other "
                             f"parameter); {instead}")
        asked.add(param.name)
    return frozenset(asked)


def _explanation(text: str | None) -> str:
    """pytest's explanation of the failed assertion (``assert 1 == 2``, ``+ where``),
    when it says more than its first line, which the trace records."""
    lines = (text or "").strip().splitlines()
    if not lines or (len(lines) == 1 and not lines[0].startswith("assert ")):
        return ""
    return "\n  the assertion, as pytest explains it:\n" + "\n".join(
        f"    {line}" for line in lines)


def _fail(message: str) -> None:
    """Fail the test with ``message`` alone: pytest's own failure when pytest runs it."""
    runner = sys.modules.get("pytest")
    if runner is not None:
        runner.fail(message, pytrace=False)
    raise AssertionError(message)


class _SeedTimedOut(KeyboardInterrupt):
    """Raised in the test's thread by :class:`_Watchdog`: a seed ran past its timeout.

    A ``KeyboardInterrupt``, so that it leaves the run as Ctrl-C does: a process's
    other exceptions are findings the run carries on after.
    """


#: Wakes of the watchdog per timeout: how late past it a stuck seed may be stopped.
_TICKS = 4


class _Watchdog:
    """A thread that stops a seed running longer than ``timeout`` wall-clock seconds.

    A loop without ``await`` never hands the scheduler a decision, so nothing in the
    simulation can stop it (and nothing there reads the wall clock).  ``dst run``
    stops such a seed's worker process; a test runs its seeds in pytest's own
    process, so this thread raises :class:`_SeedTimedOut` in the test's thread
    instead (``PyThreadState_SetAsyncExc``: delivered between two bytecodes of the
    loop).  The run it interrupts is abandoned: the test fails naming the seed.
    A seed is seen to start by its setup (``_Setup.started``), so the thread wakes
    four times a ``timeout`` and costs the seeds nothing: a seed is stopped between
    one and one and a quarter ``timeout`` after it started, and again a ``timeout``
    later if the first stop was caught on its way (by code under test, say).
    """

    def __init__(self, setup: _Setup, timeout: float) -> None:
        self.setup = setup
        self.timeout = timeout
        self.target = threading.get_ident()
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="dst-seed-timeout",
                                       daemon=True)

    def __enter__(self) -> _Watchdog:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self.lock:  # no stop is raised once the seeds are done
            self.done.set()
        self.thread.join()

    def _watch(self) -> None:
        seen, ticks = self.setup.started, 0
        while not self.done.wait(self.timeout / _TICKS):
            with self.lock:
                if self.done.is_set():
                    return
                if self.setup.started != seen:
                    seen, ticks = self.setup.started, 0
                    continue
                ticks += 1
                if ticks == _TICKS:  # the same seed for a whole timeout at least
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(
                        ctypes.c_ulong(self.target), ctypes.py_object(_SeedTimedOut))
                    ticks = 0


# -- one run -----------------------------------------------------------------------------


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
        #: Seeds started so far, and the last one (read by :class:`_Watchdog`).
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
    from .sim.blocked import user_frames

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


def assertion_message(exc: BaseException) -> str:
    """What a run records of a failed assertion: the same under pytest's rewriting as without.

    The first line of the assertion's own message when it has one, else the
    ``assert`` statement's source, then where it failed (``file:line in
    function``, the user's innermost frame).
    """
    from .sim.blocked import user_frames

    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    node = _assert_at(tb.tb_frame.f_code.co_filename, tb.tb_lineno) if tb else None
    if node is not None and node.msg is None:
        source = "".join(linecache.getlines(tb.tb_frame.f_code.co_filename)) if tb else ""
        test = ast.get_source_segment(source, node.test) or "..."
        text = f"assert {' '.join(test.split())}"
    else:
        text = str(exc).strip().partition("\n")[0] or (
            "AssertionError" if isinstance(exc, AssertionError) else "pytest.fail()")
    frames = user_frames(_without_libraries(exc.__traceback__))
    return f"{text} ({frames[-1]})" if frames else text


#: Packages whose frames a failure is not told at: ``pytest.fail()`` raises in pytest's,
#: and what trio refuses of asyncio is raised in asyncio's.
_NOT_USERS = ("pytest", "_pytest", "asyncio")


def _without_libraries(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` without the frames of :data:`_NOT_USERS`: the failure is told at the
    user's line."""
    kept = []
    while tb is not None:
        if str(tb.tb_frame.f_globals.get("__name__", "")).partition(".")[0] not in _NOT_USERS:
            kept.append(tb)
        tb = tb.tb_next
    out = None
    for t in reversed(kept):
        out = TracebackType(out, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return out


def _assert_at(filename: str, line: int) -> ast.Assert | None:
    """The innermost ``assert`` statement of ``filename`` that spans ``line``, if any."""
    source = "".join(linecache.getlines(filename))
    if not source or not os.path.basename(filename).endswith(".py"):
        return None
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    found = [n for n in ast.walk(tree) if isinstance(n, ast.Assert)
             and n.lineno <= line <= (n.end_lineno or n.lineno)]
    return min(found, key=lambda n: (n.end_lineno or n.lineno) - n.lineno) if found else None
