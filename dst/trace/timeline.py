"""A trace as a timeline of lanes: the picture every view of a trace draws.

A trace is a sequence of records; a person debugging a distributed failure
wants it laid out by *who*: one lane per actor, with messages as arrows
between lanes, crashes and partitions as bands over a process, and the
moments a task sat parked waiting for the scheduler.  :func:`timeline` builds
that picture once, from the records alone, and both views draw it:
:func:`dst.trace.perfetto.render_perfetto` (lanes are threads, grouped into a
process per simulated process) and ``dst/trace/html.py`` (an SVG swimlane page).

Positions are record indices, not virtual times: most of a run happens at one
virtual instant (a lost update takes no virtual time at all), so ordering by
record keeps every step apart while the virtual time of each position is kept
beside it (the Perfetto view turns a position into a time of its own).

What the timeline infers, and from what (no field a trace lacks is assumed):

- **Lanes.** Every actor of an event and every task named in an option
  (``P/task@op``) has a lane in the group of its process ``P``; every process
  also has a lane of its own, where its messages arrive.  A service or a fake's
  data choice (``llm:...``) gets a *world* lane; timers and the checks have one
  each.
- **Messages.** ``mN`` is born where it first appears (in an option, or in a
  ``partitioned`` fault when a partition swallowed it at once), sent by the
  task of its source process that last chose ``@send(dest)``; it ends where it
  was delivered (``deliver:`` chosen), dropped (``drop``), lost to a process
  that was down (``lost``) or to a partition (``partitioned``), or is still in
  flight at the end.  A ``dup`` fault starts a copy of it.
- **Waits.** A task option enabled at consecutive decisions is a task parked
  there until it is chosen (or its option goes away: a crash took it); the
  next timer (``timer@T``) is a wait on the timers lane until it fires.
- **Service calls** (``...@call:svc.op``, with ``!fail``, ``!lose_reply``,
  ``!delay`` or ``!repeat`` when the call suffered that fault) join the
  caller's lane to the service's.
- **Bands.** ``crash`` to ``restart``, ``partition`` to ``heal`` (or to the end).
- **Slow faults.** A ``slow`` fault names only its timer (``timer@T``), and no
  record says whose timer it was; it is marked on the lane of the task it woke:
  the one whose parked call it took away (a timeout cancelled the call), else the
  first to log in its step, else those with an option new at the next decision;
  on the timers lane when the records say nothing of it.  Never a lane of its own.

Every string here is still raw trace text: each renderer escapes it for its own
medium.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .model import Trace
from .render import describe

#: ``deliver:m3(client->server)`` and its ``drop:``/``dup:`` siblings.
_MESSAGE = re.compile(r"^(deliver|drop|dup):(m\d+)\((.*)\)$")
#: A task's option: ``P/task@op`` (the task before the first ``@``).
_TASK = re.compile(r"^([^@:]+)@(.*)$")
#: A service call: ``call:svc.op``, maybe with its fault variant.
_CALL = re.compile(r"^call:([^.!]*)\.([^!]*)(?:!(fail|lose_reply|delay|repeat))?$")
#: ``copy m7`` in a ``dup`` fault's detail.
_COPY = re.compile(r"^copy (m\d+)$")


@dataclass(frozen=True)
class Lane:
    """One row of the picture.  ``kind``: process, task, world, timers or checks."""

    key: tuple[str, str]
    name: str
    group: str
    kind: str


@dataclass(frozen=True)
class Span:
    """Something that lasts from record ``start`` to ``end`` (exclusive) on one lane.

    ``kind``: ``crash``, ``partition`` (drawn over the whole process group),
    ``parked`` (a task waiting for the scheduler) or ``timer``.
    """

    lane: tuple[str, str]
    kind: str
    start: int
    end: int
    label: str


@dataclass(frozen=True)
class Mark:
    """Something that happens at record ``at`` on one lane.

    ``kind``: ``event``, ``step`` (a task's option chosen), ``choice`` (a fake's
    data choice), ``fault``, ``violation`` or ``check``; ``bad`` marks the ones
    to draw in alarm colours (faults, violations, failing checks).
    """

    lane: tuple[str, str]
    kind: str
    at: int
    label: str
    bad: bool = False


@dataclass(frozen=True)
class Arrow:
    """A message from ``source`` to ``dest``, or a service call (``kind`` ``call``).

    ``fate`` of a message: ``delivered``, ``dropped``, ``lost``, ``partitioned``
    or ``in flight``; of a call: ``ok`` or its fault (``fail``, ``lose_reply``,
    ``delay``, ``repeat``).  ``copy_of`` names the message a duplicate copies.
    """

    kind: str
    id: str
    source: tuple[str, str]
    dest: tuple[str, str]
    start: int
    end: int
    fate: str
    label: str
    copy_of: str = ""


@dataclass
class Timeline:
    trace: Trace
    lanes: list[Lane] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    arrows: list[Arrow] = field(default_factory=list)
    #: Index of the first violation record, if the run broke a check.
    violation_at: int | None = None

    @property
    def end(self) -> int:
        """The position one past the last record: where open bands and waits end."""
        return len(self.trace.records)

    def step_at(self, at: int) -> int:
        records = self.trace.records
        return int(records[at]["step"]) if at < len(records) else int(
            self.trace.footer.get("steps", 0))

    def time_at(self, at: int) -> float:
        records = self.trace.records
        if at < len(records):
            return float(records[at]["t"])
        return float(self.trace.footer.get("virtual_time", records[-1]["t"] if records else 0.0))


class _Builder:
    """Walks the records once, opening and closing what lasts."""

    def __init__(self, trace: Trace) -> None:
        self.tl = Timeline(trace)
        self._lanes: dict[tuple[str, str], Lane] = {}
        self._groups: dict[str, list[Lane]] = {}
        self._parked: dict[str, tuple[str, int]] = {}  # option (fault variant cut) -> task, since
        self._timer: tuple[str, int] | None = None
        self._messages: dict[str, dict[str, Any]] = {}
        self._last_send: dict[tuple[str, str], tuple[tuple[str, str], int]] = {}
        self._bands: dict[tuple[str, str], int] = {}  # (kind, process) -> since
        self._known = _processes(trace)

    # -- lanes -------------------------------------------------------------------

    def actor(self, name: str) -> tuple[str, str]:
        """The lane of a process or task ``name`` (``P`` or ``P/task``), made on first sight."""
        group = next((p for p in self._known if name.startswith(p + "/")),
                     name if name in self._known else name.split("/", 1)[0])
        self.process(group)
        return self._lane(("actor", name), name, group, "task")

    def route(self, route: str) -> tuple[str, str]:
        """``(source, dest)`` of ``a->b``, splitting where a known process name ends."""
        source = next((p for p in self._known if route.startswith(p + "->")), None)
        if source is None:
            source = route.partition("->")[0]
        return source, route[len(source) + 2:]

    def process(self, name: str) -> tuple[str, str]:
        return self._lane(("actor", name), name, name, "process")

    def world(self, name: str) -> tuple[str, str]:
        return self._lane(("world", name), name, "\0world", "world")

    def _lane(self, key: tuple[str, str], name: str, group: str, kind: str) -> tuple[str, str]:
        if key not in self._lanes:
            lane = self._lanes[key] = Lane(key, name, group, kind)
            self._groups.setdefault(group, []).append(lane)
        return key

    def lanes(self) -> list[Lane]:
        """Process groups in order of first appearance (the process's own lane first),
        then the world, then timers and checks."""
        out: list[Lane] = []
        world = self._groups.pop("\0world", [])
        for group in self._groups.values():
            out += sorted(group, key=lambda lane: lane.kind != "process")
        out += world
        out.append(Lane(("timers", ""), "timers", "\0dst", "timers"))
        out.append(Lane(("checks", ""), "checks", "\0dst", "checks"))
        return out

    # -- records -----------------------------------------------------------------

    def build(self) -> Timeline:
        tl = self.tl
        for at, rec in enumerate(tl.trace.records):
            kind = rec["type"]
            if kind == "decision":
                self.decision(at, rec)
            elif kind == "event":
                tl.marks.append(Mark(self.actor(rec["actor"]), "event", at, _told(rec)))
            elif kind == "fault":
                self.fault(at, rec)
            elif kind in ("violation", "check"):
                bad = kind == "violation" or not rec["ok"]
                tl.marks.append(Mark(("checks", ""), kind, at, _told(rec), bad))
                if kind == "violation" and tl.violation_at is None:
                    tl.violation_at = at
        self.close(tl.end)
        tl.lanes = self.lanes()
        return tl

    def decision(self, at: int, rec: dict[str, Any]) -> None:
        enabled: list[str] = rec["enabled"]
        chosen = enabled[rec["chosen"]]
        if rec["kind"] == "data":
            who, _, option = chosen.partition(":")
            lane = self.world(who.split(".", 1)[0])  # supplier.outage: the supplier's lane
            self.tl.marks.append(Mark(lane, "choice", at, f"{who} chose {option}"))
            return
        self.waits(at, enabled, chosen)
        for label in enabled:
            found = _MESSAGE.match(label)
            if found:
                self.born(found.group(2), found.group(3), at)
        found = _MESSAGE.match(chosen)
        if found:
            what, mid = found.group(1), found.group(2)
            if what == "deliver":
                self.ended(mid, at, "delivered")
            elif what == "drop":
                self.ended(mid, at, "dropped")
            return  # a dup's copy is born at its fault record
        task = None if chosen.startswith("timer@") else _TASK.match(chosen)
        if task is None:
            return  # a timer, a crash, a restart, a partition: their records tell them
        name, op = task.group(1), task.group(2)
        lane = self.actor(name)
        self.tl.marks.append(Mark(lane, "step", at, op))
        call = _CALL.match(op)
        if call:
            service, sop, fault = call.group(1), call.group(2), call.group(3)
            self.tl.arrows.append(Arrow("call", "", lane, self.world(service), at, at,
                                        fault or "ok", f"{service}.{sop}"))
        elif op.startswith("send(") and op.endswith(")"):
            self._last_send[(name.split("/", 1)[0], op[5:-1])] = (lane, at)

    def waits(self, at: int, enabled: list[str], chosen: str) -> None:
        """Open a wait for each newly enabled task option and timer; close the rest."""
        now: dict[str, str] = {}
        timer = None
        for label in enabled:
            if label.startswith("timer@"):
                timer = label
                continue
            found = _TASK.match(label)
            if found is not None:
                now[_without_fault(label)] = found.group(1)
        for option in list(self._parked):
            task, since = self._parked[option]
            if option not in now:
                del self._parked[option]
                self._park(task, option, since, at)
        for option, task in now.items():
            self._parked.setdefault(option, (task, at))
        base = _without_fault(chosen)
        if base in self._parked:
            task, since = self._parked.pop(base)
            self._park(task, base, since, at)
        if self._timer is not None and self._timer[0] != timer:
            self.tl.spans.append(Span(("timers", ""), "timer", self._timer[1], at,
                                      self._timer[0]))
            self._timer = None
        if timer is not None and self._timer is None:
            self._timer = (timer, at)
        if chosen == timer and self._timer is not None:
            self.tl.spans.append(Span(("timers", ""), "timer", self._timer[1], at, timer))
            self.tl.marks.append(Mark(("timers", ""), "step", at, f"{timer} fired"))
            self._timer = None

    def _park(self, task: str, option: str, since: int, until: int) -> None:
        if until > since:
            op = option.partition("@")[2]
            self.tl.spans.append(Span(self.actor(task), "parked", since, until,
                                      f"parked at {op}"))

    def born(self, mid: str, route: str, at: int, copy_of: str = "") -> dict[str, Any]:
        """The message ``mid`` on ``route`` (``a->b``), recorded when first seen."""
        msg = self._messages.get(mid)
        if msg is None:
            source, dest = self.route(route)
            lane, start = self._last_send.get((source, dest), (self.process(source), at))
            if copy_of:
                original = self._messages.get(copy_of)
                lane, start = (original["source"], at) if original else (lane, at)
            msg = self._messages[mid] = {"id": mid, "source": lane, "dest": self.process(dest),
                                         "start": start, "route": route, "copy_of": copy_of}
            self._last_send.pop((source, dest), None)
        return msg

    def ended(self, mid: str, at: int, fate: str) -> None:
        msg = self._messages.get(mid)
        if msg is None or "end" in msg:
            if msg is not None and fate == "lost":  # delivered to a process that was down
                msg["fate"] = "lost"
            return
        msg["end"], msg["fate"] = at, fate

    def fault(self, at: int, rec: dict[str, Any]) -> None:
        what, target, detail = rec["fault"], rec["target"], rec["detail"]
        text, bad = _told(rec), what not in ("restart", "heal")
        if what in ("crash", "partition"):
            self._bands[(what, target)] = at
            self.tl.marks.append(Mark(self.process(target), "fault", at, text, bad))
        elif what in ("restart", "heal"):
            kind = "crash" if what == "restart" else "partition"
            self._band(kind, target, at)
            self.tl.marks.append(Mark(self.process(target), "fault", at, text, bad))
        elif what in ("drop", "lost", "partitioned"):
            if what == "partitioned":
                self.born(target, detail, at)
            self.ended(target, at, {"drop": "dropped"}.get(what, what))
            msg = self._messages.get(target)
            lane = msg["dest"] if msg else self.world("network")
            self.tl.marks.append(Mark(lane, "fault", at, text, True))
        elif what == "dup":
            copy = _COPY.match(detail)
            original = self._messages.get(target)
            if copy and original:
                self.born(copy.group(1), original["route"], at, copy_of=target)
            self.tl.marks.append(Mark(original["source"] if original else self.world("network"),
                                      "fault", at, text, True))
        elif what == "service":
            self.tl.marks.append(Mark(self.world(target), "fault", at, text, True))
        elif what == "slow":  # target: the timer, whose owner no record names
            woken = _woken(self.tl.trace.records, at)
            for lane in [self.actor(task) for task in woken] or [("timers", "")]:
                self.tl.marks.append(Mark(lane, "fault", at, text, True))
        else:  # refused, stale, and kinds a newer kernel records
            self.tl.marks.append(Mark(self.actor(target), "fault", at, text, True))

    def _band(self, kind: str, process: str, at: int) -> None:
        since = self._bands.pop((kind, process), None)
        if since is not None:
            label = "crashed" if kind == "crash" else "cut off by a partition"
            self.tl.spans.append(Span(self.process(process), kind, since, at, label))

    def close(self, end: int) -> None:
        """End what the run left open: bands, waits, the pending timer, messages in flight."""
        for kind, process in list(self._bands):
            self._band(kind, process, end)
        for option, (task, since) in list(self._parked.items()):
            self._park(task, option, since, end)
        self._parked.clear()
        if self._timer is not None:
            self.tl.spans.append(Span(("timers", ""), "timer", self._timer[1], end,
                                      self._timer[0]))
        for msg in self._messages.values():
            self.tl.arrows.append(Arrow(
                "message", msg["id"], msg["source"], msg["dest"], msg["start"],
                msg.get("end", end), msg.get("fate", "in flight"), msg["route"],
                msg["copy_of"]))
        self.tl.arrows.sort(key=lambda a: (a.start, a.end))


def _processes(trace: Trace) -> list[str]:
    """The names the trace gives processes (in crash, restart and partition options and
    faults, and in message routes), longest first: a task ``P/t`` belongs to the longest
    ``P`` it starts with, even when a process name holds a ``/`` or a ``->``."""
    found: set[str] = set()
    for rec in trace.records:
        if rec["type"] == "decision" and rec["kind"] == "schedule":
            for label in rec["enabled"]:
                head, _, rest = label.partition(":")
                if head in ("crash", "restart", "partition"):
                    found.add(rest)
        elif rec["type"] == "fault" and rec["fault"] in ("crash", "restart", "partition",
                                                         "heal"):
            found.add(rec["target"])
    known = sorted(found, key=lambda name: (-len(name), name))  # a set's order is the hash's
    for rec in trace.records:  # routes next: split where a name already known ends
        if rec["type"] == "decision":
            for label in rec["enabled"]:
                message = _MESSAGE.match(label)
                if message:
                    route = message.group(3)
                    source = next((p for p in known if route.startswith(p + "->")), None)
                    if source is None:
                        source = route.partition("->")[0]
                    found.update((source, route[len(source) + 2:]))
    return sorted(found, key=lambda name: (-len(name), name))


def _woken(records: list[dict[str, Any]], at: int) -> list[str]:
    """The tasks the timer fired by the decision before record ``at`` woke (a trace names
    no timer's owner): those whose parked options it took away (a timeout cancelled the
    call), else the first task that logged in its step, else those with an option new at
    the next decision; none when the records say nothing of it."""
    fired = next((i for i in range(at - 1, -1, -1) if records[i]["type"] == "decision"), None)
    if fired is None:
        return []
    after = next((r for r in records[at + 1:] if r["type"] == "decision"), None)
    before = _task_options(records[fired]["enabled"])
    later = _task_options(after["enabled"]) if after is not None else {}
    if after is not None:
        gone = [task for option, task in before.items() if option not in later]
        if gone:
            return list(dict.fromkeys(gone))
    step = records[fired]["step"]
    for rec in records[fired + 1:]:
        if rec["step"] != step or rec["type"] == "decision":
            break
        if rec["type"] == "event":
            return [rec["actor"]]
    return list(dict.fromkeys(task for option, task in later.items() if option not in before))


def _task_options(enabled: list[str]) -> dict[str, str]:
    """The tasks' options among ``enabled`` (fault variants folded into the call), each
    with its task."""
    out: dict[str, str] = {}
    for label in enabled:
        found = None if label.startswith("timer@") else _TASK.match(label)
        if found is not None:
            out[_without_fault(label)] = found.group(1)
    return out


def _without_fault(label: str) -> str:
    """A service call's option without its fault variant: the call that is parked."""
    return label.rpartition("!")[0] if "@call:" in label and "!" in label else label


def _told(rec: dict[str, Any]) -> str:
    told = describe(rec)
    return told[1] if told is not None else rec["type"]


def timeline(trace: Trace) -> Timeline:
    """The lanes, waits, bands, marks and arrows of ``trace`` (raw text: escape to show)."""
    return _Builder(trace).build()
