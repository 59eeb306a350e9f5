"""The kernel never hangs, never lets a dead incarnation act, and never calls a stuck run a pass.

Cases that used to hang run in a child process with a time limit, so that a
regression fails the test instead of hanging the suite.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import trio

from dst import Env, FaultPlan, Sim

from ..simkit import inline, many, one

#: Generous: each case finishes in well under a second when it is right.
HANG_LIMIT = 120


def _dst_run(tmp_path: Path, body: str, *args: str) -> subprocess.CompletedProcess[str]:
    scenario = tmp_path / "case.py"
    scenario.write_text(textwrap.dedent(body))
    return subprocess.run(
        [sys.executable, "-m", "dst", "run", str(scenario), "--out", str(tmp_path / "out"),
         *args],
        capture_output=True, text=True, timeout=HANG_LIMIT, cwd=tmp_path,
    )


def test_a_task_polling_a_flag_lets_the_parked_task_run(tmp_path: Path) -> None:
    """``while not flag: await trio.sleep(0)`` keeps trio busy; the scheduler steps in."""
    done = _dst_run(tmp_path, """
        import trio
        from dst import Scenario

        scenario = Scenario("poller", doc="a task polls a flag another sets after a store call")
        flag = {}

        async def main(env):
            async def setter():
                await env.store.put("x", 1)
                flag[env.name] = True

            async def poller():
                while not flag.get(env.name):
                    await trio.sleep(0)
                await env.store.put("seen", 1)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(poller)
                nursery.start_soon(setter)

        @scenario.setup
        def setup(sim, config):
            flag.clear()
            db = sim.store("db")
            sim.process("p", main, stores=["db"])
            return db

        @scenario.at_end("PollerSawTheFlag")
        def saw(db):
            return db.peek("seen") == 1
    """, "--seeds", "50")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "50 runs, 0 failed" in done.stdout


def test_tasks_that_spin_for_ever_are_a_livelock_naming_them(tmp_path: Path) -> None:
    done = _dst_run(tmp_path, """
        import trio
        from dst import Scenario

        scenario = Scenario("spin", doc="two tasks hand a turn back and forth for ever")

        async def main(env):
            async def spin():
                while True:
                    await trio.sleep(0)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(spin, name="left")
                nursery.start_soon(spin, name="right")

        @scenario.setup
        def setup(sim, config):
            sim.process("p", main)
    """, "--seeds", "3")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Livelock violated" in done.stdout
    assert "p/left" in done.stdout and "p/right" in done.stdout


def test_a_task_spinning_alone_is_a_livelock_while_preemptions_are_left(tmp_path: Path) -> None:
    """Held and released at every checkpoint with nothing else to run: still a livelock."""
    done = _dst_run(tmp_path, """
        import trio
        from dst import FaultPlan, Scenario

        scenario = Scenario("alone", doc="one task polls for ever",
                            faults=FaultPlan(preemptions=5))

        async def main(env):
            while True:
                await trio.sleep(0)

        @scenario.setup
        def setup(sim, config):
            sim.process("p", main)
    """, "--seeds", "2")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Livelock violated" in done.stdout


def test_stopping_with_a_call_parked_in_a_shield_ends_the_run(tmp_path: Path) -> None:
    """A violation while another task waits in a shielded Env call: the run still ends."""
    done = _dst_run(tmp_path, """
        import trio
        from dst import Scenario

        scenario = Scenario("shielded", doc="a shielded store call parked when the run stops")

        async def main(env):
            async def careful():
                with trio.CancelScope(shield=True):
                    await env.store.put("a", 1)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(careful)
                nursery.start_soon(env.store.put, "b", 1)

        @scenario.setup
        def setup(sim, config):
            db = sim.store("db")
            sim.process("p", main, stores=["db"])
            return db

        @scenario.invariant("NoB")
        def no_b(db):
            return db.peek("b") is None
    """, "--seeds", "20")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "NoB violated" in done.stdout


def test_a_shielded_loop_still_spinning_when_the_run_stops_is_ended(tmp_path: Path) -> None:
    done = _dst_run(tmp_path, """
        import trio
        from dst import Scenario

        scenario = Scenario("stubborn", doc="a shielded loop that ignores the end of the run")

        async def main(env):
            async def stubborn():
                with trio.CancelScope(shield=True):
                    while True:
                        await trio.sleep(0)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(stubborn)
                await env.store.put("b", 1)

        @scenario.setup
        def setup(sim, config):
            db = sim.store("db")
            sim.process("p", main, stores=["db"])
            return db

        @scenario.invariant("NoB")
        def no_b(db):
            return db.peek("b") is None
    """, "--seeds", "5")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "NoB violated" in done.stdout


def test_a_shielded_call_parked_at_a_crash_is_never_performed() -> None:
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def main(env: Env) -> None:
            await env.store.put("started", 1)
            with trio.CancelScope(shield=True):
                await env.store.put("shielded", 1)

        sim.process("p", main, stores=["db"])
        return sim.store("db")

    scenario = inline(setup, faults=FaultPlan(max_crashes=1, crash_weight=1.0))
    crashed_while_parked = 0
    for result in many(scenario, range(200)):
        records = result.trace().records
        refused = [r for r in records if r["type"] == "fault" and r["fault"] == "refused"]
        crash_at = next((i for i, r in enumerate(records)
                         if r["type"] == "fault" and r["fault"] == "crash"), None)
        if crash_at is None:
            continue
        if any(r["detail"] == "db.put(shielded)" for r in refused):
            crashed_while_parked += 1
        after = [r for r in records[crash_at:] if r["type"] == "decision"
                 and r["enabled"][r["chosen"]] == "p@db.put(shielded)"]
        restarted = any(r["type"] == "fault" and r["fault"] == "restart"
                        for r in records[crash_at:])
        if not restarted:
            assert after == [], f"seed {result.seed}: the dead process's write was performed"
            assert result.sim.stores["db"].peek("shielded") is None or any(
                r["type"] == "decision" and r["enabled"][r["chosen"]] == "p@db.put(shielded)"
                for r in records[:crash_at]
            )
    assert crashed_while_parked > 10


def test_an_old_incarnation_finishing_leaves_the_new_one_alive() -> None:
    """The old incarnation lingers in a shielded sleep past its crash and then returns."""

    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def main(env: Env) -> None:
            boots = await env.store.get("boots") or 0
            await env.store.put("boots", boots + 1)
            if boots == 0:
                with trio.CancelScope(shield=True):
                    await trio.sleep(1)  # outlives the crash unless the crash ends it
                return
            await env.clock.sleep(5)
            await env.store.put("done", boots)

        sim.process("p", main, stores=["db"])
        return sim.store("db")

    scenario = inline(setup, faults=FaultPlan(max_crashes=1, crash_weight=0.5))
    restarted = 0
    for result in many(scenario, range(200)):
        assert result.verdict == "pass", (result.seed, result.trace().records[-1])
        db = result.sim.stores["db"]
        if db.peek("boots") == 2:
            restarted += 1
            assert db.peek("done") == 1, f"seed {result.seed}: the new incarnation was stopped"
    assert restarted > 10


def test_a_task_started_in_another_process_nursery_dies_with_its_process() -> None:
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        shared: dict[str, trio.Nursery] = {}
        opened = trio.Event()

        async def host(env: Env) -> None:
            async with trio.open_nursery() as nursery:
                shared["nursery"] = nursery
                opened.set()
                await env.clock.sleep(10)

        async def guest(env: Env) -> None:
            async def ghost() -> None:
                await env.clock.sleep(1)
                await env.store.put("ghost", 1)

            await opened.wait()
            shared["nursery"].start_soon(ghost)
            await env.clock.sleep(100)

        sim.process("host", host, stores=["db"], crashable=False)
        sim.process("guest", guest, stores=["db"])
        return sim.store("db")

    scenario = inline(setup, faults=FaultPlan(max_crashes=1, crash_weight=50.0))
    crashed_first = 0
    for result in many(scenario, range(60)):
        records = result.trace().records
        crash = [i for i, r in enumerate(records) if r["type"] == "fault" and r["fault"] == "crash"]
        ghost = [i for i, r in enumerate(records) if r["type"] == "decision"
                 and r["enabled"][r["chosen"]].endswith("@db.put(ghost)")]
        if crash and (not ghost or crash[0] < ghost[0]):
            crashed_first += 1
            assert result.sim.stores["db"].peek("ghost") is None, result.seed
    assert crashed_first > 10


def test_two_tasks_taking_two_locks_in_opposite_orders_are_a_deadlock() -> None:
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def main(env: Env) -> None:
            first, second = trio.Lock(), trio.Lock()

            async def take(a: trio.Lock, b: trio.Lock, key: str) -> None:
                async with a:
                    await env.store.put(key, 1)
                    async with b:
                        await env.store.put(key, 2)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(take, first, second, "x", name="ab")
                nursery.start_soon(take, second, first, "y", name="ba")

        sim.process("p", main, stores=["db"])

    results = many(inline(setup), range(40))
    deadlocked = [r for r in results if r.violated == ["Deadlock"]]
    assert deadlocked, "no seed took the locks in the deadlocking order"
    message = deadlocked[0].trace().records[-1]["message"]
    assert "p/ab" in message and "p/ba" in message and "Lock.acquire" in message
    assert "test_kernel_soundness.py" in message  # where the user's code waits
    assert all(r.verdict == "pass" for r in results if r not in deadlocked)


def test_a_task_that_sleeps_for_ever_is_a_deadlock_unless_its_process_may_idle() -> None:
    def build(idle: bool) -> Any:
        def setup(sim: Sim, _: dict[str, Any]) -> Any:
            async def main(env: Env) -> None:
                await env.store.put("x", 1)
                await trio.sleep_forever()

            sim.process("server", main, stores=["db"], idle=idle)

        return inline(setup)

    stuck = one(build(idle=False))
    assert stuck.violated == ["Deadlock"]
    assert "server waits in trio.sleep_forever" in stuck.trace().records[-1]["message"]
    assert one(build(idle=True)).verdict == "pass"


def test_waiting_for_a_message_at_the_end_is_idle_not_a_deadlock() -> None:
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def server(env: Env) -> None:
            while True:
                await env.net.recv()

        async def client(env: Env) -> None:
            await env.net.send("server", "hi")

        sim.process("server", server)
        sim.process("client", client)

    assert all(r.verdict == "pass" for r in many(inline(setup), range(20)))


class _Worker:
    """A task made from an object with an async ``__call__`` (its repr holds an address)."""

    def __init__(self, key: str) -> None:
        self.key = key

    async def __call__(self, env: Env) -> None:
        await env.store.put(self.key, 1)


def test_a_task_from_a_callable_object_has_a_label_without_an_address() -> None:
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def main(env: Env) -> None:
            async with trio.open_nursery() as nursery:
                for key in ("a", "b", "c"):
                    nursery.start_soon(_Worker(key), env)

        sim.process("p", main, stores=["db"])

    result = one(inline(setup), seed=3)
    labels = {label for r in result.trace().records if r["type"] == "decision"
              for label in r["enabled"]}
    assert labels and all("0x" not in label for label in labels), labels
    assert any(label.startswith("p/_Worker") for label in labels), labels


def test_an_uncaught_error_names_the_user_line_and_keeps_the_frames() -> None:
    def lookup(table: dict[str, int]) -> int:
        return table["missing"]

    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def main(env: Env) -> None:
            await env.store.get("x")
            lookup({})

        sim.process("p", main, stores=["db"])

    result = one(inline(setup))
    assert result.violated == ["NoUncaughtError"]
    violation = result.trace().records[-1]
    assert violation["message"].startswith("p raised KeyError: 'missing' at ")
    assert "test_kernel_soundness.py" in violation["message"]
    assert "in lookup" in violation["message"]
    assert [f.rsplit(" in ", 1)[1] for f in violation["frames"]][-2:] == ["main", "lookup"]


def test_a_finalizer_that_logs_cannot_change_a_seed_trace() -> None:
    """Seed 2 alone and seed 2 after others: cyclic garbage is collected between seeds."""
    import structlog

    log = structlog.get_logger()

    class Noisy:
        def __init__(self) -> None:
            self.me = self  # a cycle: freed only by the collector

        def __del__(self) -> None:
            log.info("finalized")

    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def main(env: Env) -> None:
            for i in range(30):
                for _ in range(50):
                    Noisy()
                await env.store.put(f"k{i}", i)

        sim.process("p", main, stores=["db"])

    scenario = inline(setup)
    alone = one(scenario, seed=2).trace().text()
    batch = [r.trace().text() for r in many(scenario, range(0, 4))]
    assert batch[2] == alone
    assert "finalized" not in alone


def test_a_server_receiving_in_its_nursery_body_is_idle_not_a_deadlock() -> None:
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def server(env: Env) -> None:
            shutdown = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(shutdown.wait)
                while True:
                    await env.net.recv()

        async def client(env: Env) -> None:
            await env.net.send("server", "hi")

        sim.process("server", server)
        sim.process("client", client)

    assert all(r.verdict == "pass" for r in many(inline(setup), range(30)))
