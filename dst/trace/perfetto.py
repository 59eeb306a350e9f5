"""A trace as Trace Event JSON, for Perfetto and chrome://tracing.

The picture is :func:`dst.trace.timeline.timeline`: lanes, waits, bands, marks
and arrows, inferred from the records alone.  This module draws it in the Trace
Event format: lanes are threads, grouped into a process per simulated process.
Perfetto needs a time, so ``ts`` is the virtual time in microseconds plus one
microsecond per record before it: order is kept, and a virtual second still
reads as a second.  The timeline's names stay importable from here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from .escape import visible
from .model import Trace
from .render import format_time
from .timeline import Arrow, Lane, Mark, Span, Timeline, _told, timeline

__all__ = ["Arrow", "Lane", "Mark", "Span", "Timeline", "render_perfetto", "timeline"]


#: Threads of a process group that are not its tasks: where bands and the inbox go.
_INBOX, _CRASHES, _PARTITIONS = "inbox", "crashed", "partitioned"


def render_perfetto(trace: Trace) -> str:
    """``trace`` as one Trace Event JSON document (``{"traceEvents": [...]}``).

    Each simulated process is a process (``pid``), each of its tasks a thread
    (``tid``), plus an ``inbox`` thread where its messages arrive and a thread
    each for its crashes and partitions; services and fakes' choices are threads
    of a ``world`` process, timers and checks of a ``dst`` process.  Slices
    (``X``) are waits, bands, steps and arrivals; instants (``i``) are events,
    faults and checks; flows (``s``/``f``) are messages and calls.  Every slice
    on a thread nests, as the format requires.  Strings are made visible
    (control characters escaped) as in every other view of a trace.
    """
    return _Exporter(timeline(trace)).document()


class _Exporter:
    def __init__(self, tl: Timeline) -> None:
        self.tl = tl
        self.events: list[dict[str, Any]] = []
        self._pids: dict[str, int] = {}
        self._tids: dict[tuple[str, str], tuple[int, int]] = {}
        self._lanes = {lane.key: (lane, n) for n, lane in enumerate(tl.lanes)}
        self._slices: dict[tuple[int, int], list[dict[str, Any]]] = {}
        self._ts = self._timestamps()

    def _timestamps(self) -> list[int]:
        """Microseconds of virtual time, plus one per record before, for each position."""
        tl = self.tl
        return [round(tl.time_at(at) * 1_000_000) + at for at in range(tl.end + 1)]

    def thread(self, group: str, name: str, sort: int) -> tuple[int, int]:
        key = (group, name)
        if key in self._tids:
            return self._tids[key]
        if group not in self._pids:
            pid = self._pids[group] = len(self._pids) + 1
            shown = {"\0world": "outside world: services, fakes' choices",
                     "\0dst": "dst: timers, checks"}.get(group, group)
            self.events.append(_meta("process_name", pid, 0, {"name": visible(shown)}))
            self.events.append(_meta("process_sort_index", pid, 0, {"sort_index": pid}))
        pid = self._pids[group]
        tid = sum(1 for g, _ in self._tids if g == group) + 1
        self._tids[key] = (pid, tid)
        self.events.append(_meta("thread_name", pid, tid, {"name": visible(name)}))
        self.events.append(_meta("thread_sort_index", pid, tid, {"sort_index": sort}))
        return pid, tid

    def lane(self, key: tuple[str, str]) -> tuple[int, int]:
        lane, order = self._lanes[key]
        return self.thread(lane.group, lane.name, order)

    def slice(self, where: tuple[int, int], name: str, cat: str, start: int, end: int,
              args: dict[str, Any]) -> dict[str, Any]:
        event = {"ph": "X", "name": visible(name), "cat": cat, "pid": where[0], "tid": where[1],
                 "ts": self._ts[start], "dur": max(1, self._ts[end] - self._ts[start]),
                 "args": args}
        self._slices.setdefault(where, []).append(event)
        return event

    def instant(self, where: tuple[int, int], name: str, cat: str, at: int,
                args: dict[str, Any], scope: str = "t") -> None:
        self.events.append({"ph": "i", "s": scope, "name": visible(name), "cat": cat,
                            "pid": where[0], "tid": where[1], "ts": self._ts[at], "args": args})

    def where(self, at: int) -> dict[str, Any]:
        return {"step": self.tl.step_at(at), "virtual": format_time(self.tl.time_at(at))}

    def document(self) -> str:
        tl = self.tl
        for lane in tl.lanes:  # threads in lane order, so both views list them alike
            self.lane(lane.key)
        for span in tl.spans:
            lane = self._lanes[span.lane][0]
            if span.kind in ("crash", "partition"):
                where = self.thread(lane.group, _CRASHES if span.kind == "crash"
                                    else _PARTITIONS, 10_000)
            else:
                where = self.lane(span.lane)
            self.slice(where, span.label, span.kind, span.start, span.end,
                       {**self.where(span.start), "until": self.where(span.end),
                        "what": visible(span.label)})
        for mark in tl.marks:
            args = {**self.where(mark.at), "what": visible(mark.label)}
            if mark.kind == "step":
                self.slice(self.lane(mark.lane), mark.label, "step", mark.at, mark.at, args)
            else:
                self.instant(self.lane(mark.lane), mark.label, mark.kind, mark.at, args)
        if tl.violation_at is not None:
            at = tl.violation_at
            self.instant(self.lane(("checks", "")), _told(tl.trace.records[at]), "violation",
                         at, self.where(at), scope="g")
        for n, arrow in enumerate(tl.arrows, 1):
            self.flow(n, arrow)
        for events in self._slices.values():
            self.events += _nested(events)
        footer = tl.trace.footer
        header = tl.trace.header
        doc = {
            "traceEvents": self.events,
            "displayTimeUnit": "ms",
            "otherData": {
                "scenario": visible(str(header["scenario"])),
                "config": visible(json.dumps(header["config"], sort_keys=True)),
                "seed": header["seed"], "verdict": visible(str(footer.get("verdict"))),
                "violated": visible(", ".join(footer.get("violated", []))),
                "steps": footer.get("steps"),
                "virtual_time": format_time(float(footer.get("virtual_time", 0.0))),
                "dst_version": visible(str(header.get("dst_version", ""))),
                "time": "virtual microseconds, plus one per record before the event",
                # A shrunk trace: the seed it was shrunk from (``seed``: the one it draws from).
                **({"shrunk_from": header["shrunk_from"]} if "shrunk_from" in header else {}),
            },
        }
        return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"

    def flow(self, n: int, arrow: Arrow) -> None:
        """A message (or call) as a slice where it leaves, one where it ends, and a flow."""
        lane = self._lanes[arrow.dest][0]
        if arrow.kind == "message":
            name = f"{arrow.id} {arrow.label}"
            src = self.lane(arrow.source)
            if arrow.copy_of:
                name += f" (copy of {arrow.copy_of})"
            self.slice(src, f"send {name}", "message", arrow.start, arrow.start,
                       self.where(arrow.start))
            if arrow.fate == "in flight":
                return
            dest = self.thread(lane.group, _INBOX, 9_999)
            self.slice(dest, f"{arrow.fate} {name}", "message", arrow.end, arrow.end,
                       {**self.where(arrow.end), "fate": arrow.fate})
        else:
            name = f"call {arrow.label}" + ("" if arrow.fate == "ok" else f" !{arrow.fate}")
            src = self.lane(arrow.source)
            dest = self.lane(arrow.dest)
            self.slice(dest, name, "call", arrow.end, arrow.end,
                       {**self.where(arrow.end), "fault": arrow.fate})
        start, end = self._ts[arrow.start], self._ts[arrow.end]
        self.events.append({"ph": "s", "id": n, "name": visible(name), "cat": arrow.kind,
                            "pid": src[0], "tid": src[1], "ts": start})
        self.events.append({"ph": "f", "bp": "e", "id": n, "name": visible(name),
                            "cat": arrow.kind, "pid": dest[0], "tid": dest[1], "ts": end})


def _meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "args": args}


def _nested(events: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """``events`` (slices of one thread) cut so that any two nest or are disjoint.

    Waits, steps and arrivals of one lane normally follow each other; a wait that
    a crash ended can still overlap the next one, and the format allows only
    nesting.  A slice that would straddle the end of an enclosing one is cut at it.
    """
    open_ends: list[int] = []
    for event in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
        while open_ends and open_ends[-1] <= event["ts"]:
            open_ends.pop()
        if open_ends and event["ts"] + event["dur"] > open_ends[-1]:
            event["dur"] = max(1, open_ends[-1] - event["ts"])
            if event["ts"] + event["dur"] > open_ends[-1]:
                continue  # no room inside: drop it rather than break the nesting
        open_ends.append(event["ts"] + event["dur"])
        yield event
