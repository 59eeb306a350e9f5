"""``env.clock.sleep`` is kept by the kernel, and behaves as ``trio.sleep`` does.

The kernel parks a sleeping task and wakes it when the scheduler chooses the
timer, instead of giving it a trio cancel scope with a deadline (several times
the cost of a choice point).  Every test here pins that nothing observable
changed: the same traces as ``trio.sleep``, byte for byte, and the same
behaviour under cancellation, crashes and the end of a run.
"""

from __future__ import annotations

import faulthandler
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio

from dst import Env, Sim
from dst.sim.faults import FaultPlan

from .simkit import inline, many, one

Sleep = Callable[[Env, float], Awaitable[None]]


async def _kernel_sleep(env: Env, seconds: float) -> None:
    await env.clock.sleep(seconds)


async def _trio_sleep(env: Env, seconds: float) -> None:
    await trio.sleep(seconds)


def _racing(sleep: Sleep) -> Any:
    """Timers race messages, a timeout cancels a sleep, crashes cut sleeps short."""

    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def ticker(env: Env) -> None:
            for n in range(3):
                await sleep(env, 0.5)
                await env.net.send("server", {"tick": n})
                await env.store.put("ticks", n)

        async def impatient(env: Env) -> None:
            with trio.move_on_after(1.0):
                await sleep(env, 5.0)  # cancelled by the timeout, never woken
            await env.net.send("server", {"gave_up": True})
            await sleep(env, 0.25)
            await env.store.put("done", True)

        async def server(env: Env) -> None:
            while True:
                msg = await env.net.recv()
                await sleep(env, 0.1)
                await env.store.put("last", msg.body)

        sim.process("ticker", ticker, stores=["db"], crashable=True)
        sim.process("impatient", impatient, stores=["db"])
        sim.process("server", server, stores=["db"], idle=True)
        return sim.store("db")

    plan = FaultPlan(max_crashes=1, crash_weight=0.2, max_drops=1, preemptions=2)
    return inline(setup, faults=plan)


def _traces(sleep: Sleep, seeds: range) -> list[str]:
    return ["\n".join(r.trace().record_lines()) + f"\n{r.verdict} {r.ended} {r.virtual_time}"
            for r in many(_racing(sleep), seeds)]


def test_env_clock_sleep_gives_the_traces_trio_sleep_gives() -> None:
    kernel, trio_ = _traces(_kernel_sleep, range(80)), _traces(_trio_sleep, range(80))
    assert kernel == trio_
    assert any('"crash"' in t for t in kernel) and any("timer@" in t for t in kernel)


@pytest.mark.parametrize("sleep", [_kernel_sleep, _trio_sleep], ids=["env.clock", "trio"])
def test_a_shielded_sleep_at_the_end_of_a_run_finishes_instead_of_hanging(
    sleep: Sleep,
) -> None:
    """The end of a run cannot cancel a sleep in a shielded scope: time goes on to it."""

    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def sleeper(env: Env) -> None:
            with trio.CancelScope(shield=True):
                await sleep(env, 10)
            await env.store.put("after", True)  # refused: the run has stopped

        async def breaker(env: Env) -> None:
            await env.store.put("bad", True)

        sim.process("sleeper", sleeper, stores=["db"])
        sim.process("breaker", breaker, stores=["db"])
        return sim.store("db")

    scenario = inline(setup, invariants={"NotBad": lambda db: db.peek("bad") is None})
    # It hung for ever once: fail loudly (tracebacks, exit) rather than hang the suite.
    faulthandler.dump_traceback_later(120, exit=True)
    try:
        result = one(scenario)
    finally:
        faulthandler.cancel_dump_traceback_later()
    assert result.violated == ["NotBad"]
    assert result.sim.stores["db"].peek("after") is None
    assert result.virtual_time == 10


def test_sleeping_zero_checkpoints_and_a_negative_sleep_is_trios_error() -> None:
    seen: list[str] = []

    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def main(env: Env) -> None:
            await env.clock.sleep(0)
            seen.append(f"zero at {env.clock.now()}")
            try:
                await env.clock.sleep(-1)
            except ValueError as exc:
                seen.append(f"negative: {exc}")

        sim.process("main", main)

    result = one(inline(setup))
    assert result.verdict == "pass"
    assert seen == ["zero at 0.0", "negative: `seconds` must be non-negative"]


def test_a_crash_ends_a_sleep_and_the_restart_sleeps_afresh() -> None:
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def napper(env: Env) -> None:
            boots = await env.store.get("boots") or 0
            await env.store.put("boots", boots + 1)
            await env.clock.sleep(60)
            await env.store.put("woke", env.clock.now())

        sim.process("napper", napper, stores=["db"])
        return sim.store("db")

    scenario = inline(setup, faults=FaultPlan(max_crashes=1, crash_weight=1.0))
    woke_after_restart = 0
    for r in many(scenario, range(100)):
        db = r.sim.stores["db"]
        assert db.peek("woke") is not None  # every run ends with a full nap
        if db.peek("boots") == 2 and db.peek("woke") > 60:
            woke_after_restart += 1
    assert woke_after_restart > 2


@pytest.mark.parametrize("sleep", [_kernel_sleep, _trio_sleep], ids=["env.clock", "trio"])
def test_a_task_spinning_while_another_sleeps_is_not_a_livelock(sleep: Sleep) -> None:
    """The busy run's decision offers the sleeper's timer, as it offers trio's deadlines."""
    woke: list[float] = []

    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def spinner(env: Env) -> None:
            while not woke:
                await trio.sleep(0)

        async def sleeper(env: Env) -> None:
            await sleep(env, 1.0)
            woke.append(env.clock.now())

        sim.process("spinner", spinner)
        sim.process("sleeper", sleeper)

    # No preemption: the spinner is never held, so only the busy run's decision can wake.
    result = one(inline(setup, faults=FaultPlan(preemptions=0)))
    assert (result.verdict, woke) == ("pass", [1.0])
