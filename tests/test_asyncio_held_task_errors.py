"""A failed asyncio task the process still holds, when the run ends before its main returns.

asyncio reports a task's exception nobody retrieved when the task is collected
("Task exception was never retrieved"); a task kept in a variable of a ``main``
that never returns is collected only when the program ends.  dst ends the
program: at rest (a ``Deadlock`` or not), at the step bound, once every
``eventually`` held; there such a task is the run's ``NoUncaughtError``, named
by the task and the user's line, as when ``main`` returns.  A task whose
exception was retrieved, or is on its way to its awaiter, or whose process
crashed, is not reported.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import structlog

from dst import Env, FaultPlan, Scenario, Sim
from dst.runner.single import RunResult, replay_trace, run_one, run_seeds
from dst.trace.codec import loads_trace

log = structlog.get_logger()


def _scenario(main: Any, *, max_steps: int = 5000, faults: FaultPlan | None = None,
              **process: Any) -> Scenario:
    scenario = Scenario("held_task", doc="an asyncio process holding a task",
                        max_steps=max_steps, **({"faults": faults} if faults else {}))

    @scenario.setup
    def setup(sim: Sim, config: dict[str, Any]) -> Any:
        db = sim.store("db")
        sim.process("p", main, stores=["db"], runtime="asyncio", **process)
        return db

    return scenario


def _violations(result: RunResult) -> list[str]:
    return [str(r["message"]) for r in result.trace().records if r["type"] == "violation"]


def _replays_identically(scenario: Scenario, result: RunResult) -> None:
    written = loads_trace(result.trace().text())
    replayed = replay_trace(scenario, written)
    assert replayed.divergence is None, replayed.divergence
    assert replayed.trace().record_lines() == written.record_lines()


async def _worker(env: Env) -> None:
    await env.store.put("started", 1)
    raise ValueError("the worker failed")


_FOUND = "p/_worker raised ValueError: the worker failed at test_asyncio_held_task_errors.py:"


async def _waits_for_ever(env: Env) -> None:
    task = asyncio.create_task(_worker(env))
    await asyncio.Event().wait()
    log.info("never", task=task)


@pytest.mark.parametrize("idle", [False, True])
def test_a_failed_task_held_while_main_waits_for_ever_is_an_uncaught_error(idle: bool) -> None:
    """Not the ``Deadlock`` of the main task (its likely effect), nor a pass when the
    process is idle: the task's error, at its own line."""
    scenario = _scenario(_waits_for_ever, idle=idle)
    result = run_one(scenario, scenario.config(), 0)
    assert result.violated == ["NoUncaughtError"]
    [message] = _violations(result)
    assert message.startswith(_FOUND) and message.endswith(" in _worker")
    _replays_identically(scenario, result)


async def _serves_for_ever(env: Env) -> None:
    task = asyncio.create_task(_worker(env))
    while True:
        await asyncio.sleep(1)
        await env.store.put("tick", task.done())


def test_a_failed_task_held_when_the_run_ends_at_its_step_bound_is_an_uncaught_error() -> None:
    scenario = _scenario(_serves_for_ever, max_steps=40)
    results: list[RunResult] = []
    run_seeds(scenario, scenario.config(), range(5), results.append)
    for result in results:
        assert result.violated == ["NoUncaughtError"]
        assert result.trace().footer["steps"] == 40  # found at the bound, not before
        [message] = _violations(result)
        assert message.startswith(_FOUND)
        _replays_identically(scenario, result)


def test_a_failed_task_held_when_every_eventually_held_is_an_uncaught_error() -> None:
    """A system that never rests ends once its ``eventually`` properties hold: that end
    is the program's too."""
    scenario = _scenario(_serves_for_ever)

    @scenario.eventually("Ticked", within=10)
    def ticked(world: Any) -> bool:
        return bool(world.peek("tick"))

    result = run_one(scenario, scenario.config(), 0)
    assert result.violated == ["NoUncaughtError"]
    assert _violations(result)[0].startswith(_FOUND)
    _replays_identically(scenario, result)


def test_a_failed_task_of_a_process_that_crashed_is_not_reported() -> None:
    """A crash ends the incarnation as a killed program ends: nothing it held is
    reported.  The restarted incarnation's worker finds its mark and does not fail."""

    async def worker(env: Env) -> None:
        if await env.store.get("failed") is None:
            await env.store.put("failed", 1)
            log.info("failing")
            raise ValueError("the worker failed")

    async def main(env: Env) -> None:
        task = asyncio.create_task(worker(env))
        await asyncio.Event().wait()
        log.info("never", task=task)

    scenario = _scenario(main, idle=True, faults=FaultPlan(max_crashes=1, crash_weight=0.3))
    results: list[RunResult] = []
    run_seeds(scenario, scenario.config(), range(40), results.append)
    after = 0
    for result in results:
        records = result.trace().records
        failed = next((i for i, r in enumerate(records)
                       if r["type"] == "event" and r["event"] == "failing"), None)
        crash = next((i for i, r in enumerate(records)
                      if r["type"] == "fault" and r["fault"] == "crash"), None)
        if crash is not None and failed is not None and failed < crash:
            after += 1
            assert result.violated == [], _violations(result)
            _replays_identically(scenario, result)
    assert after > 10
    # Without the crash, the same run is a finding.
    scenario = _scenario(main, idle=True)
    result = run_one(scenario, scenario.config(), 0)
    assert result.violated == ["NoUncaughtError"]
    assert _violations(result)[0].startswith("p/worker raised ValueError: the worker failed")


def test_a_task_whose_exception_was_retrieved_or_that_was_cancelled_is_not_reported() -> None:
    async def retrieves(env: Env) -> None:
        task = asyncio.create_task(_worker(env))
        await asyncio.sleep(1)
        log.info("retrieved", error=repr(task.exception()))
        await asyncio.Event().wait()

    async def cancels(env: Env) -> None:
        task = asyncio.create_task(_worker(env))
        task.cancel()
        await asyncio.Event().wait()

    for main in (retrieves, cancels):
        scenario = _scenario(main, idle=True)
        result = run_one(scenario, scenario.config(), 0)
        assert result.violated == [] and result.ended == "quiescent"


def test_an_exception_on_its_way_to_the_tasks_awaiter_at_the_step_bound_is_not_reported() -> None:
    """The bound may fall after the task failed and before its awaiter's wake-up ran:
    the awaiter would have had it, so it is no finding (at every bound, every seed)."""

    async def main(env: Env) -> None:
        task = asyncio.create_task(_worker(env))
        try:
            await task
        except ValueError:
            log.info("handled")
        await env.store.put("after", 1)

    for bound in range(1, 8):
        scenario = _scenario(main, max_steps=bound)
        results: list[RunResult] = []
        run_seeds(scenario, scenario.config(), range(20), results.append)
        assert all(r.violated == [] for r in results), bound
