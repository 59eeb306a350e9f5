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

pytest.importorskip("pydantic_ai")


def run(*args: str, tmp: Path) -> tuple[int, dict[str, object]]:
    result = CliRunner().invoke(main, ["run", "agent_pydantic_ai", *args, "--out", str(tmp),
                                       "--json"])
    return result.exit_code, json.loads(result.stdout)


def test_the_idempotent_agent_passes_every_seed(tmp_path: Path) -> None:
    code, doc = run("--seeds", "30", "--check-determinism", tmp=tmp_path)
    assert code == 0 and doc["failures"] == [], doc


def test_a_retried_tool_call_charging_twice_is_found_and_replays_identically(
        tmp_path: Path) -> None:
    code, doc = run("-c", "idempotent=false", "--seeds", "20", "--check-determinism",
                    tmp=tmp_path)
    assert code == 1, doc
    failures = doc["failures"]
    assert isinstance(failures, list) and failures
    assert {v for f in failures for v in f["violated"]} == {"ChargedOnce"}
    for failure in failures:
        replayed = CliRunner().invoke(main, ["replay", failure["trace"]])
        assert replayed.exit_code == 1 and replayed.output.startswith("identical"), \
            replayed.output


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
