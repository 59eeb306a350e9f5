"""Comparing a replay with the trace it replays, record by record.

The kernel stops a replay at the first decision whose enabled options differ
from the recorded ones (``Replay`` strategy).  That is often not where the run
first went another way: code that logged a different value and then branched on
it shows the difference in its event first, and in the enabled options only a
step or more later.  A replay can also make the same choices and still log
something else (an event with other fields, a violation with another message).
So both kinds of divergence are reported at the first record that differs:
``diverged at step N (record K): expected <recorded>, got <new>``, where K counts
the records after the header (the trace's line K + 1); the kernel's own
report stands only when every record before the step it stopped at is identical.

Every description passes through :func:`~dst.trace.escape.visible`: the records
come from a file and from code under test, and are printed on a terminal.
"""

from __future__ import annotations

from typing import Any

from .escape import visible
from .model import Trace, canonical


def _describe(rec: dict[str, Any]) -> str:
    return f"{rec['type']} {canonical({k: v for k, v in rec.items() if k != 'type'})}"


def _first_difference(expected: list[dict[str, Any]], got: list[dict[str, Any]],
                      end: str) -> tuple[int, str] | None:
    """(index, description) of the first record that differs, or None."""
    for i, (exp, act) in enumerate(zip(expected, got, strict=False)):
        if canonical(exp) != canonical(act):
            return i, f"expected {_describe(exp)}, got {_describe(act)}"
    if len(got) > len(expected):
        return len(expected), f"expected {end}, got {_describe(got[len(expected)])}"
    if len(expected) > len(got):
        return len(got), f"expected {_describe(expected[len(got)])}, got the end of the run"
    return None


def _at(records: list[dict[str, Any]], index: int, fallback: list[dict[str, Any]]) -> str:
    rec = records[index] if index < len(records) else fallback[index]
    return f"diverged at step {rec['step']} (record {index + 1})"


def first_divergence(expected: Trace, got: Trace) -> str | None:
    """The first record where ``got`` differs from ``expected``, described; None if identical."""
    found = _first_difference(expected.records, got.records, "the end of the run")
    if found is None:
        return None
    index, what = found
    return visible(f"{_at(expected.records, index, got.records)}: {what}")


def replay_divergence(expected: Trace, got: Trace, scheduling: str | None = None) -> str | None:
    """How a replay differs from its trace, at the first differing record; None if identical.

    ``scheduling`` is the kernel's description of the decision at which the
    replay stopped because its options no longer fitted the trace (None when it
    ran to its end).  That decision is the first step the replay did not record;
    records stamped with it were written while the stopped run unwound and are
    not compared.  An earlier record that differs is reported instead of the
    scheduling divergence, since it happened first.
    """
    if scheduling is None:
        return first_divergence(expected, got)
    recorded = {r["step"] for r in got.records if r["type"] == "decision"}
    stopped_at = 1
    while stopped_at in recorded:
        stopped_at += 1
    before = [r for r in expected.records if r["step"] < stopped_at]
    produced = [r for r in got.records if r["step"] < stopped_at]
    rest = expected.records[len(before):]
    end = _describe(rest[0]) if rest else "the end of the run"
    found = _first_difference(before, produced, end)
    if found is None:
        return visible(scheduling)
    index, what = found
    if index >= len(produced):  # a record the replay never wrote before it stopped
        what = f"expected {_describe(before[index])}, got none (then {scheduling})"
    return visible(f"{_at(before, index, produced)}: {what}")
