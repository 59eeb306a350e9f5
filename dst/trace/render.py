"""Telling a trace as a story: step, virtual time, actor, what happened.

The story is told in the runtime's own words (its structlog events), plus the
faults the world injected and the verdicts; the scheduler's decisions are shown
only with ``verbose``, for whoever debugs dst or the replay itself.

Everything taken from a trace is untrusted text: the story passes it through
:func:`~dst.trace.escape.visible` so that no control character reaches a
terminal, and the Markdown renderer escapes it further so that nothing in it is
Markdown syntax (``dst/trace/escape.py`` says why).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from typing import Any

from .. import __version__
from .escape import markdown_inline, visible
from .model import Trace


def format_time(t: float) -> str:
    """Virtual seconds as ``HH:MM:SS.mmm`` (``Nd HH:MM:SS.mmm`` past a day)."""
    ms_total = round(t * 1000)
    days, rest = divmod(ms_total, 86_400_000)
    h, rest = divmod(rest, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    clock = f"{h:02d}:{m:02d}:{s:02d}.{ms:03d}"
    return f"{days}d {clock}" if days else clock


def fields(values: dict[str, Any]) -> str:
    """An event's fields as ``key=value`` pairs, values that are not text or a number as JSON.

    In the order of their names, as a trace file holds them: a trace in memory (the one
    ``dst shrink`` has just made) tells its story as the same trace read back does."""
    return " ".join(f"{k}={v}" if isinstance(v, (str, int, float)) else f"{k}={json.dumps(v)}"
                    for k, v in sorted(values.items()))


def config_line(config: dict[str, Any], switches: Sequence[str] = ()) -> str:
    """``key=value`` as ``-c`` takes it: strings bare, the rest as JSON (``false``, ``2``).

    In the order the scenario declares its ``switches`` (as ``dst run`` shows a config),
    when they are known; the rest, or all without them, in the order of ``config`` (a
    trace file's header holds its keys sorted)."""
    order = [k for k in switches if k in config] + [k for k in config if k not in switches]
    return " ".join(f"{k}={v if isinstance(v, str) else json.dumps(v)}"
                    for k, v in ((k, config[k]) for k in order))


#: How each fault kind is told; a kind without an entry is told generically, so a
#: trace from a newer kernel still renders.
_FAULTS = {
    "crash": "CRASH {target}",
    "restart": "restart {target} ({detail})",
    "refused": "refused {detail} (process has crashed)",
    "stale": "refused {detail} (a call of an earlier incarnation of {target})",
    "drop": "message {target} dropped ({detail})",
    "dup": "message {target} duplicated ({detail})",
    "lost": "message {target} lost: {detail}",
    "partition": "PARTITION {target} cut off ({detail})",
    "heal": "partition of {target} healed",
    "partitioned": "message {target} lost to the partition ({detail})",
    "service": "service {target}: {detail}",
    "slow": "SLOW: {target} {detail}",
    "tcp": "connection {target}: {detail}",
}


def describe(rec: dict[str, Any]) -> tuple[str, str] | None:
    """(actor, text) for a record worth telling, else None.  Raw: not yet escaped."""
    kind = rec["type"]
    if kind == "event":
        extra = fields(rec["fields"])
        return rec["actor"], f"{rec['event']}" + (f"  ({extra})" if extra else "")
    if kind == "fault":
        what, target, detail = rec["fault"], rec["target"], rec["detail"]
        form = _FAULTS.get(what, "{what} {target} {detail}")
        # Substituted in one pass: a "{target}" inside a detail stays text.
        text = form.format(what=what, target=target, detail=detail)
        return (target if what in ("refused", "stale") else "world"), text
    if kind == "violation":
        frames = rec.get("frames") or []
        # Told once: a message that names the frame already (NoUncaughtError's) is enough.
        where = f"  (at {frames[-1]})" if frames and frames[-1] not in rec["message"] else ""
        return "check", f"VIOLATED {rec['invariant']}: {rec['message']}{where}"
    if kind == "check":
        verdict = "holds" if rec["ok"] else f"FAILS: {rec['message']}"
        return "check", f"at end: {rec['property']} {verdict}"
    return None


#: Lines of a story a failure report tells (``dst run``'s summary, ``dst shrink``):
#: its end, where the violation is; ``dst show`` tells a story whole.  A run that
#: logs nothing tells its decisions, thousands of them when it cannot shrink.
STORY_TAIL = 40


def story(trace: Trace, *, verbose: bool = False) -> list[tuple[int, str, str, str]]:
    """The lines of the story: (step, time, actor, text), actor and text made visible.

    ``verbose`` adds the scheduler's decisions and, under a violation raised by
    an uncaught exception, the user's frames it passed through (innermost last).
    A run that logged nothing (no event: a ``@dst.test`` body's tasks, say) tells
    its decisions always: the interleaving is then all there is to tell.

    Just before the first violation come the facts behind it that no record
    tells (actor ``why``, :func:`dst.trace.causes.why`): messages sent and never
    delivered, calls left parked while virtual time jumped, the faults injected.
    A failure without any of these tells no such line.

    A ``Deadlock`` is told by the tasks it names, which often log nothing: their
    scheduling decisions are told (what let each take what it holds), and the
    lines of every other process are left out, counted in one line (``verbose``
    tells them all).
    """
    # They draw on the timeline, which tells records as here.
    from .causes import owner, process_of, stuck_in, why

    lines = []
    causes = why(trace)
    decisions = verbose or not any(rec["type"] == "event" for rec in trace.records)
    stuck = None if verbose else stuck_in(trace)
    left: dict[str, int] = {}  # lines left out of a deadlock's story, per process
    for rec in trace.records:
        if stuck is not None and rec["type"] == "violation" and left:
            whose = ", ".join(sorted(left))
            lines.append((rec["step"], format_time(rec["t"]), "why", visible(
                f"left out: {counted(sum(left.values()), 'line')} of {whose}, which the "
                "deadlock does not name (dst show -v tells them)")))
            left = {}
        if causes and rec["type"] == "violation":
            step, t = rec["step"], format_time(rec["t"])
            lines += [(step, t, "why", visible(line)) for line in causes]
            causes = []
        step, t = rec["step"], format_time(rec["t"])
        named = None if stuck is None else stuck.names(rec)
        if named is False:
            if decisions or rec["type"] == "event":
                proc = (process_of(rec["actor"]) if rec["type"] == "event"
                        else owner(rec["enabled"][rec["chosen"]]) or "timers")
                left[proc] = left.get(proc, 0) + 1
            continue
        if rec["type"] == "decision":
            if decisions or named:
                chosen = rec["enabled"][rec["chosen"]]
                others = len(rec["enabled"]) - 1
                lines.append((step, t, "sched",
                              visible(f"-> {chosen}" + (f"  (of {others + 1})" if others
                                                         else ""))))
            continue
        told = describe(rec)
        if told is not None:
            lines.append((step, t, visible(told[0]), visible(told[1])))
        if verbose and rec["type"] == "violation":
            for frame in rec.get("frames") or []:
                lines.append((step, t, "check", visible(f"  in {frame}")))
    return lines


def shrunk_note(header: dict[str, Any]) -> str | None:
    """For a shrunk trace (``shrunk_from`` in its header), what follows its original
    seed: ``shrunk``, and the seed its run draws from when that is another; else None."""
    origin = header.get("shrunk_from")
    if origin is None:
        return None
    return "shrunk" if origin == header["seed"] else \
        f"shrunk; its run draws from seed {header['seed']}"


def run_title(header: dict[str, Any]) -> str:
    """What a trace's run is titled: ``seed 7``; a shrunk trace's is the seed it was shrunk
    from (``seed 7 (shrunk)``); a run Hypothesis drew has no seed of its own to name."""
    origin = header.get("shrunk_from")
    if header.get("strategy") == "hypothesis":
        return "a Hypothesis draw"
    return f"seed {header['seed']}" if origin is None else f"seed {origin} (shrunk)"


def render_text(trace: Trace, *, verbose: bool = False, switches: Sequence[str] = ()) -> str:
    """``trace`` as a timeline; ``switches``: its scenario's, in the order it declares them."""
    h, f = trace.header, trace.footer
    shrunk = shrunk_note(h)
    seed = (f"seed {h['seed']} ({h['strategy']})" if shrunk is None
            else f"seed {h['shrunk_from']} ({shrunk})")
    out = [visible(f"{h['scenario']} [{config_line(h['config'], switches)}] {seed}")]
    lines = story(trace, verbose=verbose)
    actor_w = max([len(a) for _, _, a, _ in lines] + [5])
    time_w = max([len(t) for _, t, _, _ in lines] + [0])
    for step, t, actor, text in lines:
        out.append(f"  {step:>5}  {t:>{time_w}}  {actor:<{actor_w}}  {text}")
    verdict = f.get("verdict", "?")
    violated = ", ".join(f.get("violated", [])) or "nothing"
    steps = counted(f.get("steps"), "step")
    out.append(visible(f"verdict: {verdict} (violated: {violated}); {steps}, "
                       f"virtual {format_time(f.get('virtual_time', 0.0))}, "
                       f"ended {f.get('ended')}"))
    return "\n".join(out) + "\n"


def counted(n: object, noun: str) -> str:
    """``1 step``, ``2 steps``: a count and its noun, singular for one."""
    return f"{n} {noun}{'s' * (n != 1)}"


def replay_line(path: str, scenario_ref: str | None = None) -> str:
    """``dst replay PATH [--scenario REF]``, quoted for a shell; raw text (escape to show)."""
    line = f"dst replay {shlex.quote(path)}"
    return line + (f" --scenario {shlex.quote(scenario_ref)}" if scenario_ref else "")


def render_markdown(trace: Trace, *, verbose: bool = False, replay: str | None = None,
                    switches: Sequence[str] = ()) -> str:
    """A bug report in GitHub Markdown: what ran, the verdict, the story, how to replay it.

    The story is told twice on purpose: as a numbered list of what happened (the
    lines ``dst run`` prints, for reading) and as a table of step, virtual time,
    actor and text (for finding a step; ``verbose`` adds the scheduler's
    decisions there).  Everything from the trace is escaped by
    :func:`~dst.trace.escape.markdown_inline`, so nothing in it is Markdown; the
    replay command is an indented code block, which Markdown shows as it is.
    Only the first line is a heading: the rest are paragraphs, a list and a table.
    """
    h, f = trace.header, trace.footer
    md = markdown_inline
    verdict = str(f.get("verdict"))
    violated = ", ".join(f.get("violated", []))
    vio = next((r for r in trace.records if r["type"] == "violation"), None)
    cut = f.get("ended") == "bound" and not violated  # a run cut short is never a pass
    steps = counted(f.get("steps"), "step")
    out = [f"### {md(h['scenario'])} {md(run_title(h))}: "
           + ("cut at the step bound" if cut else md(verdict)), ""]
    if vio is not None:
        out += [f"**{md(violated)} violated** at step {vio['step']} (virtual "
                f"{format_time(vio['t'])}): {md(vio['message'])}", ""]
    elif cut:
        out += [f"**Cut at the step bound** after {steps}: no invariant was "
                "violated, but the end-of-run checks never ran.", ""]
    else:
        out += [f"**No check violated** (ended {md(str(f.get('ended')))}).", ""]
    out += [f"- scenario: {md(h['scenario'])}",
            f"- config: {md(config_line(h['config'], switches)) or 'defaults'}",
            f"- seed: {h['seed']} (strategy {md(h['strategy'])})" if shrunk_note(h) is None
            else f"- seed: {h['shrunk_from']} ({md(str(shrunk_note(h)))})",
            f"- verdict: {md(verdict)} (violated: {md(violated) or 'nothing'}); "
            f"{steps}, virtual {format_time(f.get('virtual_time', 0.0))}, "
            f"ended {md(str(f.get('ended')))}", ""]
    told = story(trace)
    out += [f"**Story** ({counted(len(told), 'line')}, {steps}):", ""]
    out += [f"{n}. {t} {md(actor)}: {md(text)}" for n, (_, t, actor, text) in
            enumerate(told, 1)]
    out += ["", "**Step by step**" + (" (with the scheduler's decisions)" if verbose else "")
            + ":", "",
            "| step | virtual time | actor | what happened |", "|---:|---|---|---|"]
    for step, t, actor, text in story(trace, verbose=verbose):
        out.append(f"| {step} | {t} | {md(actor)} | {md(text)} |")
    if replay:
        out += ["", "**Replay** (byte for byte):", "", f"    {visible(replay)}"]
    out += ["", f"Recorded with dst {md(str(h.get('dst_version')))} (Python "
            f"{md(str(h.get('python')))}, trio {md(str(h.get('trio')))}); "
            f"shown with dst {md(__version__)}."]
    return "\n".join(out) + "\n"
