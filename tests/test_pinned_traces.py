"""The pinned traces in traces/ replay byte for byte, with the verdict they recorded.

They are checked through dst's public test API (``dst.testing``), exactly as a
project's own pins are; pins made with ``dst pin`` (traces/regressions/) are
collected by dst's pytest plugin instead.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dst.testing import Pin, check_pinned, pinned_traces
from dst.trace.codec import read_trace

PINNED = pinned_traces(Path(__file__).parent.parent / "traces")


def test_the_corpus_is_not_empty() -> None:
    assert len(PINNED) >= 5


@pytest.mark.parametrize("pin", PINNED, ids=[p.path.name for p in PINNED])
def test_a_pinned_trace_replays_identically(pin: Pin) -> None:
    held = check_pinned(pin)
    violated = read_trace(pin.path).violated
    assert held.endswith(f"({', '.join(violated) or 'no invariant'} violated again)")
