"""The trace model (format v1) and its canonical encoding.

A trace is a header, the run's records in order, and a footer whose ``sha256``
covers every line before it and the footer's own other fields (so that an edited
verdict is caught as surely as an edited record).  Lines are canonical JSON (sorted keys, compact,
UTF-8, no NaN), so two runs that made the same choices produce the same bytes,
and a hash comparison is a byte comparison.  ``docs/trace-format.md`` is the
schema.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import re
from dataclasses import dataclass, field
from typing import Any

from ..launcher import current_hash_seed as current_hash_seed  # needed before dst loads
from .escape import SURROGATE, paired, visible

FORMAT = "dst-trace"
VERSION = 2

#: Kinds of ``decision``: a scheduling choice, or a fake's ``Sim.choose``.
DECISION_KINDS = frozenset({"schedule", "data"})

#: Kinds of ``fault`` the kernel records.  The reader refuses any other, so a kernel
#: that records a new kind adds it here (and to docs/trace-format.md) in the same change.
FAULT_KINDS = frozenset({
    "crash",    # a process crashed
    "restart",  # a crashed process started again (detail: its incarnation)
    "refused",  # a crashed process tried to touch the world
    "stale",    # a call made by an earlier incarnation of a restarted process, refused
    "drop",     # a message was dropped
    "dup",      # a message was duplicated
    "lost",     # a message was delivered to a process that is down
    "partition",    # a process was cut off from the network (detail: until when)
    "heal",         # the partition healed
    "partitioned",  # a message sent across the partition was lost
    "service",      # a service call failed, lost its reply, ran twice or replied late
    "tcp",          # a TCP connection was reset, delayed, cut or closed by a crash
    "slow",         # a timer fired while other work could run (target: the timer)
})

#: Why a run ended (the footer's ``ended``).
ENDINGS = frozenset({"quiescent", "violation", "bound", "diverged", "error", "held"})

#: Deepest nesting of arrays and objects a trace line may hold, the line's own
#: object included.  Real records nest four or five levels; the bound keeps a hostile
#: line from exhausting the parser's stack, and the writer folds anything deeper
#: (see :func:`record_to_dict`) so that every trace written can be read back.
MAX_DEPTH = 64

#: What the writer puts in place of a value nested deeper than :data:`MAX_DEPTH`.
TOO_DEEP = f"<nested deeper than {MAX_DEPTH} levels>"

#: Containers around an event's ``fields`` object: the record object.
_FIELDS_DEPTH = 1


def _dumps(value: object) -> str:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def canonical(value: object) -> str:
    """``value`` as one canonical JSON line, which always encodes as UTF-8.

    A string may hold surrogates (code under test logging ``"\\ud800"``, broken
    UTF-16 from a supplier's e-mail): JSON written ``ensure_ascii=False`` would
    keep them raw, and no UTF-8 file can.  So a line that holds one is written
    again with each surrogate pair joined into its character (as a JSON reader
    would join its escapes) and each lone surrogate as the escape ``\\ud800``,
    which reads back as the same string: a replay then compares equal, and a
    line without surrogates keeps its bytes.
    """
    text = _dumps(value)
    if text.isascii() or SURROGATE.search(text) is None:  # isascii: a flag, no scan
        return text
    return SURROGATE.sub(_escaped, _dumps(_paired(value)))


def _escaped(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def _paired(value: Any) -> Any:
    """``value`` with :func:`~dst.trace.escape.paired` applied to every string, keys too."""
    if isinstance(value, str):
        return paired(value) if SURROGATE.search(value) else value
    if isinstance(value, dict):
        return {_paired(k): _paired(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_paired(v) for v in value]
    return value


def record_to_dict(rec: tuple[Any, ...]) -> dict[str, Any]:
    """A kernel record tuple as its v1 JSON object.

    A violation tuple may carry a sixth element, the user's frames of the uncaught
    exception behind it (``"file:line in func"``, innermost last): written as the
    optional ``frames`` field when there are any.
    """
    kind = rec[0]
    if kind == "decision":
        return {"type": "decision", "step": rec[1], "t": rec[2], "kind": rec[3],
                "enabled": list(rec[4]), "chosen": rec[5]}
    if kind == "event":
        fields = json.loads(rec[5]) if isinstance(rec[5], str) else rec[5]
        return {"type": "event", "step": rec[1], "t": rec[2], "actor": rec[3],
                "event": rec[4], "fields": _json_safe(fields, _FIELDS_DEPTH)}
    if kind == "fault":
        return {"type": "fault", "step": rec[1], "t": rec[2], "fault": rec[3],
                "target": rec[4], "detail": rec[5]}
    if kind == "violation":
        out: dict[str, Any] = {"type": "violation", "step": rec[1], "t": rec[2],
                               "invariant": rec[3], "message": rec[4]}
        if len(rec) > 5 and rec[5]:
            out["frames"] = [str(frame) for frame in rec[5]]
        return out
    if kind == "check":
        return {"type": "check", "step": rec[1], "t": rec[2], "property": rec[3],
                "ok": rec[4], "message": rec[5]}
    raise ValueError(f"unknown record kind {kind!r}")


def _json_safe(value: Any, depth: int = 0) -> Any:
    """``value`` with NaN and infinities as strings, and containers nested deeper than
    :data:`MAX_DEPTH` (counting the ``depth`` levels around it) as :data:`TOO_DEEP`:
    code under test may log either, the reader refuses both, and a failing run must
    still get a trace that reads back."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, (dict, list)):
        if depth >= MAX_DEPTH:
            return TOO_DEEP
        if isinstance(value, dict):
            return {k: _json_safe(v, depth + 1) for k, v in value.items()}
        return [_json_safe(v, depth + 1) for v in value]
    return value


def make_header(
    scenario: str, config: dict[str, Any], seed: int, strategy: str,
    faults: dict[str, Any], max_steps: int, scenario_file: str | None = None,
) -> dict[str, Any]:
    """A trace's header; ``scenario_file`` (:func:`scenario_file`) only when given, so
    the header of a shipped scenario's trace is what it always was."""
    import trio

    from .. import __version__

    header = {
        "type": "header", "format": FORMAT, "version": VERSION, "scenario": scenario,
        "config": config, "seed": seed, "strategy": strategy, "faults": faults,
        "max_steps": max_steps, "dst_version": __version__,
        "python": platform.python_version(), "trio": trio.__version__,
        "hash_seed": current_hash_seed(),
    }
    if scenario_file is not None:
        header["scenario_file"] = scenario_file
    return header


#: The longest ``scenario_file`` a header holds.
MAX_SCENARIO_FILE = 4096
_DRIVE = re.compile(r"[A-Za-z]:")


def scenario_file_problem(path: str) -> str | None:
    """Why ``path`` cannot be a header's ``scenario_file``, or None when it can: a
    relative path of a ``.py`` file, printable as it is, at most 4,096 characters."""
    if not path.endswith(".py"):
        return "it does not name a .py file"
    if len(path) > MAX_SCENARIO_FILE:
        return f"it is longer than {MAX_SCENARIO_FILE:,} characters"
    if path.startswith(("/", "\\")) or _DRIVE.match(path):
        return "it is not a relative path"
    if visible(path) != path:
        return "it holds control characters"
    return None


def scenario_file(ref: str | None) -> str | None:
    """What a header records of the scenario ``ref`` names: for a ``.py`` file (or a
    ``@dst.test`` in one, ``FILE.py::NAME``: the file), its path relative to the
    working directory (where ``dst run`` ran, so that a replay command run there finds
    it); None for a shipped name or a module, and for a path no header could hold
    (:func:`scenario_file_problem`)."""
    if ref is not None:
        ref = ref.partition("::")[0]
    if ref is None or not ref.endswith(".py"):
        return None
    try:
        shown = os.path.relpath(ref)
    except ValueError:  # another drive (Windows): no relative path leads there
        return None
    return shown if scenario_file_problem(shown) is None else None


@dataclass
class Trace:
    header: dict[str, Any]
    records: list[dict[str, Any]]
    footer: dict[str, Any] = field(default_factory=dict)

    def body_lines(self) -> list[str]:
        return [canonical(self.header)] + [canonical(r) for r in self.records]

    def record_lines(self) -> list[str]:
        return [canonical(r) for r in self.records]

    def _unsealed_footer(self) -> dict[str, Any]:
        footer = {k: v for k, v in self.footer.items() if k != "sha256"}
        footer["type"] = "footer"
        return footer

    def sha256(self) -> str:
        """SHA-256 of every line but the footer, then of the footer without its hash.

        Each line is hashed as its canonical UTF-8 bytes plus ``\\n``; the last
        "line" hashed is the canonical footer object with ``sha256`` left out.
        """
        h = hashlib.sha256()
        for line in self.body_lines():
            h.update(line.encode("utf-8"))
            h.update(b"\n")
        h.update(canonical(self._unsealed_footer()).encode("utf-8"))
        h.update(b"\n")
        return h.hexdigest()

    def text(self) -> str:
        lines = self.body_lines()
        footer = self._unsealed_footer()
        footer["sha256"] = self.sha256()
        lines.append(canonical(footer))
        return "\n".join(lines) + "\n"

    @property
    def decisions(self) -> list[tuple[list[str], int]]:
        return [(r["enabled"], r["chosen"]) for r in self.records if r["type"] == "decision"]

    @property
    def violated(self) -> list[str]:
        return list(self.footer.get("violated", []))
