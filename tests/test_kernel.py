"""The scheduler, virtual time, processes, links and faults, on inline scenarios."""

from __future__ import annotations

import time as _wall
from typing import Any

import pytest
import trio

from dst import Env, FaultPlan, Sim
from dst.errors import ScenarioError
from dst.runner.single import replay_trace, run_one
from dst.sim.strategy import Replay

from .simkit import events, inline, many, one


def test_tasks_may_use_trio_locks_events_and_channels_between_choice_points() -> None:
    """Quiescence stays sound while tasks block on trio primitives, not only on dst."""

    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        lock = trio.Lock()
        ready = trio.Event()
        send, recv = trio.open_memory_channel[int](0)
        state = {"done": 0}

        async def incrementer(env: Env) -> None:
            await ready.wait()
            for _ in range(3):
                async with lock:  # a task parked inside holds the lock; the other blocks on it
                    n = await env.store.get("n") or 0
                    await env.store.put("n", n + 1)
                state["done"] += 1
            await send.send(1)

        async def starter(env: Env) -> None:
            await env.store.get("n")
            ready.set()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_drain, recv)

        sim.process("a", incrementer, stores=["db"])
        sim.process("b", incrementer, stores=["db"])
        sim.process("starter", starter, stores=["db"])
        return sim.store("db"), state

    async def _drain(recv: trio.MemoryReceiveChannel[int]) -> None:
        for _ in range(2):
            await recv.receive()

    def no_lost(world: Any) -> bool:
        db, state = world
        return (db.peek("n") or 0) >= state["done"]

    results = many(inline(setup, invariants={"NoLost": no_lost}), range(200))
    assert all(r.verdict == "pass" for r in results)
    assert all(r.ended == "quiescent" for r in results)
    # 1 + 2 x 3 x 2 store calls in every seed, whatever the checkpoints between them.
    store_calls = {sum(1 for r_ in r.trace().records if r_["type"] == "decision"
                       and "@db." in r_["enabled"][r_["chosen"]]) for r in results}
    assert store_calls == {13}
    assert len({r.trace().sha256() for r in results}) > 10  # and the order varied


def _ping_under_a_timeout(sim: Sim, _: dict[str, Any]) -> Any:
    async def client(env: Env) -> None:
        await env.net.send("server", "ping")
        with trio.move_on_after(1.0) as scope:
            await env.net.recv()
        import structlog

        structlog.get_logger().info("timed out" if scope.cancelled_caught else "answered")

    async def server(env: Env) -> None:
        msg = await env.net.recv()
        await env.net.send(msg.source, "pong")

    sim.process("client", client)
    sim.process("server", server)


def test_without_a_slow_budget_a_timeout_never_fires_before_work_that_needs_no_time() -> None:
    runs = many(inline(_ping_under_a_timeout), range(100))
    assert {events(r)[-1][1] for r in runs} == {"answered"}
    assert not any(label.startswith("timer@") for r in runs for e, _ in r.trace().decisions
                   for label in e)


def test_a_timeout_and_a_message_race_as_a_slow_fault_and_both_orders_are_explored() -> None:
    runs = many(inline(_ping_under_a_timeout, faults=FaultPlan(max_slow=1)), range(100))
    assert {events(r)[-1][1] for r in runs} == {"timed out", "answered"}
    for r in runs:
        early = [e[c] for e, c in r.trace().decisions if e[c].endswith("!slow")]
        slow = [f for f in r.trace().records if f["type"] == "fault" and f["fault"] == "slow"]
        assert len(early) == len(slow) <= 1  # the budget, each spent one recorded
        assert (events(r)[-1][1] == "timed out") == bool(early)


def test_a_30_day_virtual_wait_completes_in_well_under_a_second() -> None:
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def waiter(env: Env) -> None:
            await env.clock.sleep(30 * 86400)
            await env.store.put("woke_at", env.clock.now())

        sim.process("waiter", waiter, stores=["db"])
        return sim.store("db")

    started = _wall.perf_counter()
    result = one(inline(setup))
    assert _wall.perf_counter() - started < 1.0
    assert result.sim.stores["db"].peek("woke_at") == 30 * 86400
    assert result.virtual_time == 30 * 86400


def test_a_crashed_process_cannot_write_from_a_finally_block() -> None:
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def worker(env: Env) -> None:
            boot = await env.store.get("boots") or 0
            await env.store.put("boots", boot + 1)
            try:
                await env.clock.sleep(10)
            finally:
                await env.store.put(f"cleanup/{boot}", True)

        sim.process("worker", worker, stores=["db"])
        return sim.store("db")

    scenario = inline(setup, faults=FaultPlan(max_crashes=1, crash_weight=1.0))
    crashed_while_waiting = 0
    for r in many(scenario, range(200)):
        records = r.sim.records
        crash_at = next((i for i, x in enumerate(records)
                         if x[0] == "fault" and x[3] == "crash"), None)
        if crash_at is None:
            continue
        db = r.sim.stores["db"]
        first_boot_started = db.peek("boots") == 2  # the crash came after boot 0 counted itself
        refused = [x for x in records[crash_at:] if x[0] == "fault" and x[3] == "refused"]
        if first_boot_started and refused:
            crashed_while_waiting += 1
            assert refused[0][5] == "db.put(cleanup/0)"
            assert db.peek("cleanup/0") is None  # the crashed finally wrote nothing
            assert db.peek("cleanup/1") is True  # the restarted process finished normally
    assert crashed_while_waiting > 10


def test_a_restarted_process_sees_only_durable_state() -> None:
    """The store survives a crash; the Env (mailbox, rng) and everything in memory do not."""

    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        boots: list[dict[str, Any]] = []

        async def worker(env: Env) -> None:
            boot = await env.store.get("boots") or 0
            boots.append({"boot": boot, "env": env,
                          "mailbox": len(sim.processes["worker"].mailbox)})
            await env.store.put("boots", boot + 1)
            await env.clock.sleep(5)

        async def pinger(env: Env) -> None:
            await env.net.send("worker", "hello")

        sim.process("worker", worker, stores=["db"])
        sim.process("pinger", pinger, crashable=False)
        return boots

    restarted = lost_mail = 0
    world: list[Any] = []

    def capture(sim: Sim, config: dict[str, Any]) -> Any:
        world.append(setup(sim, config))
        return world[-1]

    scenario = inline(capture, faults=FaultPlan(max_crashes=1, crash_weight=1.0))
    for seed in range(200):
        world.clear()
        result = one(scenario, seed)
        boots = world[0]
        if len(boots) < 2 or boots[1]["boot"] != 1:
            continue
        restarted += 1
        assert result.sim.stores["db"].peek("boots") == 2  # durable state carried over
        assert boots[1]["env"] is not boots[0]["env"]  # a fresh Env: new mailbox, new rng
        records = result.sim.records
        crash = next(i for i, x in enumerate(records) if x[0] == "fault" and x[3] == "crash")
        delivered_before = any(x[0] == "decision" and x[4][x[5]].startswith("deliver:")
                               for x in records[:crash])
        if delivered_before:
            lost_mail += 1
            assert boots[1]["mailbox"] == 0  # the unread message died with the process
    assert restarted > 10 and lost_mail > 0


def test_drops_and_duplicates_are_recorded_choices_within_their_budgets() -> None:
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def sender(env: Env) -> None:
            for i in range(5):
                await env.net.send("sink", i)

        async def sink(env: Env) -> None:
            while True:
                await env.net.recv()

        sim.process("sender", sender)
        sim.process("sink", sink)

    plan = FaultPlan(max_drops=1, max_dups=2, drop_weight=1.0, dup_weight=1.0)
    drops = dups = 0
    for r in many(inline(setup, faults=plan), range(100)):
        kinds = [x[3] for x in r.sim.records if x[0] == "fault"]
        assert kinds.count("drop") <= 1 and kinds.count("dup") <= 2
        drops += kinds.count("drop")
        dups += kinds.count("dup")
    assert drops > 0 and dups > 0


def test_an_exception_in_the_code_under_test_is_a_violation_not_a_dst_crash() -> None:
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def broken(env: Env) -> None:
            await env.store.get("x")
            raise KeyError("missing")

        sim.process("broken", broken, stores=["db"])

    result = one(inline(setup))
    assert result.violated == ["NoUncaughtError"]
    assert "broken raised KeyError" in result.trace().records[-1]["message"]


def test_an_exception_raised_inside_the_standard_library_names_the_user_s_line() -> None:
    import json

    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def parse(env: Env) -> None:
            await env.store.get("x")
            json.loads("{not json")

        sim.process("parse", parse, stores=["db"])

    message = one(inline(setup)).trace().records[-1]["message"]
    assert message.startswith("parse raised JSONDecodeError: ")
    assert " at test_kernel.py:" in message and " in parse (raised at decoder.py:" in message


def test_an_invariant_that_returns_none_is_reported_with_what_to_return() -> None:
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def idle(env: Env) -> None:
            await env.store.get("x")

        sim.process("idle", idle, stores=["db"])

    with pytest.raises(ScenarioError, match=r"^invariant Sloppy \(defined at .*test_kernel.py:"
                       r"\d+\) returned None .*True when it holds, and False or a message"):
        one(inline(setup, invariants={"Sloppy": lambda world: None}))


def test_data_choices_are_recorded_and_forced_on_replay() -> None:
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def picker(env: Env) -> None:
            for _ in range(5):
                await env.store.put("pick", sim.choose("llm", ["approve", "reject", "wait"]))

        sim.process("picker", picker, stores=["db"])

    scenario = inline(setup)
    picks = set()
    for seed in range(30):
        result = run_one(scenario, {}, seed)
        trace = result.trace()
        replayed = replay_trace(scenario, trace).trace()
        assert replayed.record_lines() == trace.record_lines()
        picks.add(result.sim.stores["db"].peek("pick"))
    assert picks == {"approve", "reject", "wait"}


def test_a_livelock_stops_at_the_step_bound() -> None:
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def ticker(env: Env) -> None:
            while True:
                await env.clock.sleep(1)
                await env.store.get("tick")

        sim.process("ticker", ticker, stores=["db"])

    result = one(inline(setup, max_steps=50))
    assert result.ended == "bound" and result.steps == 50 and result.verdict == "pass"


def _straight_line(extra_call: bool) -> Any:
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def worker(env: Env) -> None:
            await env.store.get("n")
            await env.store.put("n", 1)
            if extra_call:
                await env.store.get("extra")
            await env.store.put("n", 2)
            await env.store.get("n")

        sim.process("worker", worker, stores=["db"])
        sim.process("other", worker, stores=["db"])

    return setup


def test_a_scenario_changed_by_one_extra_call_diverges_at_that_step() -> None:
    original = inline(_straight_line(False))
    changed = inline(_straight_line(True))
    for seed in range(10):
        trace = run_one(original, {}, seed).trace()
        replay = Replay(trace.decisions)
        result = run_one(changed, {}, seed, strategy=lambda _s, r=replay: r)
        assert result.divergence is not None
        step = int(result.divergence.split("step ")[1].split(":")[0])
        # The first decision whose enabled list mentions the extra call is where it diverges.
        replayed = [r for r in result.trace().records if r["type"] == "decision"]
        assert len(replayed) == step - 1
        assert trace.decisions[: step - 1] == [(r["enabled"], r["chosen"]) for r in replayed]


def test_a_long_run_of_seeds_leaves_no_run_behind() -> None:
    """Batch after batch, what a finished run built (processes, their incarnations) is freed.

    A worker runs millions of seeds: anything a run leaves alive, even in a reference
    cycle, grows it without bound.  Collection is not forced here; the kernel's own
    collections between seeds and batches must be enough.
    """
    import gc

    from dst.sim.process import Process
    from dst.testing import check_seeds

    check_seeds("counter", 3000)  # 60 batches of 2 processes x 50 seeds: 6,000 processes
    alive = sum(1 for o in gc.get_objects() if type(o) is Process)
    # Garbage waits for the collector's thresholds (several hundred here), never for ever.
    assert alive < 2000, f"{alive} of the 6,000 processes of finished runs are still alive"


def test_a_finished_run_is_freed_by_refcounting_without_the_collector() -> None:
    """Dropping a run's result frees its ``Sim`` at once, records and world included.

    The approval scenario's fakes hold the ``Sim``, its invariants hold the world,
    its runtime keeps its ``Env`` in a cycle (orchestrator and agent), and crashes
    cancel parked calls: each of those once left the whole run for the cyclic
    collector, whose collections were ~6% of a seed.
    """
    import gc
    import weakref

    from dst.registry import load

    scenario = load("approval")
    config = scenario.default_config()
    collecting = gc.isenabled()
    gc.disable()
    try:
        for seed in range(20):
            result = run_one(scenario, config, seed)
            sim = weakref.ref(result.sim)
            del result
            assert sim() is None, f"seed {seed}: the finished run waits for the collector"
    finally:
        if collecting:
            gc.enable()


def test_receivers_share_a_mailbox_first_come_first_served_and_a_cancelled_one_leaves() -> None:
    """A delivery wakes the task of the process that has waited longest in ``recv``; one
    whose wait was cancelled (a timeout) waits no more, so no message is lost to it."""
    got: dict[int, list[tuple[str, Any]]] = {}

    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        mine: list[tuple[str, Any]] = got.setdefault(len(got), [])

        async def server(env: Env) -> None:
            async def receiver(name: str) -> None:
                mine.append((name, (await env.net.recv()).body))

            async with trio.open_nursery() as nursery:
                with trio.move_on_after(1):
                    await env.net.recv()  # nothing is sent before 5: this wait times out
                nursery.start_soon(receiver, "first")
                await trio.sleep(1)
                nursery.start_soon(receiver, "second")

        async def client(env: Env) -> None:
            await env.clock.sleep(5)
            await env.net.send("server", 1)
            await env.net.send("server", 2)

        sim.process("server", server)
        sim.process("client", client)

    results = many(inline(setup), range(20))
    assert all(r.verdict == "pass" and r.ended == "quiescent" for r in results)
    for seen in got.values():
        assert [name for name, _ in seen] == ["first", "second"]
        assert sorted(body for _, body in seen) == [1, 2]
    assert {seen[0][1] for seen in got.values()} == {1, 2}  # either message may come first


def test_a_full_collection_between_seeds_waits_for_the_oldest_generation_to_grow() -> None:
    """CPython's rule, which ``gc.collect(2)`` skips: walk the whole heap only once what
    reached the oldest generation since the last full walk is a quarter of what it kept."""
    import gc

    from dst.sim import run

    saved = run._Oldest.total, run._Oldest.asked_at
    try:
        run._Oldest.total = None
        assert run._full_collection_due(10, 10)  # no figure yet: collect, as CPython would
        now = len(gc.get_objects(2))
        run._Oldest.total, run._Oldest.asked_at = now, 0
        assert not run._full_collection_due(10, 10)  # nothing grew
        assert not run._full_collection_due(15, 10)  # asked too recently to walk it again
        run._Oldest.total = now // 2  # as if half the oldest generation were new since
        assert run._full_collection_due(20, 10)
    finally:
        run._Oldest.total, run._Oldest.asked_at = saved
