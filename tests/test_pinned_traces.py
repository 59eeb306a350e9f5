"""The pinned traces in traces/ replay byte for byte, with the verdict they recorded."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from dst.cli import main
from dst.trace.codec import read_trace

PINNED = sorted((Path(__file__).parent.parent / "traces").glob("*.jsonl"))


def test_the_corpus_is_not_empty() -> None:
    assert len(PINNED) >= 5


@pytest.mark.parametrize("path", PINNED, ids=[p.name for p in PINNED])
def test_a_pinned_trace_replays_identically(path: Path) -> None:
    recorded = read_trace(path)
    result = CliRunner().invoke(main, ["replay", str(path)])
    assert "identical" in result.output, result.output
    assert result.exit_code == (1 if recorded.footer["verdict"] == "fail" else 0)
