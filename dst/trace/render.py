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
from typing import Any

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


def _fields(fields: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" if isinstance(v, (str, int, float)) else f"{k}={json.dumps(v)}"
                    for k, v in fields.items())


def _config(config: dict[str, Any]) -> str:
    """``key=value`` as ``-c`` takes it: strings bare, the rest as JSON (``false``, ``2``)."""
    return " ".join(f"{k}={v if isinstance(v, str) else json.dumps(v)}"
                    for k, v in sorted(config.items()))


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
}


def describe(rec: dict[str, Any]) -> tuple[str, str] | None:
    """(actor, text) for a record worth telling, else None.  Raw: not yet escaped."""
    kind = rec["type"]
    if kind == "event":
        extra = _fields(rec["fields"])
        return rec["actor"], f"{rec['event']}" + (f"  ({extra})" if extra else "")
    if kind == "fault":
        what, target, detail = rec["fault"], rec["target"], rec["detail"]
        form = _FAULTS.get(what, "{what} {target} {detail}")
        # Substituted in one pass: a "{target}" inside a detail stays text.
        text = form.format(what=what, target=target, detail=detail)
        return (target if what in ("refused", "stale") else "world"), text
    if kind == "violation":
        frames = rec.get("frames") or []
        where = f"  (at {frames[-1]})" if frames else ""
        return "check", f"VIOLATED {rec['invariant']}: {rec['message']}{where}"
    if kind == "check":
        verdict = "holds" if rec["ok"] else f"FAILS: {rec['message']}"
        return "check", f"at end: {rec['property']} {verdict}"
    return None


def story(trace: Trace, *, verbose: bool = False) -> list[tuple[int, str, str, str]]:
    """The lines of the story: (step, time, actor, text), actor and text made visible.

    ``verbose`` adds the scheduler's decisions and, under a violation raised by
    an uncaught exception, the user's frames it passed through (innermost last).
    """
    lines = []
    for rec in trace.records:
        step, t = rec["step"], format_time(rec["t"])
        if rec["type"] == "decision":
            if verbose:
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


def render_text(trace: Trace, *, verbose: bool = False) -> str:
    h, f = trace.header, trace.footer
    out = [visible(f"{h['scenario']} [{_config(h['config'])}] seed {h['seed']} "
                   f"({h['strategy']})")]
    lines = story(trace, verbose=verbose)
    actor_w = max([len(a) for _, _, a, _ in lines] + [5])
    time_w = max([len(t) for _, t, _, _ in lines] + [0])
    for step, t, actor, text in lines:
        out.append(f"  {step:>5}  {t:>{time_w}}  {actor:<{actor_w}}  {text}")
    verdict = f.get("verdict", "?")
    violated = ", ".join(f.get("violated", [])) or "nothing"
    out.append(visible(f"verdict: {verdict} (violated: {violated}); {f.get('steps')} steps, "
                       f"virtual {format_time(f.get('virtual_time', 0.0))}, "
                       f"ended {f.get('ended')}"))
    return "\n".join(out) + "\n"


def render_markdown(trace: Trace, *, verbose: bool = False) -> str:
    """A heading, the config and a table; everything from the trace escaped, inert on GitHub."""
    h, f = trace.header, trace.footer
    md = markdown_inline
    out = [f"### {md(h['scenario'])} seed {h['seed']}: {md(str(f.get('verdict')))}", "",
           f"config: {md(_config(h['config'])) or 'none'}", "",
           "| step | virtual time | actor | what happened |", "|---:|---|---|---|"]
    for step, t, actor, text in story(trace, verbose=verbose):
        out.append(f"| {step} | {t} | {md(actor)} | {md(text)} |")
    out += ["", f"violated: {md(', '.join(f.get('violated', []))) or 'nothing'}"]
    return "\n".join(out) + "\n"
