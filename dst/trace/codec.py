"""Reading and writing trace files, validating every field.

Loading a trace never executes anything from it (no pickle, no eval): it is
JSON, checked field by field against the v1 schema, and its footer hash must
match its content.  Anything else is a :class:`TraceFormatError` with one line
that says what is wrong and where.

A trace is checked for meaning as well as shape: decisions numbered 1, 2, 3...,
every other record stamped with the step of the decision before it, known
decision and fault kinds, time that never goes back, a footer that agrees with
the records.  The commands trust a trace that loads, so a file no run could
have written (edited, resealed with a fresh hash, or forged) must not load.
Its size is bounded too (line length, nesting depth, lines, bytes), so that a
hostile file is refused with one line rather than exhausting memory or the
parser's stack.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import TraceFormatError
from .escape import visible
from .model import (
    DECISION_KINDS,
    ENDINGS,
    FAULT_KINDS,
    FORMAT,
    MAX_DEPTH,
    VERSION,
    Trace,
    canonical,
    scenario_file_problem,
)

#: Longest line a reader accepts.  A decision with hundreds of enabled options
#: stays far below it; a 50 MB line is a corrupt or hostile file, refused before
#: it is held in memory.
MAX_LINE_BYTES = 4 * 1024 * 1024

#: Most records (lines between the header and the footer) a reader accepts.  The
#: longest shipped runs (20,000 steps) write well under a tenth of it.
MAX_RECORDS = 1_000_000

#: Largest trace a reader accepts, in bytes.  Held in memory as Python objects a
#: trace takes several times its size, so the bound keeps a reader's memory sane.
MAX_TRACE_BYTES = 256 * 1024 * 1024

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKET = re.compile(r"[\[\]{}]")

_NUM = (int, float)
_SCHEMA: dict[str, dict[str, Any]] = {
    "header": {"format": str, "version": int, "scenario": str, "config": dict, "seed": int,
               "strategy": str, "faults": dict, "max_steps": int, "dst_version": str,
               "python": str, "trio": str},
    "decision": {"step": int, "t": _NUM, "kind": str, "enabled": list, "chosen": int},
    "event": {"step": int, "t": _NUM, "actor": str, "event": str, "fields": dict},
    "fault": {"step": int, "t": _NUM, "fault": str, "target": str, "detail": str},
    "violation": {"step": int, "t": _NUM, "invariant": str, "message": str},
    "check": {"step": int, "t": _NUM, "property": str, "ok": bool, "message": str},
    "footer": {"verdict": str, "violated": list, "steps": int, "virtual_time": _NUM,
               "ended": str, "sha256": str},
}
#: Fields a record may lack (traces written before they existed) or hold as null.
_OPTIONAL: dict[str, dict[str, Any]] = {"header": {"hash_seed": (int, type(None)),
                                                    "scenario_file": str, "shrunk_from": int},
                                         "violation": {"frames": list}}


def write_trace(trace: Trace, path: str | os.PathLike[str]) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(trace.text(), encoding="utf-8")
    os.replace(tmp, out)  # never leave a half-written trace under the real name
    return out


def _fail(path: str, line: int | None, what: str) -> TraceFormatError:
    where = f"{path}:{line}" if line is not None else path
    return TraceFormatError(f"{where}: {what}")


def _check_fields(path: str, n: int, obj: dict[str, Any], kind: str) -> None:
    for name, typ in _SCHEMA[kind].items():
        if name not in obj:
            raise _fail(path, n, f"{kind} record lacks field {name!r}")
        value = obj[name]
        if isinstance(value, bool) and typ is not bool and typ is not dict:
            raise _fail(path, n, f"field {name!r} of a {kind} record is a boolean")
        if not isinstance(value, typ):
            raise _fail(path, n, f"field {name!r} of a {kind} record has the wrong type")
    for name, typ in _OPTIONAL.get(kind, {}).items():
        if name in obj and (isinstance(obj[name], bool) or not isinstance(obj[name], typ)):
            raise _fail(path, n, f"field {name!r} of a {kind} record has the wrong type")
    extra = set(obj) - set(_SCHEMA[kind]) - set(_OPTIONAL.get(kind, {})) - {"type"}
    if extra:
        raise _fail(path, n, f"{kind} record has unknown field(s) {sorted(extra)}")
    if kind == "decision":
        enabled = obj["enabled"]
        if not enabled or not all(isinstance(x, str) for x in enabled):
            raise _fail(path, n, "decision 'enabled' must be a non-empty list of labels")
        if not 0 <= obj["chosen"] < len(enabled):
            raise _fail(path, n, "decision 'chosen' is not an index into 'enabled'")
    if kind == "violation" and "frames" in obj:
        if not all(isinstance(x, str) for x in obj["frames"]):
            raise _fail(path, n, "violation 'frames' must be a list of strings")


def read_trace(path: str | os.PathLike[str]) -> Trace:
    """Load and validate a trace file; raise :class:`TraceFormatError` on any defect."""
    name = str(path)
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        raise TraceFormatError(f"{name}: no such file") from None
    except OSError as exc:
        raise TraceFormatError(f"{name}: cannot read it ({exc.strerror})") from None
    with fh:
        return _parse(name, iter(lambda: fh.readline(MAX_LINE_BYTES + 1), b""))


def loads_trace(text: str, name: str = "<trace>") -> Trace:
    """Validate a trace held in memory (e.g. sent back by a worker process)."""
    return _parse(name, iter(text.encode("utf-8").splitlines(keepends=True)))


def _too_deep(text: str) -> bool:
    """Whether the JSON ``text`` nests arrays and objects deeper than ``MAX_DEPTH``.

    Checked before parsing: ``json.loads`` recurses once per level, so a line of
    100,000 brackets would raise ``RecursionError`` (or worse) inside it.  Brackets
    inside strings do not count; a line with few brackets is not scanned at all.
    """
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return False
    depth = 0
    for bracket in _BRACKET.findall(_STRING.sub("", text)):
        if bracket in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return True
        else:
            depth -= 1
    return False


def _parse(name: str, raw_lines: Iterator[bytes]) -> Trace:
    objs: list[dict[str, Any]] = []
    lines: list[str] = []
    size = 0
    for n, raw in enumerate(raw_lines, start=1):
        if len(raw) > MAX_LINE_BYTES:
            raise _fail(name, n, f"line longer than {MAX_LINE_BYTES // (1024 * 1024)} MB; "
                        "this is not a dst trace")
        size += len(raw)
        if size > MAX_TRACE_BYTES:
            raise _fail(name, n, f"trace larger than {MAX_TRACE_BYTES // (1024 * 1024)} MB; "
                        "dst reads no larger trace")
        if n > MAX_RECORDS + 2:
            raise _fail(name, n, f"more than {MAX_RECORDS:,} records; "
                        "dst reads no longer trace")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _fail(name, n, "not UTF-8; a dst trace is UTF-8 JSON Lines") from None
        if not text.endswith("\n"):
            raise _fail(name, n, "last line is cut short; the trace is truncated")
        text = text[:-1]
        if _too_deep(text):
            raise _fail(name, n, f"arrays or objects nested deeper than {MAX_DEPTH} levels; "
                        "no dst trace nests so deep")
        try:
            obj = json.loads(text, parse_constant=_no_constant)
        except RecursionError:
            raise _fail(name, n, f"arrays or objects nested deeper than {MAX_DEPTH} levels; "
                        "no dst trace nests so deep") from None
        except (json.JSONDecodeError, ValueError):
            trace_beside = Path(name).with_suffix(".jsonl")
            if n == 1 and name.endswith(".json") and trace_beside.is_file():
                raise _fail(name, n, "this is a pin's note (dst pin writes it beside the "
                            f"trace), not a trace; give the trace: {trace_beside}") from None
            if n == 1:
                raise _fail(name, n, "not JSON; is this a dst trace?") from None
            raise _fail(name, n, "not valid JSON; the trace was edited or damaged") from None
        if not isinstance(obj, dict):
            raise _fail(name, n, "a trace line must be a JSON object")
        if n == 1:
            _check_identity(name, obj)  # before reading on: never half-read a foreign file
        objs.append(obj)
        lines.append(text)
    if not objs:
        raise TraceFormatError(f"{name}: empty file; a dst trace starts with a header line")
    header = objs[0]
    _check_fields(name, 1, header, "header")
    footer = objs[-1]
    if len(objs) < 2 or footer.get("type") != "footer":
        raise TraceFormatError(f"{name}: no footer line; the trace is truncated")
    _check_fields(name, len(objs), footer, "footer")
    records = objs[1:-1]
    for i, rec in enumerate(records, start=2):
        kind = rec.get("type")
        if kind not in _SCHEMA or kind in ("header", "footer"):
            raise _fail(name, i, f"unknown record type {kind!r}")
        _check_fields(name, i, rec, kind)
    _check_order(name, records)
    _check_footer(name, len(objs), records, footer)
    trace = Trace(header, records, {k: v for k, v in footer.items() if k != "type"})
    if "\n".join(lines) + "\n" != trace.text():
        if canonical(footer) != lines[-1] or any(
            a != b for a, b in zip(lines, trace.body_lines(), strict=False)
        ):
            raise TraceFormatError(
                f"{name}: lines are not in canonical form; the trace was edited")
        raise TraceFormatError(f"{name}: sha256 does not match the content; the trace was edited")
    # After the hash: a hand-edited trace is reported as edited; a resealed or forged
    # one is still refused if no run could have written it.
    _check_meaning(name, header, records, footer)
    return trace


def _check_identity(path: str, header: dict[str, Any]) -> None:
    if header.get("format") != FORMAT:
        raise _fail(path, 1, f"not a dst trace (format is {header.get('format')!r}, "
                    f"expected {FORMAT!r})")
    if header.get("version") != VERSION:
        raise _fail(path, 1, f"trace format version {header.get('version')!r}; this dst "
                    f"(format version {VERSION}) reads only version {VERSION} traces")
    if header.get("type") != "header":
        raise _fail(path, 1, "first line is not a header record")


#: Values of a footer's ``verdict`` and the verdict each implies.
VERDICTS = ("pass", "fail")


def _check_order(path: str, records: list[dict[str, Any]]) -> None:
    """Steps and virtual time never go backwards; both start at zero or later."""
    step, t = 0, 0.0
    for i, rec in enumerate(records, start=2):
        if rec["step"] < step:
            raise _fail(path, i, f"step {rec['step']} comes after step {step}")
        if not math.isfinite(rec["t"]) or rec["t"] < t:
            raise _fail(path, i, f"virtual time {rec['t']} comes after {t}")
        step, t = rec["step"], rec["t"]


def _check_footer(path: str, n: int, records: list[dict[str, Any]],
                  footer: dict[str, Any]) -> None:
    """The footer must agree with the records it summarises."""
    if footer["verdict"] not in VERDICTS:
        raise _fail(path, n, f"verdict {footer['verdict']!r} is not one of {', '.join(VERDICTS)}")
    violated: list[str] = []
    for rec in records:
        if rec["type"] == "violation" and rec["invariant"] not in violated:
            violated.append(rec["invariant"])
    if footer["violated"] != violated:
        raise _fail(path, n, f"footer names violated {footer['violated']}, "
                    f"the records {violated}")
    if (footer["verdict"] == "fail") != bool(violated):
        raise _fail(path, n, f"verdict {footer['verdict']!r} contradicts the violations "
                    f"recorded ({visible(', '.join(violated)) or 'none'})")
    if records and footer["steps"] < records[-1]["step"]:
        raise _fail(path, n, f"footer says {footer['steps']} steps, "
                    f"but a record has step {records[-1]['step']}")


def _check_meaning(path: str, header: dict[str, Any], records: list[dict[str, Any]],
                   footer: dict[str, Any]) -> None:
    """What the fields say must be something a run could have recorded."""
    _check_header(path, header)
    footer_line = len(records) + 2
    # A run stopped by a divergence (or an error) counted a step it never recorded:
    # the records written while it unwound carry that step, and so does the footer.
    unrecorded_step = footer["ended"] in ("diverged", "error")
    step = 0  # the step of the last decision so far
    ahead = False  # a record carried the unrecorded step
    failed = {rec["invariant"] for rec in records if rec["type"] == "violation"}
    for i, rec in enumerate(records, start=2):
        kind = rec["type"]
        if kind == "decision":
            if rec["kind"] not in DECISION_KINDS:
                raise _fail(path, i, f"decision kind {rec['kind']!r} is not one of "
                            f"{', '.join(sorted(DECISION_KINDS))}")
            if rec["step"] != step + 1 or ahead:
                raise _fail(path, i, f"decision at step {rec['step']} follows step {step}; "
                            "decisions are numbered 1, 2, 3, ...")
            step = rec["step"]
            continue
        if rec["step"] != step:
            if not (unrecorded_step and rec["step"] == step + 1):
                raise _fail(path, i, f"{kind} record has step {rec['step']}, but the "
                            f"decision before it is step {step}; a record carries the step "
                            "of the last decision")
            ahead = True
        if kind == "fault" and rec["fault"] not in FAULT_KINDS:
            raise _fail(path, i, f"fault kind {rec['fault']!r} is not one of "
                        f"{', '.join(sorted(FAULT_KINDS))}")
        if kind == "check":
            if rec["ok"] and rec["message"]:
                raise _fail(path, i, "a check that held has a message; only a failing "
                            "check has one")
            if not rec["ok"] and rec["property"] not in failed:
                raise _fail(path, i, f"check {rec['property']!r} failed, but no violation "
                            "of it is recorded")
    if footer["ended"] not in ENDINGS:
        raise _fail(path, footer_line, f"ended {footer['ended']!r} is not one of "
                    f"{', '.join(sorted(ENDINGS))}")
    if footer["steps"] != step and not (unrecorded_step and footer["steps"] == step + 1):
        raise _fail(path, footer_line, f"footer says {footer['steps']} steps, but the last "
                    f"decision is step {step}")
    if footer["ended"] == "violation" and footer["verdict"] != "fail":
        raise _fail(path, footer_line, "the run ended on a violation, but the verdict "
                    f"is {footer['verdict']!r}")
    last_t = records[-1]["t"] if records else 0.0
    end = footer["virtual_time"]
    if not math.isfinite(end) or end < last_t:
        raise _fail(path, footer_line, f"virtual_time {end} is before the last record's "
                    f"time {last_t}")


def _check_header(path: str, header: dict[str, Any]) -> None:
    """Budgets and weights of the fault plan are numbers, 0 or more; budgets are integers.

    Only the plan's numbers are checked: its other entries (per-service and
    per-process budgets, lists of names, flags) vary with the kernel's version.
    """
    if header["max_steps"] < 0:
        raise _fail(path, 1, f"max_steps {header['max_steps']} is negative")
    if "scenario_file" in header:
        problem = scenario_file_problem(header["scenario_file"])
        if problem is not None:
            raise _fail(path, 1, f"scenario_file {visible(repr(header['scenario_file'][:80]))} "
                        f"cannot be a scenario's file: {problem}")
    for key, value in header["faults"].items():
        if isinstance(value, bool) or not isinstance(value, _NUM):
            if key.startswith("max_"):
                raise _fail(path, 1, f"fault plan {key!r} is {value!r}; it must be an integer")
            continue
        if not math.isfinite(value) or value < 0:
            raise _fail(path, 1, f"fault plan {key!r} is {value!r}; it must be a number, "
                        "0 or more")
        if key.startswith("max_") and not isinstance(value, int):
            raise _fail(path, 1, f"fault plan {key!r} is {value!r}; it must be an integer")


def _no_constant(token: str) -> Any:
    raise ValueError(f"{token} is not allowed in a trace")
