"""lease_fencing: a worker cut off from the lock service keeps writing on an expired lease.

Two workers share one job; a lock service grants a lease on virtual time, and
the holder renews it between writes to an outside storage service.  A partition
cuts the holder off from the lock service (and the other worker), but not from
storage: its renewals are lost, its lease expires, the other worker is granted
the lease and starts writing, and the old holder, which cannot tell a lost
renewal from a slow one, writes once more.  Storage accepts it.

With ``fixed=true`` (the default) every write carries the lease's fencing token
(a number the lock service increases with every grant) and storage refuses a
write whose token is lower than one it has already seen.
"""

from __future__ import annotations

import itertools
from typing import Any

import structlog
import trio

from dst import Env, FaultPlan, Scenario, Sim

log = structlog.get_logger()

LEASE = 10.0  # seconds a grant or a renewal lasts
WORK, WRITES = 4.0, 5  # the holder's writes, each after WORK seconds of work
RETRY, REPLY_TIMEOUT = 4.0, 1.0  # seconds between two acquires; waiting for a reply

scenario = Scenario(
    "lease_fencing", doc="an expired lease holder writes after the next holder",
    faults=FaultPlan(max_partitions=1, partition_seconds=30.0, partition_of=("w1", "w2")),
)
scenario.switch("fixed", True, doc="storage checks each write's fencing token")
scenario.planted_bug({"fixed": False}, breaks=["NoStaleWrite"],
                     doc="a lease without a fencing token")


async def lock_service(env: Env) -> None:
    holder, token, expires = None, 0, 0.0
    while True:
        msg = await env.net.recv()
        req, now = msg.body, env.clock.now()
        if req["op"] == "release":
            if holder == msg.source and req["token"] == token:
                holder = None
            continue
        if req["op"] == "acquire" and (holder is None or now >= expires):
            holder, token = msg.source, token + 1
            await env.store.put(f"grant/{token:04d}", holder)
        granted = holder == msg.source and (req["op"] == "acquire" or now < expires)
        if granted:
            expires = now + LEASE
        await env.net.send(msg.source, {"re": req["n"], "granted": granted, "token": token})


async def ask(env: Env, n: int, op: str, token: int = 0) -> Any:
    """One request to the lock service; None if no reply came in time."""
    await env.net.send("locks", {"op": op, "n": n, "token": token})
    with trio.move_on_after(REPLY_TIMEOUT):
        while True:
            reply = await env.net.recv()
            if reply.body["re"] == n:  # a late reply to an earlier request is dropped
                return reply.body
    return None


async def worker(env: Env, fixed: bool) -> None:
    n = 1
    while (lease := await ask(env, n, "acquire")) is None or not lease["granted"]:
        await env.clock.sleep(RETRY)
        n += 1
    token = lease["token"]
    log.info("lease granted", token=token)
    for step in range(WRITES):
        await env.clock.sleep(WORK)
        write = {"by": env.name, "step": step, "token": token if fixed else None}
        if not (await env.services.call("storage", "write", write))["ok"]:
            log.info("fenced off", token=token)
            return
        n += 1
        renewed = await ask(env, n, "renew", token)
        if renewed is not None and not renewed["granted"]:
            log.info("lease lost", token=token)
            return
    await env.net.send("locks", {"op": "release", "n": n + 1, "token": token})


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> Any:
    grants = sim.store("locks")
    accepted: list[tuple[str, int]] = []  # (writer, the lease it held: ground truth)
    highest = [0]

    def storage(op: str, request: Any) -> Any:
        token = request["token"]
        if token is not None and token < highest[0]:
            return {"ok": False}
        highest[0] = max(highest[0], token or 0)
        held = [int(k[6:]) for k, holder in grants.scan("grant/") if holder == request["by"]]
        accepted.append((request["by"], max(held)))
        return {"ok": True}

    sim.service("storage", storage, suffers=())
    sim.process("locks", lock_service, stores=["locks"], crashable=False)
    for name in ("w1", "w2"):
        sim.process(name, lambda env: worker(env, config["fixed"]), crashable=False)
    return accepted


@scenario.invariant("NoStaleWrite")
def no_stale_write(accepted: list[tuple[str, int]]) -> bool | str:
    for (before, newer), (after, older) in itertools.pairwise(accepted):
        if older < newer:
            return f"{after} wrote under lease {older} after {before} wrote under lease {newer}"
    return True
