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
import platform
from dataclasses import dataclass, field
from typing import Any

FORMAT = "dst-trace"
VERSION = 1


def canonical(value: object) -> str:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def record_to_dict(rec: tuple[Any, ...]) -> dict[str, Any]:
    """A kernel record tuple as its v1 JSON object."""
    kind = rec[0]
    if kind == "decision":
        return {"type": "decision", "step": rec[1], "t": rec[2], "kind": rec[3],
                "enabled": list(rec[4]), "chosen": rec[5]}
    if kind == "event":
        fields = json.loads(rec[5]) if isinstance(rec[5], str) else rec[5]
        return {"type": "event", "step": rec[1], "t": rec[2], "actor": rec[3],
                "event": rec[4], "fields": _json_safe(fields)}
    if kind == "fault":
        return {"type": "fault", "step": rec[1], "t": rec[2], "fault": rec[3],
                "target": rec[4], "detail": rec[5]}
    if kind == "violation":
        return {"type": "violation", "step": rec[1], "t": rec[2], "invariant": rec[3],
                "message": rec[4]}
    if kind == "check":
        return {"type": "check", "step": rec[1], "t": rec[2], "property": rec[3],
                "ok": rec[4], "message": rec[5]}
    raise ValueError(f"unknown record kind {kind!r}")


def _json_safe(value: Any) -> Any:
    """``value`` with NaN and infinities as strings: code under test may log them,
    canonical JSON cannot hold them, and a failing run must still get its trace."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def make_header(
    scenario: str, config: dict[str, Any], seed: int, strategy: str,
    faults: dict[str, Any], max_steps: int,
) -> dict[str, Any]:
    import trio

    from .. import __version__

    return {
        "type": "header", "format": FORMAT, "version": VERSION, "scenario": scenario,
        "config": config, "seed": seed, "strategy": strategy, "faults": faults,
        "max_steps": max_steps, "dst_version": __version__,
        "python": platform.python_version(), "trio": trio.__version__,
    }


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
