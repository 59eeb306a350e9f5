"""counter_asyncio: the ``counter`` scenario written with asyncio; no increment may be lost.

The same lost update as ``counter``, in asyncio code run as asyncio processes
(``sim.process(..., runtime="asyncio")``) under the same scheduler: each worker
reads the counter and writes it back plus one.  With ``cas=false`` the write
is a blind ``put``: two workers that read the same value both write value+1
and one increment vanishes.  With ``cas=true`` (the default) the write is a
compare-and-set that retries when another worker got there first.  Its runs
are those of ``counter`` decision for decision (an ``env`` call of an asyncio
task parks as a trio task's does); ``benchmarks/bench_asyncio.py`` compares
their cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import structlog

from dst import Env, Scenario, Sim

log = structlog.get_logger()

scenario = Scenario(
    "counter_asyncio",
    doc="asyncio workers increment one durable counter; no increment may be lost",
)
scenario.switch("cas", True, doc="write with compare-and-set (false: blind put)")
scenario.switch("workers", 2, choices=[1, 2, 3, 4], doc="concurrent workers")
scenario.switch("increments", 7, choices=list(range(1, 21)), doc="increments per worker")
scenario.planted_bug({"cas": False}, breaks=["NoLostIncrement"], doc="read-then-put loses updates")


@dataclass
class World:
    db: Any
    done: int = 0  # increments the workers were told succeeded


async def worker(env: Env, world: World, cas: bool, increments: int) -> None:
    for _ in range(increments):
        while True:
            value = await env.store.get("n") or 0
            assert isinstance(value, int)
            log.info("read counter", value=value)
            if not cas:
                await env.store.put("n", value + 1)
                break
            if await env.store.cas("n", value or None, value + 1):
                break
            log.info("cas lost, retrying", read=value)
        world.done += 1
        log.info("incremented", to=value + 1)
    await env.store.get("n")


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> World:
    world = World(sim.store("db"))
    for i in range(config["workers"]):
        async def main(env: Env) -> None:
            await worker(env, world, config["cas"], config["increments"])

        sim.process(f"worker-{i + 1}", main, stores=["db"], runtime="asyncio")
    return world


@scenario.invariant("NoLostIncrement")
def no_lost_increment(world: World) -> bool | str:
    stored = world.db.peek("n") or 0
    if stored >= world.done:
        return True
    return f"counter is {stored} after {world.done} acknowledged increments"
