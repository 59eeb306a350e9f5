"""lost_wakeup: a worker checks its queue, then waits on an event already set and replaced.

An agent runtime hands incoming jobs from its dispatcher to a worker task
through an in-memory queue and a ``trio.Event`` that the dispatcher sets and
replaces on every submission (trio's usual broadcast pattern).  The worker,
finding the queue empty, updates the runtime's idle counter under a lock (a
checkpoint, no ``Env`` call) and then waits on *the current* event.  If the
dispatcher submits a job in between, the event it set is the old one: the
worker waits on the new one, and the job waits with it for ever.

With ``fixed=true`` (the default) the worker takes the event *before* it looks
at the queue, so a submission after the look sets the very event it waits on.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import structlog
import trio

from dst import Env, Scenario, Sim

log = structlog.get_logger()

JOBS = ("summarise", "reply")

scenario = Scenario("lost_wakeup", doc="a worker waits on an event replaced after its check")
scenario.switch("fixed", True, doc="take the event before looking at the queue")
scenario.planted_bug({"fixed": False}, breaks=["EveryJobDone"],
                     doc="the wake-up lands on the event the worker no longer waits on")


@dataclass
class Inbox:
    pending: deque[str] = field(default_factory=deque)
    changed: trio.Event = field(default_factory=trio.Event)
    stats_lock: trio.Lock = field(default_factory=trio.Lock)
    idle: int = 0

    def submit(self, job: str) -> None:
        self.pending.append(job)
        self.changed.set()
        self.changed = trio.Event()


async def worker(env: Env, inbox: Inbox, fixed: bool) -> None:
    while True:
        changed = inbox.changed  # the correct order: the event, then the look
        while inbox.pending:
            job = inbox.pending.popleft()
            await env.store.put(f"done/{job}", True)
            log.info("job done", job=job)
        log.info("queue empty")
        async with inbox.stats_lock:  # the runtime's shared counters
            inbox.idle += 1
        if not fixed:
            changed = inbox.changed  # the bug: the event as it is now, after the look
        log.info("waiting for a job")
        await changed.wait()


async def dispatcher(env: Env, inbox: Inbox) -> None:
    while True:
        msg = await env.net.recv()
        log.info("job submitted", job=msg.body)
        inbox.submit(str(msg.body))


async def runtime(env: Env, fixed: bool) -> None:
    inbox = Inbox()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(worker, env, inbox, fixed, name="worker")
        nursery.start_soon(dispatcher, env, inbox, name="dispatcher")


async def client(env: Env) -> None:
    for job in JOBS:
        await env.net.send("runtime", job)


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> Any:
    db = sim.store("db")
    sim.process("runtime", lambda env: runtime(env, config["fixed"]), stores=["db"])
    sim.process("client", client)
    return db


@scenario.at_end("EveryJobDone")
def every_job_done(db: Any) -> bool | str:
    missing = [job for job in JOBS if db.peek(f"done/{job}") is None]
    return not missing or f"jobs never done: {missing}"
