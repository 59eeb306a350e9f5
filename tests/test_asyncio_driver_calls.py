"""A store call of an asyncio process made while its loop has nothing else to do.

The loop's driver makes such a call itself, parked at the kernel's choice point
under the label of the asyncio task that made it.  Whatever wakes the loop from
outside meanwhile (here a trio process resolving one of its futures) runs at
once, as it would while the driver waited, and the call stays parked, under the
same label, until the kernel chooses it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from dst import Env, FaultPlan, Sim

from .simkit import events, inline, many

log = structlog.get_logger()


class _World:
    fut: asyncio.Future[str] | None = None


def _setup(sim: Sim, config: dict[str, Any]) -> _World:
    world = _World()
    sim.store("db")

    async def app(env: Env) -> None:
        world.fut = asyncio.get_running_loop().create_future()

        async def waiter() -> None:
            assert world.fut is not None
            log.info("woken", value=await world.fut)

        task = asyncio.create_task(waiter())
        await asyncio.sleep(0)  # the waiter now waits on the future
        log.info("read", value=await env.store.get("k"))  # nothing else of the loop is ready
        await task

    async def poker(env: Env) -> None:
        await env.store.put("k", 1)
        assert world.fut is not None
        world.fut.set_result("poked")  # from outside the loop's callbacks
        log.info("poked")

    sim.process("a", app, stores=["db"], runtime="asyncio")
    sim.process("b", poker, stores=["db"])
    return world


def _decisions(result: Any) -> list[tuple[list[str], int]]:
    return [(r["enabled"], r["chosen"]) for r in result.trace().records
            if r["type"] == "decision"]


def _steps(result: Any) -> dict[str, int]:
    return {r["event"]: r["step"] for r in result.trace().records if r["type"] == "event"}


def test_a_loop_woken_while_its_store_call_is_parked_runs_the_wake_up_at_once() -> None:
    both = ["a@db.get(k)", "b@db.put(k)"]  # a's loop has nothing else to do
    for preemptions in (0, 2):
        results = many(inline(_setup, faults=FaultPlan(preemptions=preemptions)), range(40))
        assert {r.verdict for r in results} == {"pass"}
        chosen = set()
        for r in results:
            decisions = _decisions(r)
            at = next((i for i, (enabled, _) in enumerate(decisions) if enabled == both), None)
            if at is None:
                continue  # b's call was chosen before a's was parked
            steps = _steps(r)
            assert steps["woken"] == steps["poked"]
            chosen.add(decisions[at][1])
            if decisions[at][1] == 1:
                # The waiter runs in the step that resolved its future, before the call
                # is performed; the call is still the same option, made by the same task.
                assert steps["poked"] == at + 1
                assert decisions[at + 1][0] == ["a@db.get(k)"]
                assert ("a", "read", {"value": 1}) in events(r)
            else:
                assert ("a", "read", {"value": None}) in events(r)
        assert chosen == {0, 1}


def test_runs_with_a_parked_driver_call_repeat_record_for_record() -> None:
    scenario = inline(_setup, faults=FaultPlan(preemptions=2, max_crashes=1, crash_weight=2.0))
    first = many(scenario, range(30))
    again = many(scenario, range(30))
    assert [r.trace().records for r in first] == [r.trace().records for r in again]
    assert any(rec["type"] == "fault" for r in first for rec in r.trace().records)
