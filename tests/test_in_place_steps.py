"""Steps taken by the quiescence hook itself are the steps trio's loop would take.

When a decision makes exactly one task runnable and trio's next pass would do
nothing but step it, the kernel steps it from the hook (``Sim.on_quiescence``,
``trio_internals.step``).  Every test here runs the same seeds both ways, once
with that shortcut and once with every step left to trio's loop, and wants the
same trace, byte for byte.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import trio

from dst import Env, Sim
from dst.registry import load
from dst.sim import trio_internals
from dst.sim.faults import FaultPlan

from .simkit import inline, many


@pytest.fixture
def steps_counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Count the steps taken in place (proof that the comparison compares something)."""
    counted = [0]
    real = trio_internals.step

    def counting(*args: Any) -> None:
        counted[0] += 1
        real(*args)

    monkeypatch.setattr(trio_internals, "step", counting)
    yield counted


def _both_ways(monkeypatch: pytest.MonkeyPatch, run: Any) -> tuple[list[str], list[str]]:
    in_place = run()
    with monkeypatch.context() as patch:
        patch.setattr(trio_internals, "STEP", False)
        by_trio = run()
    return in_place, by_trio


def _traces(scenario: Any, config: dict[str, Any], seeds: range) -> list[str]:
    return ["\n".join(r.trace().record_lines()) + f"\n{r.verdict} {r.ended}"
            for r in many(scenario, seeds, config)]


@pytest.mark.parametrize(("name", "overrides"), [
    ("counter", {"cas": "false"}),
    ("counter", {"increments": "20"}),  # runs of ~100 decisions: past the in-place bound
    ("ping", {}),
    ("approval", {}),
    ("replenish_crash", {}),
    ("counter_asyncio", {}),  # asyncio processes: a reply wakes a loop's driver
    ("tests/litmus/aio_queue_cancel.py", {"fixed": "false"}),
])
def test_shipped_scenarios_give_the_same_traces_stepped_in_place_or_by_trio(
    monkeypatch: pytest.MonkeyPatch, steps_counted: list[int], name: str,
    overrides: dict[str, str],
) -> None:
    scenario = load(name)
    config = scenario.config(overrides)
    in_place, by_trio = _both_ways(monkeypatch, lambda: _traces(scenario, config, range(30)))
    assert steps_counted[0] > 0
    assert in_place == by_trio


#: ``scope.cancelled_caught`` of every run of ``cancels_itself``.
caught: list[bool] = []


def _ending(sim: Sim, config: dict[str, Any]) -> None:
    db = sim.store("db")

    async def returns(env: Env) -> None:
        await env.store.put("a", 1)

    async def raises(env: Env) -> None:
        await env.store.get("a")
        raise ValueError("raised right after an Env call")

    async def child_raises(env: Env) -> None:
        async def child() -> None:
            await env.store.get("b")
            raise KeyError("a child task's own error")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(child)
            await env.store.put("b", 2)

    async def cancels_itself(env: Env) -> None:
        with trio.CancelScope() as scope:
            scope.cancel()
            await env.store.get("c")  # delivered at once, as trio delivers it
        caught.append(scope.cancelled_caught)
        await env.store.put("c", 1)

    sim.process("returns", returns, stores=["db"])
    sim.process("raises", raises, stores=["db"])
    sim.process("child", child_raises, stores=["db"])
    sim.process("cancels", cancels_itself, stores=["db"])
    del db


def test_tasks_that_return_raise_or_are_cancelled_in_a_step_end_as_under_trio(
    monkeypatch: pytest.MonkeyPatch, steps_counted: list[int],
) -> None:
    scenario = inline(_ending)
    in_place, by_trio = _both_ways(monkeypatch, lambda: _traces(scenario, {}, range(40)))
    assert steps_counted[0] > 0
    assert in_place == by_trio
    # A run stops at its first finding: each kind of ending comes first in some seed.
    for what in ("raised right after an Env call", "a child task's own error"):
        assert any(what in trace for trace in in_place), what
    # The cancelled get is never a choice: trio delivers the cancellation at once.
    assert caught and all(caught)
    assert all("cancels@db.get(c)" not in trace for trace in in_place)


def test_crashes_restarts_and_preemption_give_the_same_traces_both_ways(
    monkeypatch: pytest.MonkeyPatch, steps_counted: list[int],
) -> None:
    plan = FaultPlan(max_crashes=2, crash_weight=0.3, preemptions=3)

    def setup(sim: Sim, config: dict[str, Any]) -> None:
        sim.store("db")

        async def worker(env: Env) -> None:
            for _ in range(6):
                value = await env.store.get("n") or 0
                assert isinstance(value, int)
                await trio.sleep(0)  # a checkpoint: preemption may hold the task here
                await env.store.put("n", value + 1)
                await trio.lowlevel.checkpoint()

        sim.process("w1", worker, stores=["db"])
        sim.process("w2", worker, stores=["db"])

    scenario = inline(setup, faults=plan)
    in_place, by_trio = _both_ways(monkeypatch, lambda: _traces(scenario, {}, range(60)))
    assert steps_counted[0] > 0
    assert in_place == by_trio
    assert any('"crash"' in t for t in in_place) and any('"restart"' in t for t in in_place)


def test_drops_duplicates_and_unawaited_deliveries_are_decided_without_an_empty_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A decision that makes nothing runnable is followed by the next one at once.

    Under trio's loop such a decision leaves an empty pass, which only asks the
    hook again; taken in place it costs nothing, and the trace is the same.
    """
    plan = FaultPlan(max_drops=2, max_dups=2)
    empty = [0]
    real_pass = Sim.loop_pass

    def counting_pass(self: Sim, batch: Any = None) -> None:
        empty[0] += not batch
        real_pass(self, batch)

    monkeypatch.setattr(Sim, "loop_pass", counting_pass)

    def setup(sim: Sim, config: dict[str, Any]) -> None:
        async def sender(env: Env) -> None:
            for n in range(4):
                await env.net.send("sink", {"n": n})

        async def sink(env: Env) -> None:
            await trio.sleep(1)  # nobody receives while the first messages arrive
            while True:
                await env.net.recv()

        sim.process("sender", sender)
        sim.process("sink", sink, idle=True)

    scenario = inline(setup, faults=plan)
    in_place = _traces(scenario, {}, range(30))
    empty_in_place, empty[0] = empty[0], 0
    with monkeypatch.context() as patch:
        patch.setattr(trio_internals, "STEP", False)
        by_trio = _traces(scenario, {}, range(30))
    assert in_place == by_trio
    assert any('"drop"' in t for t in in_place) and any('"dup"' in t for t in in_place)
    assert empty[0] > 30  # under trio's loop: an empty pass after each such decision
    assert empty_in_place == 0


def test_a_keyboard_interrupt_pending_is_left_to_trio(monkeypatch: pytest.MonkeyPatch) -> None:
    """``may_step`` refuses while trio has a KeyboardInterrupt to deliver, a call in its
    entry queue, a task waiting on a file descriptor, a ``wait_all_tasks_blocked``
    waiting, or an instrument on I/O waits or before task steps; an instrument after
    task steps is called by the step itself, as trio's loop calls it."""

    class Entry:
        def __init__(self) -> None:
            self.queue: list[object] = []
            self.idempotent_queue: dict[object, None] = {}

    class IOManager:
        def __init__(self) -> None:
            self._registered = {3: object()}  # trio's own wake-up socket

    class Runner:
        def __init__(self) -> None:
            self.ki_pending = False
            self.waiting_for_idle: dict[object, object] = {}
            self.instruments: dict[str, object] = {"task_spawned": object()}
            self.entry_queue = Entry()
            self.io_manager = IOManager()

    runner = Runner()
    assert trio_internals.may_step(runner)
    runner.entry_queue.queue.append(object())
    assert not trio_internals.may_step(runner)
    runner.entry_queue = Entry()
    runner.entry_queue.idempotent_queue[object()] = None
    assert not trio_internals.may_step(runner)
    runner.entry_queue = Entry()
    runner.io_manager._registered[7] = object()  # a task waits on a file descriptor
    assert not trio_internals.may_step(runner)
    del runner.io_manager._registered[7]
    runner.ki_pending = True
    assert not trio_internals.may_step(runner)
    runner.ki_pending = False
    runner.waiting_for_idle = {(0.0, 1): object()}
    assert not trio_internals.may_step(runner)
    runner.waiting_for_idle = {}
    for hook in ("before_task_step", "before_io_wait", "after_io_wait"):
        runner.instruments = {hook: object()}
        assert not trio_internals.may_step(runner)
    runner.instruments = {"after_task_step": object()}
    assert trio_internals.may_step(runner)


def test_an_instrument_added_during_a_step_sees_that_step_as_under_trio() -> None:
    """trio asks for ``after_task_step`` after the step, so an instrument the step
    itself installs sees it; a step taken in place must give it the same."""

    def run(in_place: bool) -> list[str]:
        seen: list[str] = []
        parked: list[trio.lowlevel.Task] = []

        class After(trio.abc.Instrument):
            def after_task_step(self, task: trio.lowlevel.Task) -> None:
                seen.append(task.name.rsplit(".", 1)[-1])

        class Stepping(trio.abc.Clock):
            def start_clock(self) -> None:
                pass

            def current_time(self) -> float:
                return 0.0

            def deadline_to_sleep_time(self, deadline: float) -> float:
                if not parked:
                    return 0.0
                task = parked.pop()
                if in_place:
                    trio_internals.step(trio_internals.RUN_CONTEXT.runner, task,
                                        trio_internals.NOTHING)
                else:
                    trio_internals.wake(task)
                return 0.0

        def _abort(_: object) -> trio.lowlevel.Abort:
            return trio.lowlevel.Abort.SUCCEEDED

        async def sleeper() -> None:
            parked.append(trio.lowlevel.current_task())
            await trio_internals.park(_abort)
            trio.lowlevel.add_instrument(After())
            parked.append(trio.lowlevel.current_task())
            await trio_internals.park(_abort)

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sleeper)

        trio.run(main, clock=Stepping())
        return seen

    assert run(in_place=True) == run(in_place=False)
    assert run(in_place=True)[0] == "sleeper"


def test_a_task_an_invariant_makes_runnable_runs_in_the_same_batch_as_under_trio(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Checks run inside the decision: one that sets an Event makes a task runnable
    there, and trio would run it in one batch with the task chosen (newest first)."""

    def setup(sim: Sim, config: dict[str, Any]) -> None:
        sim.store("db")
        event = trio.Event()
        calls = [0]
        order: list[str] = []

        def pokes() -> bool:
            calls[0] += 1
            if calls[0] == 3:
                event.set()
            return True

        sim.invariant("pokes", pokes)

        async def parks(env: Env) -> None:
            for i in range(3):
                await env.store.get(f"a{i}")
                order.append("a")
                await env.store.get("a:" + "".join(order))

        async def waits(env: Env) -> None:
            await event.wait()
            order.append("w")
            await env.store.get("w:" + "".join(order))

        sim.process("a", parks, stores=["db"])
        sim.process("w", waits, stores=["db"])

    scenario = inline(setup)
    in_place, by_trio = _both_ways(monkeypatch, lambda: _traces(scenario, {}, range(10)))
    assert in_place == by_trio


def test_a_callback_queued_with_run_sync_soon_runs_when_it_would_under_trio(
    monkeypatch: pytest.MonkeyPatch, steps_counted: list[int],
) -> None:
    """trio runs what ``run_sync_soon`` queued once it polls for I/O, right after the
    hook: a step taken in place must leave that poll to trio's loop."""

    def setup(sim: Sim, config: dict[str, Any]) -> None:
        sim.store("db")
        event = trio.Event()

        async def queues(env: Env) -> None:
            await env.store.get("a")
            trio.lowlevel.current_trio_token().run_sync_soon(event.set)
            for i in range(4):
                await env.store.get(f"q{i}")

        async def waits(env: Env) -> None:
            await event.wait()
            await env.store.put("woken", 1)

        sim.process("q", queues, stores=["db"])
        sim.process("w", waits, stores=["db"])

    scenario = inline(setup)
    in_place, by_trio = _both_ways(monkeypatch, lambda: _traces(scenario, {}, range(20)))
    assert steps_counted[0] > 0
    assert in_place == by_trio


def test_a_task_waiting_on_a_file_descriptor_is_woken_when_it_would_be_under_trio(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """trio's I/O poll wakes a task waiting on a descriptor: while one waits, every
    step goes through trio's loop, so the poll comes where it always came."""

    def setup(sim: Sim, config: dict[str, Any]) -> None:
        sim.store("db")
        read_end, write_end = os.pipe()

        async def reader(env: Env) -> None:
            await env.store.get("r")
            await trio.lowlevel.wait_readable(read_end)
            os.read(read_end, 1)
            await env.store.put("read", 1)

        async def writer(env: Env) -> None:
            await env.store.get("a")
            os.write(write_end, b"x")
            for i in range(4):
                await env.store.get(f"w{i}")

        sim.process("r", reader, stores=["db"])
        sim.process("w", writer, stores=["db"])

    scenario = inline(setup)
    in_place, by_trio = _both_ways(monkeypatch, lambda: _traces(scenario, {}, range(10)))
    assert in_place == by_trio
    assert all(trace.endswith("pass quiescent") for trace in in_place)
