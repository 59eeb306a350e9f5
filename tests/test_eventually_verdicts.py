"""``eventually`` verdicts: when the clock starts, the deadline's own instant, what is told.

Each test runs a scenario a user could write, through the runner or the command line,
and looks at the verdict, the violation's message or the story.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
import trio
from click.testing import CliRunner

from dst import Env, FaultPlan, Scenario, ServiceFaults, Sim
from dst.cli import main
from dst.runner.single import RunResult

from .simkit import many

NEVER = "the flag was never raised"


def _violation(result: RunResult) -> dict[str, Any]:
    (record,) = [r for r in result.trace().records if r["type"] == "violation"]
    return record


def _chose(result: RunResult, prefix: str) -> bool:
    return any(r["enabled"][r["chosen"]].startswith(prefix)
               for r in result.trace().records if r["type"] == "decision")


def _never_true(scenario: Scenario) -> Scenario:
    @scenario.eventually("Raised", within=5)
    def raised(_: Any) -> bool | str:
        return NEVER

    return scenario


# -- the clock starts even when a budget is never spent ------------------------------


def _sends_once_then_polls(plan: FaultPlan) -> Scenario:
    """One message, then the system polls its clock for ever: it never comes to rest,
    and a drop budget left after the message is delivered can never be spent."""
    scenario = Scenario("once", doc="one message, then polling", faults=plan)

    @scenario.setup
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def sender(env: Env) -> None:
            await env.net.send("receiver", {"n": 1})
            while True:
                await env.clock.sleep(1)

        async def receiver(env: Env) -> None:
            while True:
                await env.net.recv()

        sim.process("sender", sender)
        sim.process("receiver", receiver)

    return _never_true(scenario)


def test_a_drop_budget_never_spent_does_not_keep_a_false_property_from_failing() -> None:
    results = many(_sends_once_then_polls(FaultPlan(max_drops=1)), range(30))
    assert [r.violated for r in results] == [["Raised"]] * 30
    kept = [r for r in results if not _chose(r, "drop:")]
    assert kept, "some seeds deliver the message and keep their drop budget"
    for r in kept:
        # Faults stopped at the plan's calm_by (300 virtual seconds by default).
        message = _violation(r)["message"]
        assert "did not hold within 5s after the faults stopped (at 300.000" in message
        assert r.ended == "violation"


def test_calm_by_sets_when_faults_stop_at_the_latest() -> None:
    results = many(_sends_once_then_polls(FaultPlan(max_drops=1, calm_by=40.0)), range(30))
    kept = [r for r in results if not _chose(r, "drop:")]
    assert kept
    for r in kept:
        record = _violation(r)
        assert "after the faults stopped (at 40.000; waited until 45.000)" in record["message"]
        assert record["t"] == 45.0


def _polls_and_never_calls(plan: FaultPlan, *, register: bool = True) -> Scenario:
    scenario = Scenario("uncalled", doc="a service nobody calls", faults=plan)

    @scenario.setup
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        if register:
            sim.service("payments", lambda op, request: {"ok": True})

        async def poller(env: Env) -> None:
            while True:
                await env.store.get("x")
                await env.clock.sleep(1)

        sim.process("poller", poller, stores=["db"])

    return _never_true(scenario)


def test_a_service_fault_budget_of_a_service_nobody_calls_does_not_either() -> None:
    plan = FaultPlan(services={"payments": ServiceFaults(fail=1)})
    results = many(_polls_and_never_calls(plan), range(20))
    assert [r.violated for r in results] == [["Raised"]] * 20
    assert all("(at 300.000;" in _violation(r)["message"] for r in results)


def test_a_budget_nothing_in_the_run_can_spend_stops_the_faults_at_once() -> None:
    """No service is registered under the budget's name: no call can ever fail."""
    plan = FaultPlan(services={"payments": ServiceFaults(fail=1)})
    results = many(_polls_and_never_calls(plan, register=False), range(20))
    assert [r.violated for r in results] == [["Raised"]] * 20
    assert all("(at 0.000; waited until 5.000)" in _violation(r)["message"] for r in results)


def test_a_system_at_rest_is_judged_there_not_at_calm_by() -> None:
    scenario = Scenario("rests", doc="sends once and stops", faults=FaultPlan(max_drops=1))

    @scenario.setup
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def sender(env: Env) -> None:
            await env.clock.sleep(2)
            await env.net.send("receiver", 1)

        async def receiver(env: Env) -> None:
            while True:
                await env.net.recv()

        sim.process("sender", sender)
        sim.process("receiver", receiver)

    results = many(_never_true(scenario), range(20))
    assert [r.violated for r in results] == [["Raised"]] * 20
    for r in results:
        record = _violation(r)
        assert record["t"] == 2.0
        assert "came to rest at 2.000" in record["message"]


# -- work due at the deadline's instant runs before the verdict ----------------------


def _raised_at(t: float, how: str) -> Scenario:
    """Faults stop at 0 (no plan); the system's own timer raises the flag at ``t``."""
    scenario = Scenario("boundary", doc="a flag raised by a timer")

    @scenario.setup
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        flag: dict[str, bool] = {}

        async def main(env: Env) -> None:
            if how == "trio":
                await trio.sleep(t)
            else:
                await env.clock.sleep(t)
            if how == "store":  # more work at the same instant before the flag goes up
                await env.store.put("k", 1)
            flag["up"] = True
            while True:
                await env.clock.sleep(7)

        sim.process("p", main, stores=["db"])
        return flag

    @scenario.eventually("Up", within=10)
    def up(flag: dict[str, bool]) -> bool | str:
        return flag.get("up", False) or "the flag is down"

    return scenario


@pytest.mark.parametrize("how", ["clock", "trio", "store"])
@pytest.mark.parametrize("t", [9.999, 10.0])
def test_a_property_met_at_the_deadline_instant_holds(t: float, how: str) -> None:
    results = many(_raised_at(t, how), range(20))
    assert [r.verdict for r in results] == ["pass"] * 20
    assert {r.ended for r in results} == {"held"}


@pytest.mark.parametrize("how", ["clock", "trio"])
def test_a_property_met_after_the_deadline_fails_at_the_deadline(how: str) -> None:
    results = many(_raised_at(10.001, how), range(20))
    for r in results:
        record = _violation(r)
        assert record["invariant"] == "Up"
        assert record["t"] == 10.0
        assert record["message"] == ("Up did not hold within 10s after the faults stopped "
                                     "(at 0.000; waited until 10.000): the flag is down")


# -- what the violation and the story tell -------------------------------------------


SCENARIO = '''
import structlog
from dst import Scenario

log = structlog.get_logger()
scenario = Scenario("ticks", doc="a tick at the deadline that raises nothing")


@scenario.setup
def setup(sim, config):
    async def main(env):
        try:
            await env.clock.sleep(10)
            log.info("tick")
            await env.clock.sleep(100)
        finally:
            log.info("closing")

    sim.process("p", main)


@scenario.eventually("Ready", within=10)
def ready(world):
    return "still not ready"
'''

#: A story line as ``dst run`` and ``dst show`` print it: step, virtual time, actor.
_STORY_LINE = re.compile(r"^\s+\d+\s+\d\d:\d\d:\d\d\.\d{3}\s+\S")


def _after_violated(lines: list[str]) -> list[str]:
    at = [i for i, line in enumerate(lines) if "VIOLATED" in line]
    assert at, lines
    return [line for line in lines[at[0] + 1:] if _STORY_LINE.match(line)]


def _run(tmp_path: Path) -> tuple[list[str], list[Path]]:
    source = tmp_path / "ticks.py"
    source.write_text(textwrap.dedent(SCENARIO), encoding="utf-8")
    out = tmp_path / "out"
    ran = CliRunner().invoke(main, ["run", str(source), "--seeds", "3", "--out", str(out)])
    assert ran.exit_code == 1, ran.output
    traces = sorted(out.glob("*.jsonl"))
    assert traces
    return ran.stdout.splitlines(), traces


def _show(trace: Path) -> list[str]:
    shown = CliRunner().invoke(main, ["show", str(trace)])
    assert shown.exit_code == 0, shown.output
    return shown.stdout.splitlines()


def test_the_violation_tells_what_the_check_said(tmp_path: Path) -> None:
    lines, traces = _run(tmp_path)
    (violated,) = [line for line in lines if "VIOLATED" in line]
    assert violated.endswith(
        "VIOLATED Ready: Ready did not hold within 10s after the faults stopped "
        "(at 0.000; waited until 10.000): still not ready")
    for trace in traces:
        assert any(line.endswith(": still not ready") for line in _show(trace)
                   if "VIOLATED Ready" in line)


def test_nothing_is_told_after_the_violation(tmp_path: Path) -> None:
    lines, traces = _run(tmp_path)
    assert _after_violated(lines) == []
    told = [line for line in lines if _STORY_LINE.match(line)]
    assert any(line.rstrip().endswith("tick") for line in told)  # what ran at 10 is told
    for trace in traces:
        shown = _show(trace)
        assert _after_violated(shown) == []
        assert not any(line.rstrip().endswith("closing") for line in shown)  # unwinding
        assert shown[-1].startswith("verdict: fail (violated: Ready)")
