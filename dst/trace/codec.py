"""Reading and writing trace files, validating every field.

Loading a trace never executes anything from it (no pickle, no eval): it is
JSON, checked field by field against the v1 schema, and its footer hash must
match its content.  Anything else is a :class:`TraceFormatError` with one line
that says what is wrong and where.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..errors import TraceFormatError
from .model import FORMAT, VERSION, Trace

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
    objs: list[dict[str, Any]] = []
    lines: list[str] = []
    with fh:
        n = 0
        while True:
            raw = fh.readline(MAX_LINE_BYTES + 1)
            if not raw:
                break
            n += 1
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
            objs.append(obj)
            lines.append(text)
    if not objs:
        raise TraceFormatError(f"{name}: empty file; a dst trace starts with a header line")
    header = objs[0]
    if header.get("format") != FORMAT:
        raise _fail(name, 1, f"not a dst trace (format is {header.get('format')!r}, "
                    f"expected {FORMAT!r})")
    if header.get("version") != VERSION:
        raise _fail(name, 1, f"trace format version {header.get('version')!r}; this dst "
                    f"(format version {VERSION}) reads only version {VERSION} traces")
    if header.get("type") != "header":
        raise _fail(name, 1, "first line is not a header record")
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
    trace = Trace(header, records, {k: v for k, v in footer.items() if k != "type"})
    if "\n".join(lines[:-1]) + "\n" != "".join(line + "\n" for line in trace.body_lines()):
        raise TraceFormatError(f"{name}: lines are not in canonical form; the trace was edited")
    if trace.sha256() != footer["sha256"]:
        raise TraceFormatError(f"{name}: sha256 does not match the content; the trace was edited")
    return trace


def _no_constant(token: str) -> Any:
    raise ValueError(f"{token} is not allowed in a trace")
