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

A run that breaks a check writes its trace (``.dst/hypothesis/`` by default)
and notes the ``dst replay`` command; Hypothesis prints the note with the
final, shrunk example.

Options are drawn with the fault plan's weights, as the random walk draws
them (a crash at weight 0.05 is as rare here as in ``dst run``), as one
integer per decision, which Hypothesis shrinks towards the first option.

Once a test has failed, Hypothesis traces every line each later example runs
(its *explain* phase), to say which lines only failing examples ran.  Inside a
drawn run those lines are the kernel's and the runtime's, thousands per run,
and tracing them made every shrinking step several times slower; the run's
trace says what happened instead.  So while a drawn run simulates, that
tracer (and only that one: a coverage tool's is left alone) is paused.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import note
from hypothesis import strategies as st

from .registry import caller_file, is_shipped, load, near, shown_path
from .runner.single import RunResult, run_one
from .scenario import Scenario
from .trace.codec import write_trace
from .trace.model import scenario_file

__all__ = ["DrawnRun", "runs"]

#: Where traces of failing drawn runs are written, unless ``runs(..., out=...)``.
DEFAULT_OUT = Path(".dst") / "hypothesis"

#: Units a weight of 1.0 is worth when an option is drawn as an integer.
_UNITS = 20


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


@dataclass
class DrawnRun:
    """One run Hypothesis drew: its verdict, and how to see and replay it."""

    result: RunResult
    scenario_ref: str | None
    trace_path: Path | None

    @property
    def violated(self) -> list[str]:
        return self.result.violated

    @property
    def passed(self) -> bool:
        return not self.result.violated

    @property
    def steps(self) -> int:
        return self.result.steps

    def replay_command(self) -> str:
        if self.trace_path is None:
            return ""
        line = f"dst replay {self.trace_path}"
        return line + (f" --scenario {self.scenario_ref}" if self.scenario_ref else "")

    def explain(self) -> str:
        """One line for an assertion message: what broke and how to replay it."""
        if self.passed:
            return f"{self.result.scenario}: no violation in {self.steps} steps"
        records = self.result.trace().records
        message = next((r["message"] for r in records if r["type"] == "violation"), "")
        return (f"{', '.join(self.violated)} violated after {self.steps} steps: {message}; "
                f"replay: {self.replay_command()}")

    def __repr__(self) -> str:
        return f"<run of {self.result.scenario}: {self.explain()}>"


def runs(scenario: Scenario | str, config: Mapping[str, Any] | None = None, *,
         out: str | os.PathLike[str] | None = None, **switches: Any) -> Any:
    """A Hypothesis strategy of whole runs of ``scenario`` (a Scenario, a name or a file).

    ``config`` and keyword ``switches`` set switches (typed values, as in a
    trace header); the rest keep their defaults.  A relative file is looked for
    beside the file that calls ``runs`` (the test), then in the working directory.
    """
    if isinstance(scenario, str):
        scenario = near(scenario, caller_file())
    scen = load(scenario) if isinstance(scenario, str) else scenario
    ref = scenario if isinstance(scenario, str) else _file_of(scen)
    if ref is not None and ref.endswith(".py"):
        ref = shown_path(ref)  # the --scenario of a replay line: short when it can be
    cfg = scen.checked_config({**dict(config or {}), **switches})
    where = Path(out) if out is not None else DEFAULT_OUT
    shipped_name = is_shipped(scen.name) and (ref is None or ref == scen.name)

    @st.composite
    def one_run(draw: Any) -> DrawnRun:
        drawn = _Drawn(draw)
        with _explain_tracer_paused():
            result = run_one(scen, cfg, 0, strategy=lambda _seed: drawn)
        path: Path | None = None
        if result.violated:
            result.scenario_file = scenario_file(ref)  # in the header: the file, from here
            trace = result.trace()
            digest = hashlib.sha256(trace.text().encode("utf-8")).hexdigest()[:12]
            path = write_trace(trace, where / f"{scen.name}-{digest}.jsonl")
        run = DrawnRun(result, None if shipped_name else ref, path)
        if path is not None:
            note(f"{', '.join(run.violated)} violated; replay: {run.replay_command()}")
        return run

    return one_run()


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
