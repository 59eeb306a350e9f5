"""Reading and writing trace files, validating every field.

Loading a trace never executes anything from it (no pickle, no eval): it is
JSON, checked field by field against the v1 schema, and its footer hash must
match its content.  Anything else is a :class:`TraceFormatError` with one line
that says what is wrong and where.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import TraceFormatError
from .model import FORMAT, VERSION, Trace, canonical

#: Longest line a reader accepts.  A decision with hundreds of enabled options
#: stays far below it; a 50 MB line is a corrupt or hostile file, refused before
#: it is held in memory.
MAX_LINE_BYTES = 4 * 1024 * 1024

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
    extra = set(obj) - set(_SCHEMA[kind]) - {"type"}
    if extra:
        raise _fail(path, n, f"{kind} record has unknown field(s) {sorted(extra)}")
    if kind == "decision":
        enabled = obj["enabled"]
        if not enabled or not all(isinstance(x, str) for x in enabled):
            raise _fail(path, n, "decision 'enabled' must be a non-empty list of labels")
        if not 0 <= obj["chosen"] < len(enabled):
            raise _fail(path, n, "decision 'chosen' is not an index into 'enabled'")


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


def _parse(name: str, raw_lines: Iterator[bytes]) -> Trace:
    objs: list[dict[str, Any]] = []
    lines: list[str] = []
    for n, raw in enumerate(raw_lines, start=1):
        if len(raw) > MAX_LINE_BYTES:
            raise _fail(name, n, f"line longer than {MAX_LINE_BYTES // (1024 * 1024)} MB; "
                        "this is not a dst trace")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _fail(name, n, "not UTF-8; a dst trace is UTF-8 JSON Lines") from None
        if not text.endswith("\n"):
            raise _fail(name, n, "last line is cut short; the trace is truncated")
        text = text[:-1]
        try:
            obj = json.loads(text, parse_constant=_no_constant)
        except (json.JSONDecodeError, ValueError):
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
                    f"recorded ({', '.join(violated) or 'none'})")
    if records and footer["steps"] < records[-1]["step"]:
        raise _fail(path, n, f"footer says {footer['steps']} steps, "
                    f"but a record has step {records[-1]['step']}")


def _no_constant(token: str) -> Any:
    raise ValueError(f"{token} is not allowed in a trace")
