"""Telling a trace as a story: step, virtual time, actor, what happened.

The story is told in the runtime's own words (its structlog events), plus the
faults the world injected and the verdicts; the scheduler's decisions are shown
only with ``verbose``, for whoever debugs dst or the replay itself.
"""

from __future__ import annotations

import json
from typing import Any

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
    parts = []
    for k, v in fields.items():
        parts.append(f"{k}={v}" if isinstance(v, (str, int, float)) else f"{k}={json.dumps(v)}")
    return " ".join(parts)


def describe(rec: dict[str, Any]) -> tuple[str, str] | None:
    """(actor, text) for a record worth telling, else None."""
    kind = rec["type"]
    if kind == "event":
        extra = _fields(rec["fields"])
        return rec["actor"], f"{rec['event']}" + (f"  ({extra})" if extra else "")
    if kind == "fault":
        what, target, detail = rec["fault"], rec["target"], rec["detail"]
        text = {
            "crash": f"CRASH {target}",
            "restart": f"restart {target} ({detail})",
            "refused": f"refused {detail} (process has crashed)",
            "drop": f"message {target} dropped ({detail})",
            "dup": f"message {target} duplicated ({detail})",
            "lost": f"message {target} lost: {detail}",
        }.get(what, f"{what} {target} {detail}")
        return ("world" if what != "refused" else target), text
    if kind == "violation":
        return "check", f"VIOLATED {rec['invariant']}: {rec['message']}"
    if kind == "check":
        verdict = "holds" if rec["ok"] else f"FAILS: {rec['message']}"
        return "check", f"at end: {rec['property']} {verdict}"
    return None


def story(trace: Trace, *, verbose: bool = False) -> list[tuple[int, str, str, str]]:
    """The lines of the story: (step, time, actor, text)."""
    lines = []
    for rec in trace.records:
        if rec["type"] == "decision":
            if verbose:
                chosen = rec["enabled"][rec["chosen"]]
                others = len(rec["enabled"]) - 1
                lines.append((rec["step"], format_time(rec["t"]), "sched",
                              f"-> {chosen}" + (f"  (of {others + 1})" if others else "")))
            continue
        told = describe(rec)
        if told is not None:
            lines.append((rec["step"], format_time(rec["t"]), told[0], told[1]))
    return lines


def render_text(trace: Trace, *, verbose: bool = False) -> str:
    h, f = trace.header, trace.footer
    config = " ".join(f"{k}={json.dumps(v) if not isinstance(v, str) else v}"
                      for k, v in sorted(h["config"].items()))
    out = [f"{h['scenario']} [{config}] seed {h['seed']} ({h['strategy']})"]
    lines = story(trace, verbose=verbose)
    actor_w = max([len(a) for _, _, a, _ in lines] + [5])
    time_w = max([len(t) for _, t, _, _ in lines] + [0])
    for step, t, actor, text in lines:
        out.append(f"  {step:>5}  {t:>{time_w}}  {actor:<{actor_w}}  {text}")
    verdict = f.get("verdict", "?")
    violated = ", ".join(f.get("violated", [])) or "nothing"
    out.append(f"verdict: {verdict} (violated: {violated}); {f.get('steps')} steps, "
               f"virtual {format_time(f.get('virtual_time', 0.0))}, ended {f.get('ended')}")
    return "\n".join(out) + "\n"


def render_markdown(trace: Trace, *, verbose: bool = False) -> str:
    h, f = trace.header, trace.footer
    out = [f"### {h['scenario']} seed {h['seed']}: {f.get('verdict')}", "",
           f"config: `{json.dumps(h['config'], sort_keys=True)}`", "",
           "| step | virtual time | actor | what happened |", "|---:|---|---|---|"]
    for step, t, actor, text in story(trace, verbose=verbose):
        out.append(f"| {step} | {t} | {actor} | {text.replace('|', '/')} |")
    out += ["", f"violated: {', '.join(f.get('violated', [])) or 'nothing'}"]
    return "\n".join(out) + "\n"
