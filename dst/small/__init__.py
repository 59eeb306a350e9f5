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
one line (:func:`dst.small.body._misused`), not reported as a finding.

What the decorator returns is a plain function of no arguments: pytest collects
and calls it like any other test (no trio or anyio plugin is involved).  It runs
the seeds in order (:func:`dst.testing.check_seeds`) and fails at the first
failing one, with that run's story and the one command that replays it; the
trace is written under ``traces/failures/`` as ``MODULE.NAME-SEED.jsonl`` (two
files may each hold a ``test_x``).  A seed that takes more than ``seed_timeout``
wall-clock seconds (a loop without ``await``) is stopped from another thread
(:class:`dst.small.watchdog._Watchdog`), and the test fails naming it.  The trace header records the
test's file, so ``dst replay TRACE`` finds the test alone; ``--scenario
path/to/test_file.py::test_name`` names it explicitly.

The message a violation records must read the same in ``dst replay`` as under
pytest, which rewrites ``assert`` statements to explain them
(``assert 1 == 2``): so the trace holds the first line of the assertion's own
message, or, for a bare ``assert``, the statement's source, and pytest's
explanation is printed beside the story, not recorded
(:func:`dst.small.assertion.assertion_message`).

This package is the decorator and what it makes of a test's seeds; one run of
the body is :mod:`dst.small.body`, the seed timeout :mod:`dst.small.watchdog`,
and a failed assertion's message :mod:`dst.small.assertion`.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable, Iterable
from typing import overload

from ..errors import DstError, UsageError
from ..registry import shown_path
from ..scenario import Scenario
from ..sim.faults import NO_FAULTS, FaultPlan
from ..sim.state import DEFAULT_MAX_STEPS
from .assertion import assertion_message as assertion_message
from .body import PROCESS as PROCESS
from .body import SKIPPED as SKIPPED
from .body import STORE as STORE
from .body import TestBody, _leaf, _Outcome, _reason, _Setup
from .body import skip_reason as skip_reason
from .body import xfail_reason as xfail_reason
from .watchdog import _SeedTimedOut, _Watchdog

__all__ = ["ASSERT", "DEFAULT_SEEDS", "PARAMETERS", "PROCESS", "RUNTIMES", "SEED_TIMEOUT",
           "STORE", "UNFINISHED", "test"]

#: Seeds a test runs when it does not say (as many as ``check_seeds`` runs).
DEFAULT_SEEDS = 500
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
            from ..testing import SeedFailed, check_seeds  # loaded when a test runs

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
