"""What a ``Deadlock`` names, and the step it formed at: what shrinking one needs.

An invariant is broken at a step, and the run stops there: whatever the story
did not need can be moved past that step and so out of the story.  A
``Deadlock`` is judged at rest, once nothing is left to run, so every step any
task can take is taken first: a run that deadlocks always holds all the work of
every other process, and deleting a decision only moves that work later.  So a
deadlock's runs are all about as long as each other, and steps alone give the
shrinker nothing to shorten (a fault-free deadlock of three processes came back
26 steps from 26).

What can shrink is when the deadlock *formed*: the last step of the processes
whose tasks it names (a decision of one of their tasks, a message delivered to
one, its crash or restart, an event one of their tasks logged).  After it those
tasks never move again, and what follows is the other processes running to
rest.  The shrinker minimises that step first, so that the deadlocked tasks'
own story comes first and the rest after it, and ``dst shrink`` tells the story
to there.  The story itself (``dst.trace.render.story``) tells a deadlock by its
tasks' steps, logged or not, and counts the other processes' lines in one.

"The same" deadlock is the same tasks waiting in the same places: the
message's ``TASK waits in WHERE`` parts with their digits folded (a task's
number, a line), as ``dst run`` groups failures.  A candidate whose run
deadlocks other tasks, or the same ones elsewhere, is another bug.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..runner.groups import fold
from ..trace.causes import DEADLOCK, deadlock_waits, owner, process_of
from ..trace.model import Trace

#: One record as this module reads it: (type, step, who, detail).  ``who`` is a
#: decision's chosen label, an event's actor or a violation's invariant; ``detail``
#: a decision's kind or a violation's message.
Row = tuple[str, int, str, str]


@dataclass(frozen=True)
class Deadlock:
    #: The tasks it names and where each waits, digits folded, sorted.
    waits: tuple[str, ...]
    #: The last step of a process whose tasks it names (0: none took one).
    formed: int
    #: The processes whose tasks it names, sorted.
    processes: tuple[str, ...] = ()


def rows_of_records(records: Sequence[tuple[Any, ...]]) -> Iterator[Row]:
    """A run's kernel records (``RunResult.sim.records``) as rows."""
    for rec in records:
        if rec[0] == "decision":
            yield "decision", rec[1], rec[4][rec[5]], rec[3]
        elif rec[0] == "event":
            yield "event", rec[1], rec[3], ""
        elif rec[0] == "violation":
            yield "violation", rec[1], rec[3], str(rec[4])


def rows_of_trace(trace: Trace) -> Iterator[Row]:
    """A trace's records as rows."""
    for rec in trace.records:
        if rec["type"] == "decision":
            yield "decision", rec["step"], rec["enabled"][rec["chosen"]], rec["kind"]
        elif rec["type"] == "event":
            yield "event", rec["step"], rec["actor"], ""
        elif rec["type"] == "violation":
            yield "violation", rec["step"], rec["invariant"], str(rec["message"])


def deadlock(rows: Iterable[Row]) -> Deadlock | None:
    """The deadlock the first violation of ``rows`` is, or None when it is another."""
    seen: list[Row] = []
    for row in rows:
        if row[0] == "violation":
            return _deadlock(seen, row[3]) if row[2] == DEADLOCK else None
        seen.append(row)
    return None


def _deadlock(before: list[Row], message: str) -> Deadlock:
    waits = deadlock_waits(message)
    processes = {process_of(w.partition(" waits in ")[0]) for w in waits}
    formed = 0
    for kind, step, who, detail in before:
        found = process_of(who) if kind == "event" else (
            None if detail == "data" else owner(who))
        if found in processes:
            formed = step
    return Deadlock(tuple(sorted(fold(w) for w in waits)), formed, tuple(sorted(processes)))
