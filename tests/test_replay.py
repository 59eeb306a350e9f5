"""Exact replay: every failing trace re-runs byte for byte, through the file format too."""

from __future__ import annotations

from pathlib import Path

import pytest

from dst.registry import load
from dst.runner.single import replay_trace
from dst.trace.codec import read_trace, write_trace

from .simkit import many


@pytest.mark.parametrize(("name", "bug"), [("counter", {"cas": "false"}),
                                           ("ping", {"dedup": "false"})])
def test_every_failing_trace_replays_byte_identically(
    name: str, bug: dict[str, str], tmp_path: Path
) -> None:
    scenario = load(name)
    failing = [r for r in many(scenario, range(150), scenario.config(bug)) if r.verdict == "fail"]
    assert len(failing) > 50
    for result in failing:
        original = result.trace()
        path = write_trace(original, tmp_path / f"{name}-{result.seed}.jsonl")
        loaded = read_trace(path)
        replayed = replay_trace(scenario, loaded)
        assert replayed.divergence is None
        assert replayed.trace().record_lines() == original.record_lines()
        assert replayed.violated == result.violated


def test_passing_traces_with_crashes_drops_and_duplicates_replay_too() -> None:
    scenario = load("ping")
    results = many(scenario, range(100))
    faulty = [r for r in results
              if {x[3] for x in r.sim.records if x[0] == "fault"} >= {"crash", "restart"}]
    assert faulty, "the default ping fault plan should crash and restart some runs"
    for result in faulty:
        replayed = replay_trace(scenario, result.trace())
        assert replayed.trace().record_lines() == result.trace().record_lines()
