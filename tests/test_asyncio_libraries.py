"""What asyncio libraries do on dst's loop, beyond plain asyncio: anyio's worker threads
run inline, and a killed task's async context managers run their exits to the end."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
import structlog

from dst import Env, FaultPlan, Sim
from dst.sim.aio import SimLoop

from .simkit import events, inline, many, one

anyio = pytest.importorskip("anyio")

log = structlog.get_logger()
WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


def test_anyio_to_thread_runs_inline_in_an_asyncio_process() -> None:
    """anyio's asyncio backend starts a worker thread of its own (pydantic-ai runs a sync
    model function or tool there): on dst's loop the function runs inline, in a copy of
    the caller's context, and the run passes instead of trapping ``Thread.start``."""

    def work(n: int) -> str:
        return f"{WHO.get()}:{n * 2}"

    async def main(env: Env) -> None:
        WHO.set("caller")
        got = await anyio.to_thread.run_sync(work, 21)
        await env.store.put("got", got)

    def setup(sim: Sim, config: dict[str, Any]) -> Any:
        sim.process("p", main, stores=["db"], runtime="asyncio")
        return sim.store("db")

    result = one(inline(setup))
    assert result.verdict == "pass", result.violated
    assert result.sim.stores["db"].peek("got") == "caller:42"


@contextlib.asynccontextmanager
async def _held(name: str) -> AsyncIterator[None]:
    try:
        yield
    finally:
        log.info("exit started", name=name)
        try:
            await asyncio.sleep(1)  # interrupted: the process is dead
        finally:
            loop = asyncio.get_running_loop()
            log.info("exit ended", name=name, loop=type(loop) is SimLoop, who=WHO.get())


async def _beating(env: Env) -> None:
    WHO.set("beater")
    async with _held("outer"), _held("inner"):
        while True:
            await env.store.put("beat", env.clock.now())
            await asyncio.sleep(1)


def test_a_killed_task_inside_async_context_managers_runs_their_exits_to_the_end() -> None:
    """A crash ends a task waiting inside ``@asynccontextmanager`` blocks: each exit's
    ``finally`` runs now, through its own awaits, on the loop and in the task's context;
    nothing is left suspended for the garbage collector to finish outside the loop."""
    unraisable: list[Any] = []
    hook, sys.unraisablehook = sys.unraisablehook, unraisable.append

    def setup(sim: Sim, config: dict[str, Any]) -> Any:
        sim.process("p", _beating, stores=["db"], runtime="asyncio", idle=True)
        return sim.store("db")

    try:
        scenario = inline(setup, faults=FaultPlan(max_crashes=1, crash_weight=0.5),
                          max_steps=60)
        crashed = 0
        for result in many(scenario, range(20)):
            records = result.trace().records
            at = next((r["step"] for r in records
                       if r["type"] == "fault" and r["fault"] == "crash"), None)
            if at is None:
                continue
            crashed += 1
            unwound = [(e, f.get("name")) for _, e, f in events(result) if e.startswith("exit")]
            assert unwound[:4] == [("exit started", "inner"), ("exit ended", "inner"),
                                   ("exit started", "outer"), ("exit ended", "outer")]
            ended = [f for _, e, f in events(result) if e == "exit ended"][:2]
            assert all(f["loop"] and f["who"] == "beater" for f in ended), ended
            del result
        gc.collect()
    finally:
        sys.unraisablehook = hook
    assert crashed > 3
    assert unraisable == []


@pytest.mark.skipif(not hasattr(asyncio, "eager_task_factory"),
                    reason="eager tasks came with Python 3.12")
def test_an_eager_task_is_a_task_of_the_loop_whose_first_step_runs_at_once() -> None:
    """``asyncio.eager_task_factory`` (LangGraph starts its tasks with it on 3.12+) builds
    an ``asyncio.Task`` without asking the loop: on dst's loop it is the loop's own task,
    labelled by its name, its first step run before its creator goes on, and one created
    after a crash is refused with its coroutine closed, never left unawaited."""

    def eager(loop: Any, coro: Any, name: str) -> Any:  # as LangGraph calls it: at the time
        return asyncio.eager_task_factory(loop, coro, name=name)  # type: ignore[attr-defined]
    unraisable: list[Any] = []
    hook, sys.unraisablehook = sys.unraisablehook, unraisable.append

    async def child(env: Env, key: str) -> None:
        log.info("child started", key=key)
        try:
            await env.store.put(key, 1)
        finally:
            with contextlib.suppress(RuntimeError):  # after a crash: the loop refuses it
                eager(asyncio.get_running_loop(), env.store.get(key), name="late")

    async def main(env: Env) -> None:
        loop = asyncio.get_running_loop()
        task = eager(loop, child(env, "a"), name="eager")
        log.info("creator goes on")
        await task
        loop.set_task_factory(asyncio.eager_task_factory)  # type: ignore[attr-defined]
        await loop.create_task(child(env, "b"), name="by-factory")

    def setup(sim: Sim, config: dict[str, Any]) -> Any:
        sim.process("p", main, stores=["db"], runtime="asyncio")
        return sim.store("db")

    try:
        plain = one(inline(setup))
        crashing = many(inline(setup, faults=FaultPlan(max_crashes=1, crash_weight=0.5)),
                        range(20))
        gc.collect()
    finally:
        sys.unraisablehook = hook
    assert plain.verdict == "pass", plain.violated
    assert [(actor, e) for actor, e, _ in events(plain)] == [
        ("p/eager", "child started"), ("p", "creator goes on"),
        ("p/by-factory", "child started")]
    enabled = {label for r in plain.trace().records if r["type"] == "decision"
               for label in r["enabled"]}
    assert {"p/eager@db.put(a)", "p/by-factory@db.put(b)"} <= enabled, enabled
    assert all(r.verdict == "pass" for r in crashing)
    assert unraisable == []
