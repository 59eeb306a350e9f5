"""``dst shrink TRACE``: the shortest failing story that breaks the same invariant.

Also what ``dst run`` calls to shrink the failures it found (:func:`shrink_failures`):
one shrink per invariant broken, each in a child process it can stop, so that a
candidate run that never finishes (a loop without ``await`` in the code under
test, which nothing inside a run can preempt) cannot hang ``dst run``.
"""

from __future__ import annotations

import json
import multiprocessing
import re
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import click

from ..errors import DstError, UsageError
from ..explore.shrink import ShrinkResult, shrink
from ..explore.stuck import deadlock, rows_of_trace
from ..registry import load
from ..trace.codec import read_trace, write_trace
from ..trace.render import STORY_TAIL, counted, story

#: Seconds ``dst run`` gives each invariant's shrink.
RUN_BUDGET = 5.0
#: How long past its budget a child may take (its last candidate run) before it is stopped.
GRACE = 10.0


class Budget(click.ParamType):  # type: ignore[type-arg]  # generic only in click>=8.2
    """``30s``, ``500ms``, ``2m``: a wall-clock budget in seconds (0 allowed)."""

    name = "DURATION"
    _UNITS: ClassVar[dict[str, float]] = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        if isinstance(value, float):
            return value
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", str(value))
        if not m:
            self.fail(f"{value!r} is not a duration like 500ms, 30s, 2m", param, ctx)
        return float(m.group(1)) * self._UNITS[m.group(2) or "s"]


def shrunk_path(path: Path) -> Path:
    """Where a trace's shrunk story goes by default: ``x.jsonl`` -> ``x.min.jsonl``."""
    stem = path.name[: -len(".jsonl")] if path.name.endswith(".jsonl") else path.name
    return path.with_name(f"{stem}.min.jsonl")


_STOPPED = {
    "fixpoint": "no mutation makes it smaller",
    "budget": "the budget ran out: the best found so far",
    "interrupted": "interrupted: the best found so far",
}


def _report(res: ShrinkResult, source: str, out: Path, replay: str) -> dict[str, Any]:
    b, a = res.before, res.after
    return {"trace": source, "out": str(out), "invariant": res.invariant,
            "steps": {"before": b.steps, "after": a.steps},
            "faults": {"before": b.faults, "after": a.faults},
            "story_lines": {"before": b.lines, "after": a.lines},
            "virtual_time": {"before": b.virtual_time, "after": a.virtual_time},
            "formed": None if a.formed is None else {"before": b.formed, "after": a.formed},
            "runs": res.runs, "accepted": res.accepted, "seconds": round(res.seconds, 3),
            "stopped": res.stopped, "replay": replay}


def print_story(trace: Any, header: str) -> None:
    """A trace's story, as ``dst run`` tells its first failure.

    A ``Deadlock``'s is told to the step it formed at (``dst.explore.stuck``), then
    its verdict: the lines between, the other processes running to rest, are counted.
    """
    lines = list(enumerate(story(trace), 1))
    end, cut = len(lines), len(lines)
    stuck = deadlock(rows_of_trace(trace))
    if stuck is not None:
        while end and lines[end - 1][1][2] in ("why", "check"):
            end -= 1
        cut = sum(1 for _, line in lines[:end] if line[0] <= stuck.formed)
    shown = lines[:cut][-STORY_TAIL:]
    width = max([len(line[2]) for _, line in shown + lines[end:]] + [8])
    time_w = max([len(line[1]) for _, line in shown + lines[end:]] + [0])
    tail = f"; the last {len(shown)} shown" if len(shown) < cut else ""
    if stuck is not None:
        tail += f"; the deadlock formed by step {stuck.formed}"
    click.echo(f"  story ({counted(len(lines), 'line')}, {header}{tail}):")
    for i, (_step, t, actor, told) in shown:
        click.echo(f"    {i:>3}  {t:>{time_w}}  {actor:<{width}}  {told}")
    if stuck is not None and end > cut:
        whose = ", ".join(stuck.processes)
        after = (f"after step {stuck.formed}, the last step of {whose}" if stuck.formed
                 else f"none of them a step of {whose}")
        click.echo(f"         {counted(end - cut, 'line')} {after}, left out "
                   "(dst show tells them)")
    for i, (_step, t, actor, told) in lines[max(end, cut):]:
        click.echo(f"    {i:>3}  {t:>{time_w}}  {actor:<{width}}  {told}")


@click.command("shrink")
@click.argument("trace_path", metavar="TRACE")
@click.option("--scenario", "scenario_ref", default=None, metavar="REF",
              help="Where the trace's scenario lives when it is not a shipped one: "
                   "a .py file or a module (what `dst run` was given).")
@click.option("-o", "output", type=click.Path(dir_okay=False), default=None,
              help="Write the shrunk trace here (default: TRACE with .min.jsonl).")
@click.option("--budget", type=Budget(), default="30s", show_default=True,
              help="Wall-clock time to search; when it runs out, the best found so far.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
def command(trace_path: str, scenario_ref: str | None, output: str | None, budget: float,
            as_json: bool) -> None:
    """Shrink a failing TRACE to the shortest story that breaks the same invariant.

    Mutates the run's decisions (drops faults, deletes stretches of decisions,
    shortens waits, lowers choices towards the first option), keeps each
    mutation whose run still breaks the invariant TRACE broke first and is
    smaller (fewer decisions, then fewer faults), and writes the smallest run's
    own trace: `dst replay` reproduces it exactly.  The same TRACE gives the
    same result unless the budget cuts the search short.

    Exit status: 1 the shrunk trace is written (it breaks the invariant, like
    every trace `dst replay` exits 1 for), 2 bad input (a passing trace), 3
    TRACE no longer reproduces, 4 the scenario itself is broken.

    \b
      dst shrink traces/failures/approval-21.jsonl
      dst shrink traces/failures/bank-3.jsonl --scenario bank.py -o bank-3.min.jsonl
      dst shrink traces/failures/approval-21.jsonl --budget 5s --json
    """
    from ..cli import _die, _load_trace, replay_command_line, replayed  # the core, first

    try:
        trace, scen = _load_trace(trace_path, scenario_ref)
        out = Path(output) if output else shrunk_path(Path(trace_path))
        if out.resolve() == Path(trace_path).resolve():
            raise UsageError(f"-o {output} is TRACE itself; write the shrunk trace elsewhere")
        if not out.parent.is_dir():
            raise UsageError(f"cannot write -o {out}: directory {out.parent} does not exist")
        # A check or the setup that raises: the scenario is broken, one line.
        res = replayed(lambda: shrink(scen, trace, budget=budget, shown=trace_path),
                       scen, trace, scenario_ref)
        try:
            write_trace(res.trace, out)
        except OSError as exc:
            raise UsageError(f"cannot write {out} ({exc.strerror or exc})") from None
    except DstError as err:
        _die(err)
    replay = replay_command_line(out, scenario_ref)
    if as_json:
        click.echo(json.dumps(_report(res, trace_path, out, replay), indent=2))
    else:
        b, a = res.before, res.after
        click.echo(f"shrunk {trace_path}: {res.invariant} violated in "
                   f"{counted(a.steps, 'step')} (from {b.steps}), "
                   + (f"formed by step {a.formed} (from {b.formed}), "
                      if a.formed is not None else "")
                   + f"{counted(a.faults, 'fault')} "
                   f"(from {b.faults}), story {counted(a.lines, 'line')} (from {b.lines}); "
                   f"{counted(res.runs, 'run')} in {res.seconds:.1f}s, "
                   f"{_STOPPED.get(res.stopped, res.stopped)}")
        print_story(res.trace, counted(a.steps, "step"))
        click.echo(f"  trace:  {out}")
        click.echo(f"  replay: {replay}")
    sys.exit(1)


# -- shrinking what `dst run` found -------------------------------------------------


@dataclass(frozen=True)
class Shrunk:
    """A failure's shrunk trace, written next to its own."""

    path: Path
    steps: int
    from_steps: int

    def as_json(self, scenario_ref: str | None) -> dict[str, Any]:
        from ..cli import replay_command_line

        return {"trace": str(self.path), "steps": self.steps, "from_steps": self.from_steps,
                "replay": replay_command_line(self.path, scenario_ref)}


def shrink_failures(scenario_ref: str, failures: Sequence[Any], paths: Mapping[int, Path],
                    budget: float = RUN_BUDGET) -> dict[int, Shrunk]:
    """Shrink the first failure (lowest seed) of each invariant broken first, by seed.

    ``failures`` are ``SeedOutcome``s in seed order.  Each shrink runs in a child
    process, given ``budget`` seconds (and ``GRACE`` more for its last run) before
    it is stopped; a failure that does not shrink, or whose child fails or is
    stopped, is left out.  Ctrl-C stops the shrinking and keeps what is done.
    """
    done: dict[int, Shrunk] = {}
    seen: set[str] = set()
    try:
        for o in failures:
            if not o.violated or o.violated[0] in seen or o.seed not in paths:
                continue
            seen.add(o.violated[0])
            got = _in_child(scenario_ref, paths[o.seed], budget)
            if got is not None:
                done[o.seed] = got
    except KeyboardInterrupt:
        pass
    return done


def _in_child(scenario_ref: str, path: Path, budget: float) -> Shrunk | None:
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    out = shrunk_path(path)
    proc = ctx.Process(target=_shrink_child, args=(send, scenario_ref, str(path), str(out),
                                                    budget), daemon=True, name="dst-shrink")
    proc.start()
    send.close()
    try:
        reply = receive.recv() if receive.poll(budget + GRACE) else None
    except (EOFError, OSError):
        reply = None
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)
        receive.close()
    if reply is None:
        return None
    return Shrunk(out, int(reply[0]), int(reply[1]))


def _shrink_child(conn: Any, scenario_ref: str, path: str, out: str, budget: float) -> None:
    """In the child: shrink, write the trace if it got smaller, send (steps, from steps)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    reply: tuple[int, int] | None = None
    try:
        res = shrink(load(scenario_ref), read_trace(path), budget=budget, shown=path)
        if res.improved:
            write_trace(res.trace, out)
            reply = (res.after.steps, res.before.steps)
    except BaseException:  # a failure that will not shrink is no reason to fail the run
        reply = None
    conn.send(reply)
    conn.close()
