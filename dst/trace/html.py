"""A trace as one self-contained HTML page: swimlanes on virtual time, and the steps beside.

The page is a bug report that opens anywhere, offline: one file, its CSS inline,
nothing fetched, and one short script of dst's own, the only one the page's
Content-Security-Policy (``default-src 'none'``) lets run, by its hash.  The
script only scrolls: on open, the violation into view (the lanes to its column,
the decisions beside to its record); on a link to a folded record, its fold
open.  Without it the page is whole, and the headline links to the violation.
It is drawn on the
server side as SVG from :func:`dst.trace.timeline.timeline`: a lane per actor,
grouped by process; messages as arrows from send to delivery (drops, losses
and duplicates marked); crash and partition bands over a process; the waits of
parked tasks and of timers; service calls with their faults; the violating step
highlighted; and the list of decisions and what each led to, linked from every
mark (``#r12``: plain fragment links, which need no script).

A trace is hostile input (a supplier's e-mail logged in an event is text an
attacker wrote), so every string taken from it passes through :func:`_text`:
control and bidi characters made visible (``dst/trace/escape.py``), then
``html.escape`` with quotes, in text nodes and attributes alike.  Nothing from
a trace is ever put in a URL, a style, an element or attribute name, or script;
the only links are fragments built from record numbers.

The horizontal axis is record order, one column per record, with virtual time
written above it where it changes and a gap where it jumps: most of a run
happens at one virtual instant, which a strictly proportional axis would
collapse to a line.  A long run is mostly quiet stretches, decisions with
nothing told between them (no event, fault or check): each of
:data:`FOLD_MIN` records or more is folded, drawn in :data:`FOLD_COLUMNS`
columns under a band that says what it holds, and listed beside as one line
that opens (``<details>``) to its decisions.  A 300-step run of
``replenish_history`` folds 178 of its 357 records into 11 folds.
"""

from __future__ import annotations

import base64
import hashlib
import html
from collections.abc import Iterable, Sequence
from typing import Any

from .. import __version__
from .causes import why
from .escape import visible
from .model import Trace
from .render import config_line, counted, describe, format_time, run_title, shrunk_note
from .timeline import Arrow, Mark, Span, Timeline, timeline

#: Height of a lane, of the time axis above the lanes, and the columns a time jump adds.
_LANE_H = 26
_AXIS_H = 44
_GAP = 3
#: Records in the shortest quiet stretch that is folded: shorter ones cost less room
#: than the fold that would stand for them.
FOLD_MIN = 6
#: Columns a folded stretch is drawn in, however long it is.
FOLD_COLUMNS = 2


def _text(value: object) -> str:
    """Trace text as inert HTML, for a text node or a quoted attribute alike."""
    return html.escape(visible(str(value)), quote=True)


def _column_width(records: int) -> int:
    """Pixels a record gets: roomy for a short story, thinner as the run grows."""
    for limit, width in ((120, 22), (600, 14), (3000, 8)):
        if records <= limit:
            return width
    return 5


def quiet_stretches(tl: Timeline) -> list[tuple[int, int]]:
    """The folds of ``tl``: ``(start, end)`` record ranges (end exclusive) of at least
    :data:`FOLD_MIN` decisions, none of them followed by a record that tells something
    (an event, a fault, a violation or a check), so the decision that led to one stays
    in view beside it."""
    records = tl.trace.records
    busy = [rec["type"] != "decision" for rec in records]
    for at in range(len(records) - 1):
        busy[at] = busy[at] or busy[at + 1]
    folds, start = [], None
    for at in range(len(records) + 1):
        if at < len(records) and not busy[at]:
            start = at if start is None else start
            continue
        if start is not None and at - start >= FOLD_MIN:
            folds.append((start, at))
        start = None
    return folds


class _Geometry:
    """Where a record position and a lane are drawn: a column each, a gap before a jump
    of virtual time, a fold's records squeezed into :data:`FOLD_COLUMNS` columns."""

    def __init__(self, tl: Timeline) -> None:
        self.folds = quiet_stretches(tl)
        self.width = _column_width(tl.end - sum(end - start for start, end in self.folds))
        self.columns: list[float] = []
        #: Positions drawn after a gap (virtual time jumped just before them).
        self.jumps: set[int] = set()
        self.folded: set[int] = set()
        ends = dict(self.folds)
        column, fold = -1.0, None
        for at in range(tl.end + 1):
            if fold is not None and at == fold[1]:
                column, fold = fold[2] + FOLD_COLUMNS, None
            if fold is None and at in ends:
                fold = (at, ends[at], column + 1.5)
            if fold is not None:
                start, end, base = fold
                self.columns.append(base + FOLD_COLUMNS * (at - start) / max(1, end - start - 1))
                self.folded.add(at)
                continue
            column += 1
            if at and tl.time_at(at) > tl.time_at(at - 1):
                column += _GAP
                self.jumps.add(at)
            self.columns.append(column)
        self.rows = {lane.key: n for n, lane in enumerate(tl.lanes)}
        self.total_width = round((self.columns[-1] + 2) * self.width)
        self.total_height = _AXIS_H + len(tl.lanes) * _LANE_H + 8

    def x(self, at: int) -> float:
        return (self.columns[at] + 1) * self.width

    def y(self, key: tuple[str, str]) -> float:
        return _AXIS_H + self.rows[key] * _LANE_H + _LANE_H / 2


def render_html(trace: Trace, *, replay: str | None = None,
                switches: Sequence[str] = ()) -> str:
    """``trace`` as one HTML page; ``replay`` is the command that replays it, if known;
    ``switches``: its scenario's, in the order it declares them (its config's order)."""
    tl = timeline(trace)
    geo = _Geometry(tl)
    h, f = trace.header, trace.footer
    verdict = str(f.get("verdict", "?"))
    title = f"{h['scenario']} {run_title(h)}: {verdict}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        f"style-src 'unsafe-inline'; script-src '{_SCRIPT_HASH}'; base-uri 'none'; "
        "form-action 'none'\">",
        '<meta name="referrer" content="no-referrer">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>dst: {_text(title)}</title>",
        f"<style>{_CSS}</style></head>",
        "<body>",
        *_summary(tl, replay, switches),
        _LEGEND,
        '<div class="main"><section class="lanes" aria-label="swimlanes">',
        *_names(tl),
        f'<div class="scroll">{_svg(tl, geo)}</div></section>',
        *_steps(tl, geo),
        f"</div><script>{_SCRIPT}</script></body></html>",
    ]
    return "\n".join(parts) + "\n"


# -- the summary -----------------------------------------------------------------------


def _summary(tl: Timeline, replay: str | None, switches: Sequence[str] = ()) -> list[str]:
    h, f = tl.trace.header, tl.trace.footer
    verdict = str(f.get("verdict", "?"))
    violated = ", ".join(f.get("violated", []))
    vio = tl.trace.records[tl.violation_at] if tl.violation_at is not None else None
    headline = f"{violated} violated" if violated else "no check violated"
    tag = verdict.upper()
    if f.get("ended") == "bound" and not violated:  # cut short: never a pass
        tag, verdict = "CUT", "cut"
        headline = (f"no invariant violated, but the run was cut at its step bound "
                    f"({counted(f.get('steps'), 'step')}): its end-of-run checks never ran")
    out = [f'<header><h1><span class="tag {_text(_verdict_class(verdict))}">'
           f"{_text(tag)}</span> {_text(h['scenario'])} "
           f"<small>{_text(run_title(h))}</small></h1>",
           f'<p class="headline">{_text(headline)}'
           + (f' at <a href="#r{tl.violation_at}">step {_text(vio["step"])}</a>, virtual '
              f'{_text(format_time(vio["t"]))}: <q>{_text(vio["message"])}</q> '
              '<a href="#violation">(in the lanes)</a>' if vio else "")
           + "</p>"]
    causes = why(tl.trace) if vio else []
    if causes:
        out += ['<ul class="why" aria-label="why">',
                *[f"<li>{_text(line)}</li>" for line in causes], "</ul>"]
    out.append("<dl>")
    config = config_line(h["config"], switches)
    rows: list[tuple[str, str]] = [
        ("scenario", _text(h["scenario"])),
        ("config", f"<code>{_text(config) or 'defaults'}</code>"),
        ("seed", f"{_text(h['seed'])} <small>(strategy {_text(h['strategy'])})</small>"
         if shrunk_note(h) is None else
         f"{_text(h['shrunk_from'])} <small>({_text(shrunk_note(h))})</small>"),
        ("run", _text(f"{counted(f.get('steps'), 'step')}, virtual "
                      f"{format_time(float(f.get('virtual_time', 0.0)))}, "
                      f"ended {f.get('ended')}")),
    ]
    if replay:
        rows.append(("replay", f"<code>{_text(replay)}</code>"))
    rows.append(("dst", _text(f"recorded with {h.get('dst_version')} (Python {h.get('python')}, "
                              f"trio {h.get('trio')}); shown with {__version__}")))
    out += [f"<div><dt>{name}</dt><dd>{value}</dd></div>" for name, value in rows]
    out.append("</dl></header>")
    return out


def _verdict_class(verdict: str) -> str:
    return "fail" if verdict == "fail" else "pass" if verdict == "pass" else "other"


# -- the lanes --------------------------------------------------------------------------


def _names(tl: Timeline) -> list[str]:
    """The lane names, beside the scrolling drawing: one row each, process rows bold."""
    out = [f'<div class="names" style="padding-top:{_AXIS_H}px">']
    for lane in tl.lanes:
        kind = {"process": "process", "world": "world"}.get(lane.kind, "other")
        what = {"process": "process", "task": "task", "world": "outside world",
                "timers": "the next timer", "checks": "checks"}[lane.kind]
        out.append(f'<div class="name {kind}" style="height:{_LANE_H}px" '
                   f'title="{_text(what)}: {_text(lane.name)}">{_text(lane.name)}</div>')
    out.append("</div>")
    return out


def _svg(tl: Timeline, geo: _Geometry) -> str:
    parts = [f'<svg width="{geo.total_width}" '
             f'height="{geo.total_height}" role="img" aria-label="timeline">', _DEFS]
    parts += _stripes(tl, geo)
    parts += [_fold(tl, geo, start, end) for start, end in geo.folds]
    parts += _axis(tl, geo)
    parts += [_band(tl, geo, s) for s in tl.spans if s.kind in ("crash", "partition")]
    parts += [_wait(geo, s) for s in tl.spans if s.kind not in ("crash", "partition")]
    if tl.violation_at is not None:
        x = geo.x(tl.violation_at)
        parts.append(f'<line class="violation-line" x1="{x:.1f}" y1="{_AXIS_H - 6}" '
                     f'x2="{x:.1f}" y2="{geo.total_height}"/>')
    parts += [_arrow(tl, geo, a) for a in tl.arrows]
    parts += [_mark(tl, geo, m) for m in tl.marks]
    parts.append("</svg>")
    return "\n".join(parts)


def _stripes(tl: Timeline, geo: _Geometry) -> Iterable[str]:
    """A background band per process group, alternating, so lanes read as groups."""
    shade, last = True, None
    for n, lane in enumerate(tl.lanes):
        if lane.group != last:
            shade, last = not shade, lane.group
        if shade:
            yield (f'<rect class="stripe" x="0" y="{_AXIS_H + n * _LANE_H}" '
                   f'width="{geo.total_width}" height="{_LANE_H}"/>')


def _axis(tl: Timeline, geo: _Geometry) -> Iterable[str]:
    """Virtual time where it changes (labels kept apart), jumps shown, steps every so often."""
    last_label = -1e9
    step_every = max(1, round(60 / geo.width))
    last_step, shown = -1, None  # shown: the time at the last position drawn
    for at in range(tl.end):
        if at in geo.folded:
            continue  # a fold says its own times and steps
        x = geo.x(at)
        t = tl.time_at(at)
        if shown is None or t > shown:
            shown = t
            if at in geo.jumps:
                jump = x - geo.width * (_GAP + 1) / 2
                yield (f'<line class="jump" x1="{jump:.1f}" y1="14" x2="{jump:.1f}" '
                       f'y2="{geo.total_height}"><title>virtual time jumps '
                       f'{_text(_seconds(t - tl.time_at(at - 1)))}</title></line>')
            if x - last_label >= 96:
                yield f'<text class="time" x="{x:.1f}" y="12">{_text(format_time(t))}</text>'
                last_label = x
        step = tl.step_at(at)
        if step and step % step_every == 0 and step != last_step \
                and tl.trace.records[at]["type"] == "decision":
            yield f'<text class="stepno" x="{x:.1f}" y="{_AXIS_H - 8}">{step}</text>'
            last_step = step


def _fold(tl: Timeline, geo: _Geometry, start: int, end: int) -> str:
    """A quiet stretch, squeezed: a band over every lane, linked to its fold beside."""
    x1, x2 = geo.x(start) - geo.width / 2, geo.x(end - 1) + geo.width / 2
    t1, t2 = tl.time_at(start), tl.time_at(end - 1)
    tip = (f"{end - start} quiet decisions folded, steps {tl.step_at(start)} to "
           f"{tl.step_at(end - 1)}: nothing logged, no fault"
           + (f"; virtual time {format_time(t1)} to {format_time(t2)}" if t2 > t1 else ""))
    return (f'<a href="#r{start}"><g class="fold"><title>{_text(tip)}</title>'
            f'<rect x="{x1:.1f}" y="{_AXIS_H - 14}" width="{x2 - x1:.1f}" '
            f'height="{geo.total_height - _AXIS_H + 14}"/>'
            f'<text x="{(x1 + x2) / 2:.1f}" y="{_AXIS_H - 18}">{end - start}</text></g></a>')


def _seconds(dt: float) -> str:
    return f"+{dt:g}s" if dt < 120 else f"+{format_time(dt)}"


def _band(tl: Timeline, geo: _Geometry, span: Span) -> str:
    """A crash or a partition, over every lane of the process."""
    group = next(lane.group for lane in tl.lanes if lane.key == span.lane)
    rows = [geo.rows[lane.key] for lane in tl.lanes if lane.group == group]
    x1, x2 = geo.x(span.start), geo.x(span.end)
    y = _AXIS_H + min(rows) * _LANE_H
    height = (max(rows) - min(rows) + 1) * _LANE_H
    tip = (f"{span.lane[1]} {span.label} from step {tl.step_at(span.start)} "
           f"({format_time(tl.time_at(span.start))}) to step {tl.step_at(span.end)} "
           f"({format_time(tl.time_at(span.end))})")
    word = "CRASHED" if span.kind == "crash" else "PARTITIONED"
    return (f'<g class="band {span.kind}"><title>{_text(tip)}</title>'
            f'<rect x="{x1:.1f}" y="{y}" width="{max(2.0, x2 - x1):.1f}" height="{height}"/>'
            f'<text x="{x1 + 3:.1f}" y="{y + 10}">{word}</text></g>')


def _wait(geo: _Geometry, span: Span) -> str:
    x1, x2, y = geo.x(span.start), geo.x(span.end), geo.y(span.lane)
    return (f'<line class="wait {span.kind}" x1="{x1:.1f}" y1="{y:.1f}" x2="{x2:.1f}" '
            f'y2="{y:.1f}"><title>{_text(span.label)}</title></line>')


def _arrow(tl: Timeline, geo: _Geometry, arrow: Arrow) -> str:
    x1, y1 = geo.x(arrow.start), geo.y(arrow.source)
    x2, y2 = geo.x(arrow.end), geo.y(arrow.dest)
    if arrow.kind == "call":
        fault = arrow.fate != "ok"
        tip = (f"step {tl.step_at(arrow.start)}: {arrow.source[1]} calls {arrow.label}"
               + (f", which suffers {arrow.fate}" if fault else ""))
        label = (f'<text class="fault-label" x="{x2 + 4:.1f}" y="{y2 - 5:.1f}">'
                 f"{_text(arrow.fate)}</text>" if fault else "")
        return (f'<a href="#r{arrow.start}"><g class="call{" faulty" if fault else ""}">'
                f"<title>{_text(tip)}</title>"
                f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
                f'marker-end="url(#head-call)"/>{label}</g></a>')
    fate = arrow.fate.replace(" ", "-")
    copy = " copy" if arrow.copy_of else ""
    if y1 == y2:  # to itself: a loop below the lane
        path = (f"M{x1:.1f},{y1:.1f} C{x1:.1f},{y1 + 14:.1f} {x2:.1f},{y2 + 14:.1f} "
                f"{x2:.1f},{y2:.1f}")
    else:
        path = f"M{x1:.1f},{y1:.1f} L{x2:.1f},{y2:.1f}"
    head = {"delivered": "head-msg", "in-flight": "head-open"}.get(fate, "head-cross")
    tip = (f"{arrow.id} {arrow.label}"
           + (f" (a duplicate of {arrow.copy_of})" if arrow.copy_of else "")
           + f": sent at step {tl.step_at(arrow.start)}, "
           + (f"{arrow.fate} at step {tl.step_at(arrow.end)}" if arrow.fate != "in flight"
              else "still in flight when the run ended"))
    tag = (f'<text class="dup-label" x="{x1 + 3:.1f}" y="{y1 - 4:.1f}">dup</text>'
           if arrow.copy_of else "")
    return (f'<a href="#r{arrow.end if arrow.fate != "in flight" else arrow.start}">'
            f'<g class="msg {fate}{copy}"><title>{_text(tip)}</title>'
            f'<path d="{path}" marker-end="url(#{head})"/>{tag}</g></a>')


def _mark(tl: Timeline, geo: _Geometry, mark: Mark) -> str:
    x, y = geo.x(mark.at), geo.y(mark.lane)
    kind = mark.kind + (" bad" if mark.bad else "")
    tip = f"step {tl.step_at(mark.at)}, {format_time(tl.time_at(mark.at))}: {mark.label}"
    if mark.kind == "step":
        shape = f'<rect x="{x - 1.5:.1f}" y="{y - 6:.1f}" width="3" height="12"/>'
    elif mark.kind in ("fault", "violation"):
        r = 7 if mark.kind == "violation" else 5
        shape = (f'<path d="M{x:.1f},{y - r:.1f} L{x + r:.1f},{y:.1f} L{x:.1f},{y + r:.1f} '
                 f'L{x - r:.1f},{y:.1f} Z"/>')
    else:
        shape = f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4"/>'
    first = ' id="violation"' if mark.kind == "violation" and mark.at == tl.violation_at else ""
    return (f'<a href="#r{mark.at}"><g class="mark {kind}"{first}><title>{_text(tip)}</title>'
            f"{shape}</g></a>")


# -- the steps beside -------------------------------------------------------------------


def _steps(tl: Timeline, geo: _Geometry) -> list[str]:
    """Every decision (the option chosen, how many there were) and what followed it; a
    quiet stretch as one line that opens to its decisions."""
    violating = tl.step_at(tl.violation_at) if tl.violation_at is not None else None
    out = ['<aside class="steps" aria-label="decisions"><h2>Decisions and what followed</h2>',
           '<ol class="records">']
    ends = dict(geo.folds)
    lasts = {end - 1 for _, end in geo.folds}
    for at, rec in enumerate(tl.trace.records):
        if at in ends:
            first, last = tl.trace.records[at], tl.trace.records[ends[at] - 1]
            when = format_time(first["t"]) + (f" to {format_time(last['t'])}"
                                              if last["t"] > first["t"] else "")
            out.append(f'<li class="fold"><details><summary>{ends[at] - at} quiet decisions, '
                       f"steps {_text(first['step'])} to {_text(last['step'])} "
                       f'<span class="when">({_text(when)})</span></summary>'
                       '<ol class="records">')
        hot = " violating" if rec["step"] == violating and (
            rec["type"] == "decision" or at == tl.violation_at) else ""
        out += _record(at, rec, hot)
        if at in lasts:
            out.append("</ol></details></li>")
    out.append("</ol></aside>")
    return out


def _record(at: int, rec: dict[str, Any], hot: str) -> list[str]:
    """One record of the list: a decision, or what the run told."""
    when = f'<span class="when">{_text(format_time(rec["t"]))}</span>'
    if rec["type"] == "decision":
        enabled: list[str] = rec["enabled"]
        chosen: int = rec["chosen"]
        options = "\n".join(("> " if i == chosen else "  ") + visible(label)
                            for i, label in enumerate(enabled))
        of = f' <span class="of">of {len(enabled)}</span>' if len(enabled) > 1 else ""
        data = " data" if rec["kind"] == "data" else ""
        return [f'<li id="r{at}" class="decision{data}{hot}" '
                f'title="{html.escape(options, quote=True)}">'
                f'<span class="stepno">{_text(rec["step"])}</span>{when}'
                f'<span class="chosen">{_text(enabled[chosen])}</span>{of}</li>']
    told = describe(rec)
    if told is None:
        return []
    kind = rec["type"] + (" bad" if rec["type"] == "fault" or (
        rec["type"] == "check" and not rec["ok"]) else "")
    return [f'<li id="r{at}" class="told {_text(kind)}{hot}">{when}'
            f'<span class="actor">{_text(told[0])}</span> {_text(told[1])}</li>']


# -- fixed parts: no trace text below this line ------------------------------------------

#: The page's one script: no trace text, so its hash stands in the policy for good.  On
#: open (no fragment asked for) it scrolls the decisions beside to the violating record
#: and then the violation into view, the lanes to its column; a link to a record in a
#: fold opens the fold first.
_SCRIPT = """(function(){
function shown(){var t=location.hash&&document.getElementById(location.hash.slice(1));
for(var e=t;e;e=e.parentElement){if(e.tagName==="DETAILS"){e.open=true;}}
if(t){t.scrollIntoView({block:"nearest",inline:"center"});}}
addEventListener("hashchange",shown);
if(location.hash){shown();return;}
var v=document.getElementById("violation");if(!v){return;}
var s=document.querySelector(".steps"),r=document.querySelector(".records .violation");
if(s&&r){s.scrollTop=r.offsetTop-s.clientHeight/2;}
v.scrollIntoView({block:"nearest",inline:"center"});
})();"""
_SCRIPT_HASH = "sha256-" + base64.b64encode(hashlib.sha256(_SCRIPT.encode()).digest()).decode()

_DEFS = """<defs>
<marker id="head-msg" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7"
 orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#0f766e"/></marker>
<marker id="head-call" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6"
 orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#15803d"/></marker>
<marker id="head-open" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7"
 orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10" fill="none" stroke="#6b7280"/></marker>
<marker id="head-cross" viewBox="0 0 10 10" refX="5" refY="5" markerWidth="9" markerHeight="9">
<path d="M1,1 L9,9 M9,1 L1,9" stroke="#dc2626" stroke-width="2.2"/></marker>
<pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse"
 patternTransform="rotate(45)"><rect width="6" height="6" fill="#fed7aa" fill-opacity=".45"/>
<line x1="0" y1="0" x2="0" y2="6" stroke="#ea580c" stroke-width="2" stroke-opacity=".5"/>
</pattern></defs>"""

_LEGEND = """<section class="legend" aria-label="legend">
<span><svg width="34" height="12"><line x1="2" y1="6" x2="28" y2="6" stroke="#0f766e"
 stroke-width="1.6" marker-end="url(#lg-msg)"/><defs><marker id="lg-msg" viewBox="0 0 10 10"
 refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z"
 fill="#0f766e"/></marker></defs></svg>message delivered</span>
<span><svg width="34" height="12"><line x1="2" y1="6" x2="26" y2="6" stroke="#dc2626"
 stroke-width="1.6" stroke-dasharray="4 3"/><path d="M24,2 L32,10 M32,2 L24,10" stroke="#dc2626"
 stroke-width="2"/></svg>dropped, lost or cut by a partition</span>
<span><svg width="34" height="12"><line x1="2" y1="6" x2="30" y2="6" stroke="#7c3aed"
 stroke-width="1.6" stroke-dasharray="2 2"/></svg>duplicate</span>
<span><svg width="20" height="12"><rect x="2" y="1" width="16" height="10"
 fill="#fecaca"/></svg>crashed</span>
<span><svg width="20" height="12"><rect x="2" y="1" width="16" height="10" fill="#fed7aa"
 stroke="#ea580c"/></svg>partitioned</span>
<span><svg width="30" height="12"><line x1="2" y1="6" x2="28" y2="6" stroke="#9ca3af"
 stroke-width="4" stroke-opacity=".5"/></svg>waiting (parked task, next timer)</span>
<span><svg width="12" height="12"><rect x="5" y="0" width="3" height="12"
 fill="#374151"/></svg>step taken</span>
<span><svg width="12" height="12"><circle cx="6" cy="6" r="4" fill="#2563eb"/></svg>event
 logged</span>
<span><svg width="14" height="14"><line x1="7" y1="0" x2="7" y2="14" stroke="#15803d"
 stroke-width="1.6"/></svg>service call (its fault in red)</span>
<span><svg width="14" height="14"><path d="M7,1 L13,7 L7,13 L1,7 Z"
 fill="#dc2626"/></svg>fault, violation</span>
</section>"""

_CSS = """
:root{color-scheme:light;--fg:#111827;--muted:#6b7280;--line:#e5e7eb}
*{box-sizing:border-box}
body{margin:0;padding:16px 20px;font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,
 "DejaVu Sans",sans-serif;color:var(--fg);background:#fff}
h1{font-size:20px;margin:0 0 4px}h1 small{color:var(--muted);font-weight:normal}
h2{font-size:14px;margin:0 0 6px}
.tag{display:inline-block;padding:1px 8px;border-radius:4px;color:#fff;font-size:14px;
 vertical-align:middle}
.tag.fail{background:#dc2626}.tag.pass{background:#16a34a}.tag.other{background:#6b7280}
.headline{margin:0 0 10px;font-size:15px}.headline q{color:#991b1b}
.why{margin:-4px 0 10px;padding-left:1.4em;font-size:13px;color:#7f1d1d}
dl{display:grid;grid-template-columns:repeat(auto-fill,minmax(260px,1fr));gap:2px 18px;
 margin:0 0 10px}
dl div{display:flex;gap:8px;min-width:0}dt{color:var(--muted);min-width:60px}
dd{margin:0;overflow-wrap:anywhere}
code{font:12.5px ui-monospace,"DejaVu Sans Mono",monospace;background:#f3f4f6;padding:0 4px;
 border-radius:3px;overflow-wrap:anywhere}
.legend{display:flex;flex-wrap:wrap;gap:4px 16px;color:var(--muted);font-size:12px;
 margin:0 0 10px;align-items:center}
.legend span{display:inline-flex;align-items:center;gap:4px}
.main{display:grid;grid-template-columns:minmax(0,1fr) minmax(300px,30rem);gap:16px;
 align-items:start}
@media (max-width:900px){.main{grid-template-columns:minmax(0,1fr)}}
.lanes{display:flex;border:1px solid var(--line);border-radius:6px;min-width:0}
.names{flex:none;max-width:16rem;border-right:1px solid var(--line);background:#fafafa}
.name{display:flex;align-items:center;padding:0 8px;white-space:nowrap;overflow:hidden;
 text-overflow:ellipsis;font-size:12.5px}
.name.process{font-weight:600}.name.world{color:#15803d}.name.other{color:var(--muted)}
.scroll{overflow-x:auto;min-width:0;flex:1}
svg text{font:10.5px ui-monospace,"DejaVu Sans Mono",monospace;fill:var(--muted)}
.stripe{fill:#f8fafc}
.time{fill:#374151}.stepno{fill:#9ca3af}
.jump{stroke:#94a3b8;stroke-dasharray:2 4}
.band rect{fill:#fecaca;fill-opacity:.55}.band.partition rect{fill:url(#hatch)}
.band text{fill:#b91c1c;font-weight:bold}.band.partition text{fill:#c2410c}
.wait{stroke:#9ca3af;stroke-width:4;stroke-opacity:.45;stroke-linecap:round}
.wait.timer{stroke:#a78bfa}
.violation-line{stroke:#dc2626;stroke-width:2;stroke-opacity:.6}
.msg path{fill:none;stroke:#0f766e;stroke-width:1.6}
.msg.dropped path,.msg.lost path{stroke:#dc2626;stroke-dasharray:4 3}
.msg.partitioned path{stroke:#ea580c;stroke-dasharray:4 3}
.msg.in-flight path{stroke:#6b7280;stroke-dasharray:1 3}
.msg.copy path{stroke:#7c3aed;stroke-dasharray:2 2}
.dup-label{fill:#7c3aed}
.call line{stroke:#15803d;stroke-width:1.6}.call.faulty line{stroke:#dc2626;stroke-width:2.2}
.fault-label{fill:#dc2626;font-weight:bold}
.mark.step rect{fill:#374151}.mark.event circle{fill:#2563eb}
.mark.choice circle{fill:#fff;stroke:#15803d;stroke-width:2}
.mark.check circle{fill:#16a34a}.mark.check.bad circle{fill:#dc2626}
.mark.fault path{fill:#16a34a}.mark.fault.bad path{fill:#dc2626}
.mark.violation path{fill:#dc2626;stroke:#7f1d1d;stroke-width:1.5}
a:hover .mark,a:focus .mark{opacity:.6}
.steps{position:relative;border:1px solid var(--line);border-radius:6px;padding:8px;
 max-height:80vh;overflow-y:auto;min-width:0}
.steps::after{content:"";display:block;height:40vh}
.fold rect{fill:#f1f5f9;fill-opacity:.85;stroke:#cbd5e1;stroke-dasharray:3 2}
.fold text{fill:#64748b;text-anchor:middle}
a:hover .fold rect,a:focus .steps::after{content:"";display:block;height:40vh}
.fold rect{fill:#e2e8f0}
.records .fold summary{cursor:pointer;color:var(--muted);padding:1px 4px}
.records .fold .records{padding-left:1em;border-left:2px solid #e2e8f0}
.records{list-style:none;margin:0;padding:0;font:12px ui-monospace,"DejaVu Sans Mono",monospace}
.records li{padding:1px 4px;border-radius:3px;overflow-wrap:anywhere}
.records li:target{outline:2px solid #2563eb;background:#eff6ff}
.records .decision{color:#374151}.records .decision.data .chosen{color:#15803d}
.records .told{padding-left:3.2em;color:var(--fg)}
.records .fault.bad,.records .check.bad{color:#b91c1c}
.records .violation{color:#fff;background:#dc2626;font-weight:bold}
.records .violating{background:#fee2e2}
.records .violation.violating{background:#dc2626}
.records .stepno{display:inline-block;min-width:3em;color:#9ca3af}
.records .when{color:#9ca3af;margin-right:.6em}
.records .actor{font-weight:bold;margin-right:.4em}.records .of{color:#9ca3af}
"""
