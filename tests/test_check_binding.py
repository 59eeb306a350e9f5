"""A scenario's checks are bound to the world its setup returns, whatever that world is.

``Scenario.build`` binds each check to the world as a method (the cheapest
callable to make and to call after every step); a method cannot be bound to
None, so a setup that returns None gets its checks bound another way.
"""

from __future__ import annotations

from typing import Any

import pytest

from dst import Env, Scenario, Sim
from dst.runner.single import run_one


@pytest.mark.parametrize("world", [None, 0, "", {"k": 1}])
def test_every_check_gets_the_world_setup_returned(world: Any) -> None:
    scenario = Scenario("bound", doc="checks see the world")
    seen: list[Any] = []

    @scenario.setup
    def setup(sim: Sim, config: dict[str, Any]) -> Any:
        async def main(env: Env) -> None:
            await env.clock.sleep(1)

        sim.process("p", main)
        return world

    @scenario.invariant("Inv")
    def inv(w: Any) -> bool:
        seen.append(w)
        return True

    @scenario.at_end("End")
    def end(w: Any) -> bool | str:
        return w is world or f"got {w!r}"

    @scenario.eventually("Soon", within=5.0)
    def soon(w: Any) -> bool:
        return w is world

    result = run_one(scenario, {}, 1)
    assert result.verdict == "pass", result.violated
    assert seen and all(w is world for w in seen)
