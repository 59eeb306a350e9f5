"""aio_queue_cancel: channel_cancel's asyncio twin; a timeout cancels a worker holding a job.

An asyncio agent runtime feeds jobs from its durable inbox to a worker task
through an ``asyncio.Queue``.  The worker waits for the next job under a
heartbeat timeout (``asyncio.timeout``: when nothing comes for a while it
records a heartbeat), and yields once to the other turns (``asyncio.sleep(0)``)
before it starts on a job.  In the buggy order that yield lies inside the
timeout's scope, after the job was taken: the timeout expiring there cancels
the worker with the job in its hands, and the job is gone from the queue and
never done.  No ``Env`` call lies between.

``Queue.get`` itself is cancel-safe: cancelled, it takes nothing.  With
``fixed=true`` (the default) the worker leaves the scope as soon as it holds a
job, so a timeout can only strike before it took one.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from dst import Env, FaultPlan, Scenario, Sim

log = structlog.get_logger()

JOBS = 3
HEARTBEAT = 5.0

# The window holds a yield, no wait: the heartbeat fires there only if the worker
# is slow (a stalled process), one "slow" fault (see FaultPlan.max_slow).
scenario = Scenario("aio_queue_cancel", doc="asyncio: a timeout cancels a worker holding a job",
                    faults=FaultPlan(max_slow=1))
scenario.switch("fixed", True, doc="yield after leaving the timeout's scope, not inside it")
scenario.planted_bug({"fixed": False}, breaks=["NoJobLost"],
                     doc="a cancellation point between taking a job and keeping it")

#: Heartbeats in a row after which an idle worker stops (its inbox is done, or lost).
IDLE_LIMIT = 3


async def feeder(env: Env, jobs: asyncio.Queue[str]) -> None:
    for i in range(JOBS):
        job = await env.store.get(f"inbox/{i}")
        await jobs.put(str(job))


async def next_job(jobs: asyncio.Queue[str], fixed: bool) -> str:
    job = await jobs.get()
    log.info("took job", job=job)
    if not fixed:
        await asyncio.sleep(0)  # the bug: a cancellation point with the job in hand
    return job


async def worker(env: Env, jobs: asyncio.Queue[str], fixed: bool) -> None:
    idle = 0
    while idle < IDLE_LIMIT:
        job = None
        try:
            async with asyncio.timeout(HEARTBEAT):
                job = await next_job(jobs, fixed)
        except TimeoutError:
            pass
        if job is None:
            idle += 1
            await env.store.put("heartbeat", env.clock.now())
            continue
        idle = 0
        if fixed:
            await asyncio.sleep(0)  # the same yield, outside the scope
        await env.store.put(f"done/{job}", True)
        log.info("job done", job=job)


async def runtime(env: Env, fixed: bool) -> None:
    jobs: asyncio.Queue[str] = asyncio.Queue(maxsize=1)
    async with asyncio.TaskGroup() as group:
        group.create_task(feeder(env, jobs), name="feeder")
        group.create_task(worker(env, jobs, fixed), name="worker")


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> Any:
    db = sim.store("db")
    for i in range(JOBS):
        db.put(f"inbox/{i}", f"job-{i}")
    sim.process("runtime", lambda env: runtime(env, config["fixed"]), stores=["db"],
                runtime="asyncio")
    return db


@scenario.at_end("NoJobLost")
def no_job_lost(db: Any) -> bool | str:
    lost = [job for _, job in db.scan("inbox/") if db.peek(f"done/{job}") is None]
    return not lost or f"taken from the queue and never done: {lost}"
