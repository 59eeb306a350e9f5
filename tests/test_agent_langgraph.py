"""LangGraph under dst, as a user would test it: a ``StateGraph`` with an ``InMemorySaver``
checkpointer, an approval node that charges and calls ``interrupt()``, resumed with
``Command(resume=...)`` (the scenario is ``tests/langgraph_approval.py``).

The node restarted from its first line on resume, and two resumes racing, each charge
twice and are found; the correct designs pass; every failure replays exactly, and
every seed repeats itself under another hash seed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from dst.cli import main
from dst.testing import SeedFailed, check_seeds

pytest.importorskip("langgraph")

SCENARIO = str(Path(__file__).with_name("langgraph_approval.py"))


@pytest.mark.parametrize("switches", [
    {},
    {"effect": "before", "idempotent": True},
    {"resumers": 2, "idempotent": True},
], ids=["charge-after-interrupt", "charge-before-with-key", "two-resumes-with-key"])
def test_the_correct_approval_nodes_charge_once(switches: dict[str, Any],
                                                tmp_path: Path) -> None:
    checked = check_seeds(SCENARIO, 25, out=tmp_path, **switches)
    assert checked.runs == 25 and not checked.bounded


@pytest.mark.parametrize("switches", [{"effect": "before"}, {"resumers": 2}],
                         ids=["node-restarted-on-resume", "two-resumes-race"])
def test_a_double_charge_is_found_and_its_failure_replays_identically(
        switches: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(SeedFailed) as failed:
        check_seeds(SCENARIO, 25, out=tmp_path, **switches)
    assert "ChargedOnce" in str(failed.value)
    assert "was charged 2 times" in str(failed.value)
    replayed = CliRunner().invoke(main, ["replay", str(failed.value.path), "--scenario", SCENARIO])
    assert replayed.exit_code == 1 and replayed.output.startswith("identical"), \
        replayed.output


def test_every_seed_of_the_racing_resumes_repeats_itself(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, [
        "run", SCENARIO, "-c", "resumers=2", "--seeds", "4", "--check-determinism",
        "--workers", "1", "--no-shrink", "--out", str(tmp_path), "--json"])
    doc = json.loads(result.stdout)
    assert result.exit_code == 1, result.output  # 3 would be a seed that did not repeat
    assert doc["nondeterministic"] == [] and doc["by_invariant"] == {"ChargedOnce": 4}
