"""Why a run failed: the facts behind a violation that its story would otherwise hide.

A story tells what the code logged and the faults as they happened; what did
*not* happen is silent there.  A message sent and never delivered, or a call
left parked while virtual time jumped past it (a timeout fired first), leaves no
event of its own: it shows only as an arrow in flight or a grey wait in
``dst show --format html``, or as options enabled step after step in
``dst show -v``.  Yet those are most often the cause: the revoke that never
arrived, the refund call that sat parked nine virtual seconds while a lease ran
out.  So :func:`why` states them, a line each, to be told just before the
violation (``dst/trace/render.py`` puts them there), together with the faults
the run injected before it, which in a long story have scrolled far above.

The facts come from :func:`dst.trace.timeline.timeline`, the same inference the
HTML page draws, cut at the first violation:

- **never delivered**: a message sent before the violation and still in flight
  at it (one dropped or lost is a fault, told with the faults);
- **parked across a time jump**: a task option enabled before the violation and
  not taken until virtual time had moved on (or not at all);
- **faults injected**: crashes, drops, duplicates, losses, partitions, service
  and TCP faults, slow timers, a fake's data choice named ``NAME.fault`` other than
  ``none`` (the HTTP fake LLM's 500s, 429s, malformed and truncated replies); a
  restart or a heal is a recovery, a refused or stale call a consequence: the
  story tells those where they happen.

- **deadlocked**: for a ``Deadlock``, each task it names, where it waits and its
  last step.  Such tasks often log nothing, so :func:`dst.trace.render.story` also
  tells their scheduling decisions (what let each take what it holds) and leaves
  out the other processes' lines, counted in one line (:func:`stuck_in`).

A run without any of these gets no line at all: a plain race keeps its short
story.  Each kind is capped (:data:`MAX_LISTED`), the rest counted in one more
line, so that a long chaotic run still tells a story that fits a screen.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .model import Trace
from .render import fields, format_time
from .timeline import Arrow, Span, Timeline, timeline

#: Messages, and parked waits, listed one a line before "and N more": three show the
#: pattern (a request, its retry, the reply) without pushing the violation off a screen.
MAX_LISTED = 3
#: Faults named on the one line that lists them; past that, counted.
MAX_FAULTS = 6

#: Fault kinds the run injected (the rest are recoveries or their consequences), and
#: how each is named on the faults line.
_INJECTED = {
    "crash": "crash of {target}",
    "drop": "{target} dropped",
    "dup": "{target} duplicated",
    "lost": "{target} lost",
    "partition": "partition of {target}",
    "partitioned": "{target} lost to the partition",
    "service": "{target}: {detail}",
    "tcp": "connection {target}: {detail}",
    "slow": "slow timer",
}


#: The built-in finding of tasks that wait on each other at rest.
DEADLOCK = "Deadlock"
#: How the kernel's ``Deadlock`` message begins; its waits follow, ``; ``-separated.
_PREFIX = "nothing left can wake "
#: A task's option: ``P/task@op``, or an asyncio call's ``P/task:call@op``.
_TASK = re.compile(r"^([^@:]+)(?::call)?@")
#: A message's option: its route, whose receiver takes the step.
_MESSAGE = re.compile(r"^(?:deliver|drop|dup):m\d+\((.*)\)$")
#: A process's own options: ``crash:P``, ``restart:P``, ``partition:P``.
_PROCESS = re.compile(r"^(?:crash|restart|partition):(.*)$")


def deadlock_waits(message: str) -> list[str]:
    """A ``Deadlock`` message's ``TASK waits in WHERE`` parts."""
    return [w for w in message.removeprefix(_PREFIX).split("; ") if w]


def process_of(task: str) -> str:
    """The process of a task label (``bank/transfer#2`` -> ``bank``)."""
    return task.split("/", 1)[0]


def task_of(label: str) -> str | None:
    """The task a scheduler option runs (``bank/transfer#2``), or None for another option."""
    found = _TASK.match(label)
    return found.group(1) if found else None


def owner(label: str) -> str | None:
    """The process a scheduler option is a step of; None for a timer (no record names
    its owner)."""
    found = _MESSAGE.match(label)
    if found:
        return found.group(1).rpartition("->")[2]
    found = _PROCESS.match(label)
    if found:
        return found.group(1)
    if label.startswith("timer@"):
        return None
    task = task_of(label)
    return None if task is None else process_of(task)


@dataclass(frozen=True)
class Stuck:
    """A trace's first violation when it is a ``Deadlock``: its waits and their processes."""

    waits: tuple[str, ...]
    processes: frozenset[str]

    def names(self, rec: dict[str, Any]) -> bool | None:
        """Whether a record is a step of one of its processes: True, False (a timer
        firing too: no record says whose, and the task it wakes takes a step of its own
        next), or None for a record of no process (a fake's data choice, a fault)."""
        if rec["type"] == "event":
            return process_of(rec["actor"]) in self.processes
        if rec["type"] == "decision" and rec.get("kind") != "data":
            return owner(rec["enabled"][rec["chosen"]]) in self.processes
        return None


def stuck_in(trace: Trace) -> Stuck | None:
    """The deadlock the first violation of ``trace`` is, or None when it is another."""
    vio = next((r for r in trace.records if r["type"] == "violation"), None)
    if vio is None or vio["invariant"] != DEADLOCK:
        return None
    waits = tuple(deadlock_waits(str(vio["message"])))
    return Stuck(waits, frozenset(process_of(w.partition(" waits in ")[0]) for w in waits))


def _deadlocked(trace: Trace, stuck: Stuck) -> list[str]:
    """A line per task the deadlock names: where it waits, since which step."""
    last: dict[str, int] = {}
    for rec in trace.records:
        if rec["type"] == "violation":
            break
        if rec["type"] == "decision" and rec.get("kind") != "data":
            task = task_of(rec["enabled"][rec["chosen"]])
        else:
            task = rec["actor"] if rec["type"] == "event" else None
        if task is not None:
            last[task] = rec["step"]
    lines = []
    for wait in stuck.waits:
        task = wait.partition(" waits in ")[0]
        step = last.get(task)
        lines.append(f"deadlocked: {wait}" + ("" if step is None else
                                              f", since its last step (step {step})"))
    return lines


def why(trace: Trace) -> list[str]:
    """Lines that say what stood behind the first violation (raw text: make it visible).

    Empty for a trace without a violation, and for one whose violation has none
    of the causes above behind it.
    """
    if not any(rec["type"] == "violation" for rec in trace.records):
        return []
    tl = timeline(trace)
    at = tl.violation_at
    if at is None:
        return []
    stuck = stuck_in(trace)
    lines = _undelivered(tl, at) + _parked(tl, at)
    if stuck is not None:
        lines += _deadlocked(trace, stuck)
    faults = [f"{named} (step {rec['step']})" for rec in trace.records[:at]
              for named in (_injected(rec),) if named is not None]
    if faults:
        named = faults[:MAX_FAULTS]
        more = len(faults) - MAX_FAULTS
        lines.append("faults injected: " + ", ".join(named)
                     + (f", and {more} more" if more > 0 else ""))
    return lines


def _injected(rec: dict[str, Any]) -> str | None:
    """How a record names the fault it injected, or None: a ``fault`` record of an
    injected kind, or a fake's data choice ``NAME.fault`` whose option is not ``none``
    (the HTTP fake LLM's ``openai.fault:server_error``)."""
    if rec["type"] == "fault":
        told = _INJECTED.get(rec["fault"])
        return None if told is None else told.format(target=rec["target"], detail=rec["detail"])
    if rec["type"] == "decision" and rec.get("kind") == "data":
        found = data_fault(rec["enabled"][rec["chosen"]])
        if found is not None:
            return f"{found[0]}: {found[1]}"
    return None


def data_fault(label: str) -> tuple[str, str] | None:
    """``(fake, fault)`` when a data choice's ``label`` injects a fault, else None: a
    choice named ``NAME.fault`` whose option is not ``none`` (``openai.fault:server_error``
    is ``("openai", "server_error")``)."""
    choice, _, option = label.rpartition(":")
    if choice.endswith(".fault") and option != "none":
        return choice[:-len(".fault")], option
    return None


def duration(seconds: float) -> str:
    """Virtual seconds as a reader says them: ``9s``, ``0.25s``, ``5h 58m 58s``, ``2d 6h``."""
    if seconds < 60:
        return f"{seconds:g}s"
    rest = round(seconds)
    parts = []
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)):
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count}{unit}")
    return " ".join(parts)


def _more(count: int, what: str) -> str:
    return f"{count} more {what}{'s' * (count != 1)}"


def _when(tl: Timeline, at: int) -> str:
    return f"{format_time(tl.time_at(at))} (step {tl.step_at(at)})"


def _undelivered(tl: Timeline, at: int) -> list[str]:
    """Messages sent before record ``at`` and neither delivered nor lost by then."""
    found = [a for a in tl.arrows if a.kind == "message" and a.start < at
             and (a.fate == "in flight" or a.end > at)]
    lines = []
    for arrow in found[:MAX_LISTED]:
        copy = f" (a copy of {arrow.copy_of})" if arrow.copy_of else ""
        what = _sent_with(tl, arrow)
        waited = tl.time_at(at) - tl.time_at(arrow.start)
        lines.append(f"never delivered: {arrow.id}{copy} from {arrow.source[1]} to "
                     f"{arrow.dest[1]}" + (f" ({what})" if what else "")
                     + f", sent {_when(tl, arrow.start)}"
                     + (f", {duration(waited)} before the violation" if waited > 0 else ""))
    if len(found) > MAX_LISTED:
        lines.append(f"never delivered: {_more(len(found) - MAX_LISTED, 'message')}")
    return lines


def _sent_with(tl: Timeline, arrow: Arrow) -> str:
    """What the sender logged as it sent ``arrow`` (the trace keeps no message body)."""
    records = tl.trace.records
    step = records[arrow.start]["step"] if arrow.start < len(records) else None
    for rec in records[arrow.start + 1:]:
        if rec["step"] != step or rec["type"] == "decision":
            break
        if rec["type"] == "event" and rec["actor"] == arrow.source[1]:
            extra = fields(rec["fields"])
            return f'"{rec["event"]}"' + (f" {extra}" if extra else "")
    return ""


def _parked(tl: Timeline, at: int) -> list[str]:
    """Task options enabled before record ``at`` and still not taken when virtual time
    had moved on: the longest waits first."""
    waits: list[tuple[float, Span]] = []
    for span in tl.spans:
        if span.kind != "parked" or span.start >= at:
            continue
        until = min(span.end, at)
        waited = tl.time_at(until) - tl.time_at(span.start)
        if waited > 0:
            waits.append((waited, span))
    waits.sort(key=lambda w: (-w[0], w[1].start))
    lines = []
    for waited, span in waits[:MAX_LISTED]:
        op = span.label.removeprefix("parked at ")
        end = (f" until {_when(tl, span.end)}" if span.end <= at
               else ", still parked at the violation")
        lines.append(f"parked across a time jump: {span.lane[1]} at {op} waited "
                     f"{duration(waited)}, from {_when(tl, span.start)}{end}")
    if len(waits) > MAX_LISTED:
        lines.append(f"parked across a time jump: {_more(len(waits) - MAX_LISTED, 'wait')}")
    return lines
