"""Comparing a replay with the trace it replays, record by record.

The kernel stops a replay at the first decision whose enabled options differ
from the recorded ones (``Replay`` strategy).  A replay can also make the same
choices and still log something else: an event with other fields, a violation
with another message.  This module finds the first such record, so that both
kinds of divergence are reported the same way: ``diverged at step N: expected
<recorded line>, got <new line>``.
"""

from __future__ import annotations

from .model import Trace


def first_divergence(expected: Trace, got: Trace) -> str | None:
    """The first record where ``got`` differs from ``expected``, described; None if identical."""
    exp_lines, got_lines = expected.record_lines(), got.record_lines()
    for exp, act, rec in zip(exp_lines, got_lines, expected.records, strict=False):
        if exp != act:
            return f"diverged at step {rec['step']}: expected {exp}, got {act}"
    if len(exp_lines) > len(got_lines):
        rec = expected.records[len(got_lines)]
        return (f"diverged at step {rec['step']}: expected {exp_lines[len(got_lines)]}, "
                "got the end of the run")
    if len(got_lines) > len(exp_lines):
        rec = got.records[len(exp_lines)]
        return (f"diverged at step {rec['step']}: expected the end of the run, "
                f"got {got_lines[len(exp_lines)]}")
    return None
