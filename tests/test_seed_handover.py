"""The next seed of a batch starts inside the quiescence hook, as trio's loop would start it.

When a run ends and the seed's task, woken to leave it, is all trio would run,
the hook steps that task itself (``Scheduler._in_place``): the step ends the
run and starts the next seed of the batch, whose first steps are taken in
place too.  Every test here runs the same seeds with that shortcut and with
every step left to trio's loop, and alone, and wants the same traces.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import trio

from dst import Env, Sim
from dst.runner.single import run_one
from dst.sim import trio_internals
from dst.sim.faults import FaultPlan
from dst.sim.scheduler import Scheduler

from .simkit import inline, many


@pytest.fixture
def handovers(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Count the runs that went on to the next seed in place (proof the shortcut ran)."""
    counted = [0]
    real = Scheduler._in_place

    def counting(self: Scheduler, task: object, budget: int) -> int:
        left = real(self, task, budget)  # type: ignore[arg-type]
        counted[0] += left > 0  # budget left: the next seed goes on in place
        return left

    monkeypatch.setattr(Scheduler, "_in_place", counting)
    yield counted


def _traces(scenario: Any, seeds: range) -> list[str]:
    return ["\n".join(r.trace().record_lines()) + f"\n{r.verdict} {r.ended}"
            for r in many(scenario, seeds)]


def _alone(scenario: Any, seeds: range) -> list[str]:
    out = []
    for seed in seeds:
        r = run_one(scenario, {}, seed)
        out.append("\n".join(r.trace().record_lines()) + f"\n{r.verdict} {r.ended}")
    return out


def _three_ways(monkeypatch: pytest.MonkeyPatch, scenario: Any, seeds: range) -> list[str]:
    in_place = _traces(scenario, seeds)
    with monkeypatch.context() as patch:
        patch.setattr(trio_internals, "STEP", False)
        assert _traces(scenario, seeds) == in_place
    assert _alone(scenario, seeds) == in_place
    return in_place


class _Tally:
    value = 0
    done = 0


def _lost_update(sim: Sim, config: dict[str, Any]) -> None:
    tally = _Tally()

    async def increment() -> None:
        value = tally.value
        await trio.sleep(0)  # preemption may hold the task here
        tally.value = value + 1
        tally.done += 1

    async def two(env: Env) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(increment)
            nursery.start_soon(increment)

    sim.process("counter", two)
    sim.invariant("NoLostIncrement", lambda: tally.value >= tally.done)


def test_runs_that_end_at_rest_or_at_a_violation_hand_over_to_the_next_seed_as_trio_would(
    monkeypatch: pytest.MonkeyPatch, handovers: list[int],
) -> None:
    traces = _three_ways(monkeypatch, inline(_lost_update, faults=FaultPlan(preemptions=2)),
                         range(40))
    assert handovers[0] > 0
    verdicts = {t.rsplit("\n", 1)[1] for t in traces}
    assert verdicts == {"pass quiescent", "fail violation"}


def test_a_process_that_returns_at_once_and_one_that_never_starts_work_hand_over_alike(
    monkeypatch: pytest.MonkeyPatch, handovers: list[int],
) -> None:
    def setup(sim: Sim, config: dict[str, Any]) -> None:
        async def returns(env: Env) -> None:
            return None

        async def waits(env: Env) -> None:
            await env.net.recv()  # idle: the run ends at rest with this task blocked

        sim.process("returns", returns)
        sim.process("waits", waits, idle=True)

    traces = _three_ways(monkeypatch, inline(setup), range(10))
    assert handovers[0] > 0
    assert all(t.endswith("pass quiescent") for t in traces)


def test_a_seed_whose_run_leaves_a_timer_pending_is_left_to_trio(
    monkeypatch: pytest.MonkeyPatch, handovers: list[int],
) -> None:
    def setup(sim: Sim, config: dict[str, Any]) -> None:
        async def sleeper(env: Env) -> None:
            with trio.CancelScope(shield=True):
                await trio.sleep(5)  # outlives the run's end: time goes on to its deadline
            await env.clock.sleep(1)

        async def fails(env: Env) -> None:
            await env.net.send("sleeper", "x")

        sim.process("sleeper", sleeper, crashable=False)
        sim.process("fails", fails, crashable=False)
        sim.invariant("NoMessageSent", lambda: not sim.net.in_flight)

    traces = _three_ways(monkeypatch, inline(setup), range(6))
    assert all("NoMessageSent" in t for t in traces)
