"""The shipped pydantic-ai agent: a real ``pydantic_ai.Agent`` with its own
``FunctionModel``, two tool calls in one response, run unmodified as an asyncio
process; a retried call that charges twice is found, every failure replays exactly,
and every seed repeats itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dst.cli import main
from dst.testing import SeedFailed, check_seeds

pytest.importorskip("pydantic_ai")


def test_the_idempotent_agent_passes_every_seed(tmp_path: Path) -> None:
    checked = check_seeds("agent_pydantic_ai", 40, out=tmp_path)
    assert checked.runs == 40 and not checked.bounded


def test_a_retried_tool_call_charging_twice_is_found_and_replays_identically(
        tmp_path: Path) -> None:
    with pytest.raises(SeedFailed) as failed:
        check_seeds("agent_pydantic_ai", 40, out=tmp_path, idempotent=False)
    assert "ChargedOnce" in str(failed.value) and "charged 2 times" in str(failed.value)
    replayed = CliRunner().invoke(main, ["replay", str(failed.value.path)])
    assert replayed.exit_code == 1 and replayed.output.startswith("identical"), \
        replayed.output


def test_every_seed_of_the_agent_repeats_itself(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, [
        "run", "agent_pydantic_ai", "-c", "idempotent=false", "--seeds", "8",
        "--check-determinism", "--workers", "1", "--no-shrink", "--out", str(tmp_path),
        "--json"])
    doc = json.loads(result.stdout)
    assert result.exit_code == 1, result.output  # 3 would be a seed that did not repeat
    assert doc["nondeterministic"] == [] and set(doc["by_invariant"]) == {"ChargedOnce"}


def test_the_model_asks_for_two_tools_in_one_response_and_both_run_as_tasks() -> None:
    """The two calls of one response are two asyncio tasks of the agent, each an env call
    the kernel schedules: the run's choices name both."""
    from dst.registry import load
    from dst.runner.single import run_one

    scenario = load("agent_pydantic_ai")
    result = run_one(scenario, scenario.config(), 0)
    assert result.verdict == "pass", result.violated
    enabled = {label for r in result.trace().records if r["type"] == "decision"
               for label in r["enabled"]}
    assert {"customer/place_order@call:payments.charge",
            "customer/place_order#2@call:payments.charge"} <= enabled
    answer = result.sim.stores["answers"].peek("answer/order-7")
    assert answer == "A-1: charged 1200; B-2: charged 900"
