"""singleflight: two requests for one document both compute its summary.

A summary cache in front of an expensive model: requests arrive as messages,
the server handles each in its own task, and a "singleflight" table makes a
second request for a key that is being computed wait for the first one's
result instead of computing it again.  Between "is it in flight?" and "mark it
in flight" the handler reports the miss on the server's metrics channel (a
memory channel send: a checkpoint, no ``Env`` call).  A second request handled
in that window finds nothing in flight and computes the summary too.

With ``fixed=true`` (the default) the handler marks the key in flight in the
same step in which it finds it missing, and reports the miss afterwards.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import structlog
import trio

from dst import Env, Scenario, Sim

log = structlog.get_logger()

KEY = "doc-7"

scenario = Scenario("singleflight", doc="two requests for one key both compute it")
scenario.switch("fixed", True, doc="mark in flight in the step that finds the key missing")
scenario.planted_bug({"fixed": False}, breaks=["ComputedOnce"],
                     doc="a checkpoint between 'in flight?' and 'mark in flight'")


@dataclass
class Cache:
    done: dict[str, str] = field(default_factory=dict)
    in_flight: dict[str, trio.Event] = field(default_factory=dict)
    misses: int = 0


async def summary(env: Env, cache: Cache, metrics: Any, key: str, by: str, fixed: bool) -> str:
    if key in cache.done:
        return cache.done[key]
    if key in cache.in_flight:
        await cache.in_flight[key].wait()
        return cache.done[key]
    flight = trio.Event()
    if fixed:
        cache.in_flight[key] = flight
    await metrics.send(key)  # report the miss
    if not fixed:
        cache.in_flight[key] = flight
    log.info("computing", key=key, request=by)
    value = f"summary of {key}"  # what the expensive model would answer; each call is billed
    await env.store.put(f"computed/{key}/{by}", value)  # so every computation is recorded
    cache.done[key] = value
    cache.in_flight.pop(key, None)
    flight.set()
    return value


async def handle(env: Env, cache: Cache, metrics: Any, request: Any, fixed: bool) -> None:
    value = await summary(env, cache, metrics, request["key"], request["client"], fixed)
    await env.net.send(request["client"], {"key": request["key"], "value": value})


async def accept(env: Env, cache: Cache, metrics: Any, fixed: bool) -> None:
    async with trio.open_nursery() as nursery:
        while True:
            msg = await env.net.recv()
            nursery.start_soon(handle, env, cache, metrics, msg.body, fixed, name="handle")


async def export_metrics(cache: Cache, misses: Any) -> None:
    async for _key in misses:
        cache.misses += 1


async def server(env: Env, fixed: bool) -> None:
    cache = Cache()
    metrics, misses = trio.open_memory_channel[str](math.inf)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(export_metrics, cache, misses, name="metrics")
        nursery.start_soon(accept, env, cache, metrics, fixed, name="accept")


async def client(env: Env) -> None:
    await env.net.send("cache", {"key": KEY, "client": env.name})
    reply = await env.net.recv()
    await env.store.put(f"answer/{env.name}", reply.body["value"])


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> Any:
    db = sim.store("db")
    sim.process("cache", lambda env: server(env, config["fixed"]), stores=["db"])
    for name in ("alice", "bob"):
        sim.process(name, client, stores=["db"])
    return db


@scenario.invariant("ComputedOnce")
def computed_once(db: Any) -> bool | str:
    n = len(db.scan(f"computed/{KEY}/"))
    return n <= 1 or f"{KEY} computed {n} times"


@scenario.at_end("EveryRequestAnswered")
def every_request_answered(db: Any) -> bool | str:
    missing = [name for name in ("alice", "bob") if db.peek(f"answer/{name}") is None]
    return not missing or f"no answer for {missing}"
