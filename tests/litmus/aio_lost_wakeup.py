"""aio_lost_wakeup: lost_wakeup's asyncio twin; the worker clears an event already set.

An asyncio agent runtime hands incoming jobs from its dispatcher task to a
worker task through an in-memory queue and an ``asyncio.Event`` the dispatcher
sets on every submission.  The worker, finding the queue empty, yields once to
the turns in flight (``asyncio.sleep(0)``: no ``Env`` call) and then clears the
event and waits on it.  If the dispatcher submits a job in between, the
worker's ``clear()`` wipes that wake-up out: it waits for a submission that
already happened, and the job waits with it for ever.

With ``fixed=true`` (the default) the worker clears the event *before* it looks
at the queue, so a submission after the look sets the event it waits on.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import structlog

from dst import Env, Scenario, Sim

log = structlog.get_logger()

JOBS = ("summarise", "reply")

scenario = Scenario("aio_lost_wakeup",
                    doc="asyncio: a worker clears an event set after its check")
scenario.switch("fixed", True, doc="clear the event before looking at the queue")
scenario.planted_bug({"fixed": False}, breaks=["EveryJobDone"],
                     doc="the wake-up is cleared away before the worker waits")


@dataclass
class Inbox:
    pending: deque[str] = field(default_factory=deque)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def submit(self, job: str) -> None:
        self.pending.append(job)
        self.changed.set()


async def worker(env: Env, inbox: Inbox, fixed: bool) -> None:
    while True:
        if fixed:
            inbox.changed.clear()  # the correct order: clear, then look
        while inbox.pending:
            job = inbox.pending.popleft()
            await env.store.put(f"done/{job}", True)
            log.info("job done", job=job)
        log.info("queue empty")
        await asyncio.sleep(0)  # let the turns in flight go before parking
        if not fixed:
            inbox.changed.clear()  # the bug: clears a submission made since the look
        log.info("waiting for a job")
        await inbox.changed.wait()


async def dispatcher(env: Env, inbox: Inbox) -> None:
    while True:
        msg = await env.net.recv()
        log.info("job submitted", job=msg.body)
        inbox.submit(str(msg.body))


async def runtime(env: Env, fixed: bool) -> None:
    inbox = Inbox()
    async with asyncio.TaskGroup() as group:
        group.create_task(worker(env, inbox, fixed), name="worker")
        group.create_task(dispatcher(env, inbox), name="dispatcher")


async def client(env: Env) -> None:
    for job in JOBS:
        await env.net.send("runtime", job)


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> Any:
    db = sim.store("db")
    sim.process("runtime", lambda env: runtime(env, config["fixed"]), stores=["db"],
                runtime="asyncio")
    sim.process("client", client)
    return db


@scenario.at_end("EveryJobDone")
def every_job_done(db: Any) -> bool | str:
    missing = [job for job in JOBS if db.peek(f"done/{job}") is None]
    return not missing or f"jobs never done: {missing}"
