"""A whole dst run as one Hypothesis draw.

``runs(scenario, ...)`` is a Hypothesis strategy.  Drawing from it runs the
scenario once, with every choice the run makes (which task goes next, a
message's fate, a crash, a timer, what a fake LLM answers) drawn from
Hypothesis's data instead of a seeded generator.  The whole run is therefore
one choice sequence to Hypothesis: it generates runs, shrinks a failing one
(fewer decisions, earlier options: the first option of a decision is the
ordinary one, faults come last) and keeps it in its example database, so the
next test run tries it first::

    from hypothesis import given
    from dst.hypothesis import runs

    @given(runs("approval", spend_mode="before"))
    def test_a_yes_is_spent_once(run):
        assert run.passed, run.explain()

Only the example Hypothesis reports writes a trace: Hypothesis replays each
failure it found once more at the end, to print it, and that run (and no
example it tried while searching or shrinking) is shrunk further by dst's own
shrinker (:func:`dst.explore.shrink.shrink`, what ``dst shrink`` runs), whose
shortest story is written under ``.dst/hypothesis/`` (or ``out``) and named in
``explain()`` and in a note.  Hypothesis shrinks the choice sequence; dst's
shrinker knows what the choices mean (a fault and the delivery it replaced, a
wait that can go), so it usually gets shorter still.  The test itself is handed
the run Hypothesis drew, so its verdict is the one Hypothesis shrank towards.

Options are drawn with the fault plan's weights, as the random walk draws
them (a crash at weight 0.05 is as rare here as in ``dst run``), as one
integer per decision, which Hypothesis shrinks towards the first option.

Once a test has failed, Hypothesis traces every line each later example runs
(its *explain* phase), to say which lines only failing examples ran.  Inside a
drawn run those lines are the kernel's and the runtime's, thousands per run,
and tracing them made every shrinking step several times slower; the run's
trace says what happened instead.  So while a drawn run simulates, that
tracer (and only that one: a coverage tool's is left alone) is paused, for
the whole draw.  A ``DrawnRun`` then holds plain values (its ``explain()`` is
text made during the draw), so that a test body that reads it runs no line of
dst either: the explanation names the user's lines, or none.

An error raised inside a drawn run (a check, the setup, the code under test)
reaches Hypothesis with dst's frames taken out of its traceback: what is
printed goes from the test to the user's line that raised.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shlex
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.control import current_build_context
from hypothesis.errors import InvalidArgument

from .registry import at_callers_line, caller_file, is_shipped, load, near, shown_path
from .runner.single import RunResult, run_one
from .scenario import Scenario
from .trace.codec import write_trace
from .trace.model import Trace, scenario_file
from .trace.render import counted

__all__ = ["DrawnRun", "runs"]

#: Where the trace of a reported failure is written, unless ``runs(..., out=...)``.
DEFAULT_OUT = Path(".dst") / "hypothesis"

#: Seconds dst's shrinker may take on the failure Hypothesis reports.  It runs
#: once per reported failure (not per example), and stops at its fixpoint long
#: before this on the shipped scenarios (the approval lost update: about 1s);
#: the bound keeps a scenario with very long runs from holding the report up.
SHRINK_BUDGET = 10.0

#: Units a weight of 1.0 is worth when an option is drawn as an integer.
_UNITS = 20

#: Hypothesis leaves out of a failure's traceback the frames of a module whose
#: globals say this (as it does its own), when they come before the user's:
#: the frame of the draw that re-raises an error from inside a run.
__hypothesistracebackhide__ = True

#: dst's own package: its frames are taken out of a drawn run's errors.
_DST_DIR = str(Path(__file__).resolve().parent) + os.sep


class _Drawn:
    """A dst Strategy whose every choice is one Hypothesis draw."""

    name = "hypothesis"

    def __init__(self, draw: Any) -> None:
        self._draw = draw

    def choose(self, step: int, labels: Sequence[str], weights: Sequence[float] | None) -> int:
        n = len(labels)
        if n == 1:
            return 0
        if weights is None:
            return int(self._draw(st.integers(0, n - 1)))
        units = [max(1, round(w * _UNITS)) for w in weights]
        x = int(self._draw(st.integers(0, sum(units) - 1)))
        for i, u in enumerate(units):
            x -= u
            if x < 0:
                return i
        return n - 1


@dataclass(frozen=True, eq=False)
class DrawnRun:
    """One run Hypothesis drew: its verdict, and how to see and replay it.

    Every attribute is a plain value made while the run was drawn, and
    ``explain()`` and ``replay_command()`` return text made then: a test body
    that reads them runs no line of dst, so Hypothesis's explanation of a
    failure cannot name dst's lines (see the module docstring).
    """

    #: The run itself: what the test judges, as Hypothesis drew it.
    result: RunResult
    #: ``--scenario`` of the replay command (None for a shipped scenario).
    scenario_ref: str | None
    #: Checks the run broke, the first one first.
    violated: list[str]
    passed: bool
    #: Decisions the run made.
    steps: int
    #: The trace written for the failure Hypothesis reports: the shortest failing
    #: story dst's shrinker found from this run (None for every other example).
    trace_path: Path | None
    #: Decisions in that trace (None when no trace was written).
    trace_steps: int | None
    #: ``explain()``: one line for an assertion message, what broke and how to replay it.
    explain: Callable[[], str] = field(repr=False)
    #: ``replay_command()``: ``dst replay TRACE [--scenario FILE]``, or "" without a trace.
    replay_command: Callable[[], str] = field(repr=False)
    _shown: str = field(repr=False, default="")

    def __repr__(self) -> str:
        return self._shown

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """How Hypothesis prints the falsifying example (its pretty-printer's protocol)."""
        printer.text(self._shown)


def _text(value: str) -> Callable[[], str]:
    """A callable returning ``value`` that runs no Python line (no frame to trace)."""
    return functools.partial(str, value)


def _violation(records: Sequence[Any]) -> str:
    """The message of the first violation among a run's records (tuples, as a Sim keeps
    them: ``("violation", step, t, name, message, ...)``) or a trace's (dicts)."""
    for rec in records:
        if isinstance(rec, dict):
            if rec["type"] == "violation":
                return str(rec["message"])
        elif rec[0] == "violation":
            return str(rec[4])
    return ""


def _drawn_run(result: RunResult, ref: str | None, trace: Trace | None,
               path: Path | None) -> DrawnRun:
    """A DrawnRun of ``result``, reporting ``trace`` (written at ``path``) if there is one."""
    name, steps = result.scenario, result.steps
    if result.violated:
        told = f"{', '.join(result.violated)} violated after {counted(steps, 'step')}"
        shown = f"<run of {name}: {told}>"
    else:
        told = f"{name}: no violation in {counted(steps, 'step')}"
        shown = f"<run of {told}>"
    replay = ""
    trace_steps: int | None = None
    if trace is not None and path is not None:
        replay = f"dst replay {shlex.quote(str(path))}"
        if ref is not None:
            replay += f" --scenario {shlex.quote(ref)}"
        trace_steps = len(trace.decisions)
        shrunk = f" (shrunk from {steps})" if trace_steps < steps else ""
        told = (f"{', '.join(trace.violated)} violated after {counted(trace_steps, 'step')}"
                f"{shrunk}: "
                f"{_violation(trace.records)}; replay: {replay}")
    elif result.violated:
        told += f": {_violation(result.sim.records)}"
    return DrawnRun(result, ref, list(result.violated), not result.violated, steps, path,
                    trace_steps, _text(told), _text(replay), shown)


@at_callers_line
def runs(scenario: Scenario | str, config: Mapping[str, Any] | None = None, *,
         out: str | os.PathLike[str] | None = None, **switches: Any) -> Any:
    """A Hypothesis strategy of whole runs of ``scenario`` (a Scenario, a name or a file).

    ``config`` and keyword ``switches`` set switches (typed values, as in a
    trace header); the rest keep their defaults.  A relative file is looked for
    beside the file that calls ``runs`` (the test), then in the working directory.
    The failure Hypothesis reports is shrunk by dst's shrinker and its trace
    written under ``out`` (``.dst/hypothesis/`` in the working directory).
    """
    named = scenario if isinstance(scenario, str) else scenario.name
    if isinstance(scenario, str):
        scenario = near(scenario, caller_file())
    scen = load(scenario) if isinstance(scenario, str) else scenario
    ref = scenario if isinstance(scenario, str) else _file_of(scen)
    if ref is not None and ref.endswith(".py"):
        ref = shown_path(ref)  # the --scenario of a replay line: short when it can be
    asked = {**dict(config or {}), **switches}
    cfg = scen.checked_config(asked, from_trace=False)
    where = Path(out) if out is not None else DEFAULT_OUT
    replay_ref = None if is_shipped(scen.name) and (ref is None or ref == scen.name) else ref

    # Named ``runs`` and given the test's own arguments, so that Hypothesis, which
    # names the strategy an error came from, prints ``runs('bank.py', {...})``.
    @st.composite
    def runs(draw: Any, *_shown: Any) -> DrawnRun:
        with _explain_tracer_paused():
            return _draw(draw)

    def _draw(draw: Any) -> DrawnRun:
        drawn = _Drawn(draw)
        try:
            result = run_one(scen, cfg, 0, strategy=lambda _seed: drawn)
        except Exception as exc:
            _without_dst_frames(exc)
            raise
        result.scenario_file = scenario_file(ref)  # in the header: the file, from here
        if not (result.violated and _reported()):
            return _drawn_run(result, replay_ref, None, None)
        trace = _shortest(scen, result.trace())
        digest = hashlib.sha256(trace.text().encode("utf-8")).hexdigest()[:12]
        path = write_trace(trace, where / f"{scen.name}-{digest}.jsonl")
        run = _drawn_run(result, replay_ref, trace, path)
        steps = len(trace.decisions)
        by = f", shrunk by dst from {result.steps}" if steps < result.steps else ""
        note(f"trace of this failure ({counted(steps, 'step')}{by}): {path}; "
             f"replay: {run.replay_command()}")
        return run

    return runs(named, asked) if asked else runs(named)


def _reported() -> bool:
    """Whether this draw is for the example Hypothesis reports: its last replay of a
    failure it found, to print it (the build context's ``is_final``)."""
    try:
        return bool(current_build_context().is_final)
    except InvalidArgument:  # no build context: not drawn by Hypothesis's engine
        return False


def _shortest(scenario: Scenario, trace: Trace) -> Trace:
    """``trace`` shrunk by dst's shrinker, or ``trace`` itself if that fails or gains nothing;
    either way recording, as ``shrunk_from``, the seed of the run it came from.

    The shrinker keeps the first check broken; a test may be about another one
    the run broke too, so a shorter story that does not break every check the
    run broke is not taken.
    """
    from .explore.shrink import shrink

    # Hypothesis shrank the draw before dst's shrinker sees it: whichever story is
    # kept, it is a shrunk one, and records the run it came from as ``dst shrink``'s
    # traces do (``shrunk_from``: the seed the drawn run's own generators used), so
    # that ``dst show`` tells it as shrunk.
    origin = trace.header.get("shrunk_from", trace.header["seed"])
    kept = trace
    try:
        shrunk = shrink(scenario, trace, budget=SHRINK_BUDGET)
    except Exception:  # a run that does not replay, or a check that raises on a candidate
        shrunk = None
    if shrunk is not None and shrunk.improved and \
            set(shrunk.trace.violated) >= set(trace.violated):
        kept = shrunk.trace
        # Its choices still come from a Hypothesis draw: titled so (``run_title``).
        kept.header["strategy"] = trace.header["strategy"]
    kept.header["shrunk_from"] = origin
    return kept


def _without_dst_frames(exc: BaseException) -> None:
    """Take dst's frames out of the traceback of ``exc`` and of what it chains and groups.

    An error raised in dst itself keeps its frames: they are where the error is.
    """
    seen: set[int] = set()

    def trim(err: BaseException | None) -> None:
        if err is None or id(err) in seen:
            return
        seen.add(id(err))
        frames = [(tb.tb_frame, tb.tb_lasti, tb.tb_lineno) for tb in _walk(err.__traceback__)]
        if frames and not _in_dst(frames[-1][0].f_code.co_filename):
            kept: TracebackType | None = None
            for frame, lasti, lineno in reversed(frames):
                if not _in_dst(frame.f_code.co_filename):
                    kept = TracebackType(kept, frame, lasti, lineno)
            err.__traceback__ = kept
        trim(err.__cause__)
        trim(err.__context__)
        for inner in getattr(err, "exceptions", ()):
            trim(inner)

    trim(exc)


def _walk(tb: TracebackType | None) -> Iterator[TracebackType]:
    while tb is not None:
        yield tb
        tb = tb.tb_next


@functools.cache
def _in_dst(filename: str) -> bool:
    return str(Path(filename).resolve()).startswith(_DST_DIR)


#: The module of the tracer Hypothesis's explain phase installs (``Tracer``).
_EXPLAIN_TRACER = "hypothesis.internal.scrutineer"


@contextlib.contextmanager
def _explain_tracer_paused() -> Iterator[None]:
    """Without Hypothesis's explain-phase tracer, if it is the one installed.

    On Python 3.11 it is the thread's ``sys.settrace`` function; from 3.12 on,
    Hypothesis registers it with ``sys.monitoring`` as the tool "scrutineer".
    Any other tracer (coverage.py, a debugger) keeps tracing the run.
    """
    tracer = sys.gettrace()
    if type(getattr(tracer, "__self__", None)).__module__ == _EXPLAIN_TRACER:
        sys.settrace(None)
        try:
            yield
        finally:
            sys.settrace(tracer)
        return
    monitoring: Any = getattr(sys, "monitoring", None)
    tool = _monitoring_tool(monitoring)
    if tool is None:
        yield
        return
    events = monitoring.get_events(tool)
    monitoring.set_events(tool, 0)
    try:
        yield
    finally:
        monitoring.set_events(tool, events)


def _monitoring_tool(monitoring: Any) -> int | None:
    """The ``sys.monitoring`` tool id Hypothesis's explain phase holds, if any."""
    if monitoring is None:
        return None
    for tool in range(6):  # the ids sys.monitoring hands out to tools
        if monitoring.get_tool(tool) == "scrutineer":
            return tool
    return None


def _file_of(scenario: Scenario) -> str | None:
    """The file a user's Scenario object was defined in, for ``dst replay --scenario``."""
    for module in list(sys.modules.values()):
        if getattr(module, "scenario", None) is scenario:
            path = getattr(module, "__file__", None)
            return str(path) if path else None
    return None
