"""An ``eventually`` whose deadline comes after a virtual wait: runs cut before then
have not checked it."""

from __future__ import annotations

from typing import Any

from dst import Env, FaultPlan, Scenario, Sim

scenario = Scenario("late", doc="a flag raised after a timer",
                    faults=FaultPlan(preemptions=0))


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> Any:
    db = sim.store("db")

    async def main(env: Env) -> None:
        for i in range(4):
            await env.store.put(f"step/{i}", i)
        await env.clock.sleep(5)
        await env.store.put("flag", 1)

    sim.process("p", main, stores=["db"])
    return db


@scenario.eventually("Flagged", within=10)
def flagged(db: Any) -> Any:
    return db.peek("flag") == 1 or "the flag is not raised"
