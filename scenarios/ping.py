"""ping: a client retries requests over a lossy link; each effect must apply once.

The client sends each request, waits for an acknowledgement with a timeout, and
sends it again when the timeout fires.  The link may drop or duplicate
messages; the server may crash and restart (its store survives).  With
``dedup=true`` (the default) the server applies a request's effect with a
compare-and-set on the request's own record, so a retried or duplicated request
is acknowledged without applying it again.  With ``dedup=false`` it increments
the record blindly, and a retry after a lost acknowledgement applies twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import structlog
import trio

from dst import Env, FaultPlan, Scenario, Sim

log = structlog.get_logger()

#: Seconds the client waits for an acknowledgement before sending again.
ACK_TIMEOUT = 2.0


def _faults(config: dict[str, Any]) -> FaultPlan:
    # A slow server: the ack comes after the client's timeout (up to four times a
    # run, one per send of a request), as likely as any other option.
    return FaultPlan(max_crashes=config["crashes"], max_drops=config["drops"],
                     max_dups=config["dups"], max_slow=4, slow_weight=1.0)


scenario = Scenario(
    "ping",
    doc="a client retries requests over a lossy link; each effect must apply at most once",
    faults=_faults,
)
scenario.switch("dedup", True, doc="server applies each request once (false: blind increment)")
scenario.switch("requests", 2, choices=[1, 2, 3, 4], doc="requests the client sends")
scenario.switch("attempts", 4, choices=[1, 2, 3, 4, 5, 6], doc="sends per request")
scenario.switch("crashes", 1, choices=[0, 1, 2], doc="server crash budget per run")
scenario.switch("drops", 1, choices=[0, 1, 2, 3], doc="message drop budget per run")
scenario.switch("dups", 1, choices=[0, 1, 2], doc="message duplicate budget per run")
scenario.planted_bug({"dedup": False}, breaks=["AtMostOnce"],
                     doc="a retry after a lost ack applies the effect again")


@dataclass
class World:
    db: Any
    requests: list[str]
    acked: set[str] = field(default_factory=set)


async def server(env: Env, dedup: bool) -> None:
    log.info("server up")
    while True:
        msg = await env.net.recv()
        req = str(msg.body)
        if dedup:
            applied = await env.store.cas(f"effect/{req}", None, 1)
            log.info("applied" if applied else "already applied", req=req)
        else:
            count = await env.store.get(f"effect/{req}") or 0
            assert isinstance(count, int)
            await env.store.put(f"effect/{req}", count + 1)
            log.info("applied", req=req, times=count + 1)
        await env.net.send(msg.source, req)


async def client(env: Env, world: World, attempts: int) -> None:
    for req in world.requests:
        for attempt in range(1, attempts + 1):
            await env.net.send("server", req)
            log.info("sent", req=req, attempt=attempt)
            with trio.move_on_after(ACK_TIMEOUT):
                while True:
                    ack = await env.net.recv()
                    if ack.body == req:
                        break
                world.acked.add(req)
                log.info("acknowledged", req=req)
                break
            log.info("timed out", req=req, attempt=attempt)
        else:
            log.info("gave up", req=req)


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> World:
    world = World(sim.store("server-db"), [f"r{i + 1}" for i in range(config["requests"])])

    async def server_main(env: Env) -> None:
        await server(env, config["dedup"])

    async def client_main(env: Env) -> None:
        await client(env, world, config["attempts"])

    sim.process("server", server_main, stores=["server-db"])
    sim.process("client", client_main, crashable=False)
    return world


@scenario.invariant("AtMostOnce")
def at_most_once(world: World) -> bool | str:
    for req in world.requests:
        times = world.db.peek(f"effect/{req}") or 0
        if times > 1:
            return f"request {req} applied {times} times"
    return True


@scenario.invariant("AckedApplied")
def acked_applied(world: World) -> bool | str:
    for req in sorted(world.acked):
        if not world.db.peek(f"effect/{req}"):
            return f"request {req} acknowledged but never applied"
    return True
