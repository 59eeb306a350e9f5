"""channel_cancel: a consumer takes a job from a channel, then its timeout cancels it.

An agent runtime feeds jobs from its durable inbox to a worker task through a
memory channel.  The worker waits for the next job under a heartbeat timeout
(``move_on_after``: when nothing comes for a while it records a heartbeat), and
before working on a job it passes the operator's pause gate (a ``trio.Event``
that is set while the agent runs).  Passing an open gate is a checkpoint, and
in the buggy order it lies inside the timeout's scope, after the job was taken:
the timeout expiring there cancels the worker with the job in its hands, and
the job is gone from the channel and never done.  No ``Env`` call lies between.

``receive`` itself is cancel-safe: cancelled, it takes nothing.  With
``fixed=true`` (the default) the worker passes the gate first and leaves the
scope as soon as it holds a job, so a timeout can only strike before it took one.
"""

from __future__ import annotations

from typing import Any

import structlog
import trio

from dst import Env, FaultPlan, Scenario, Sim

log = structlog.get_logger()

JOBS = 3
HEARTBEAT = 5.0

# The window is one checkpoint wide, and the worker is runnable all through it:
# the heartbeat timeout fires there only if the worker is slow (a stalled
# process), one "slow" fault (see FaultPlan.max_slow).
scenario = Scenario("channel_cancel", doc="a timeout cancels a worker holding a job",
                    faults=FaultPlan(max_slow=1))
scenario.switch("fixed", True, doc="pass the pause gate before taking a job, not after")
scenario.planted_bug({"fixed": False}, breaks=["NoJobLost"],
                     doc="a cancellation point between taking a job and keeping it")


async def feeder(env: Env, jobs: Any) -> None:
    async with jobs:
        for i in range(JOBS):
            job = await env.store.get(f"inbox/{i}")
            await jobs.send(job)


async def next_job(jobs: Any, running: trio.Event, fixed: bool) -> str:
    job: str = await jobs.receive()
    log.info("took job", job=job)
    if not fixed:
        await running.wait()  # the bug: a cancellation point with the job in hand
    return job


async def worker(env: Env, jobs: Any, running: trio.Event, fixed: bool) -> None:
    while True:
        if fixed:
            await running.wait()  # the operator may pause the agent
        job = None
        try:
            with trio.move_on_after(HEARTBEAT):
                job = await next_job(jobs, running, fixed)
        except trio.EndOfChannel:
            return
        if job is None:
            await env.store.put("heartbeat", env.clock.now())
            continue
        await env.store.put(f"done/{job}", True)
        log.info("job done", job=job)


async def runtime(env: Env, fixed: bool) -> None:
    running = trio.Event()
    running.set()
    send, receive = trio.open_memory_channel[Any](0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(feeder, env, send, name="feeder")
        nursery.start_soon(worker, env, receive, running, fixed, name="worker")


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> Any:
    db = sim.store("db")
    for i in range(JOBS):
        db.put(f"inbox/{i}", f"job-{i}")
    sim.process("runtime", lambda env: runtime(env, config["fixed"]), stores=["db"])
    return db


@scenario.at_end("NoJobLost")
def no_job_lost(db: Any) -> bool | str:
    lost = [job for _, job in db.scan("inbox/") if db.peek(f"done/{job}") is None]
    return not lost or f"taken from the channel and never done: {lost}"
