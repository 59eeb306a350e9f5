"""A crash between two writes: the process restarts, sees the first and skips the second.

Its fault plan allows one crash, so ``dst run`` finds the torn pair; ``dst explore``
must too, with no flag (its bounds default to the plan).
"""

from __future__ import annotations

from typing import Any

from dst import Env, FaultPlan, Scenario, Sim

scenario = Scenario("crash_between", doc="a pair of writes torn by a crash",
                    faults=FaultPlan(max_crashes=1, preemptions=0))


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> Any:
    db = sim.store("db")

    async def main(env: Env) -> None:
        if await env.store.get("a") is None:
            await env.store.put("a", 1)
            await env.store.put("b", 1)

    sim.process("p", main, stores=["db"])
    return db


@scenario.at_end("BothOrNeither")
def both_or_neither(db: Any) -> Any:
    return (db.peek("a") is None) == (db.peek("b") is None) or "a is written, b is not"
