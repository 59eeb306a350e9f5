"""asyncio processes (``sim.process(..., runtime="asyncio")``) under dst's scheduler.

Unmodified asyncio code runs on dst's event loop (``dst.sim.aio``) on virtual time,
beside trio processes; its ``env`` calls, ready callbacks and timers are the
kernel's choices; replay, ``--check-determinism``, crashes and the built-in
findings work as for trio code.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import sniffio
import structlog
import trio
from click.testing import CliRunner

from dst import Env, FaultPlan, ServiceFaults, Sim
from dst.cli import main as cli
from dst.registry import load
from dst.runner.single import replay_trace, run_seeds
from dst.sim.aio import SimLoop
from dst.trace.codec import loads_trace

from .simkit import events, inline, many, one

log = structlog.get_logger()


def _decisions(result: Any) -> list[list[str]]:
    return [r["enabled"] for r in result.trace().records if r["type"] == "decision"]


def _violation(result: Any) -> str:
    return str(next(r["message"] for r in result.trace().records if r["type"] == "violation"))


# -- unmodified asyncio code ------------------------------------------------------------------


async def _everything(env: Env) -> None:
    loop = asyncio.get_running_loop()
    assert isinstance(loop, SimLoop) and asyncio.get_event_loop() is loop
    log.info("library", name=sniffio.current_async_library())
    await env.store.put("a", 1)
    log.info("read", value=await env.store.get("a"))

    async def sleeper(seconds: float) -> float:
        await asyncio.sleep(seconds)
        return loop.time()

    log.info("gathered", at=await asyncio.gather(sleeper(2), sleeper(1), sleeper(0)))
    try:
        await asyncio.wait_for(asyncio.sleep(10), 3)
    except TimeoutError:
        log.info("wait_for timed out", now=env.clock.now())
    try:
        async with asyncio.timeout(5):
            await asyncio.sleep(10)
    except TimeoutError:
        log.info("timeout", now=env.clock.now())

    queue: asyncio.Queue[int] = asyncio.Queue(maxsize=1)
    lock, sem = asyncio.Lock(), asyncio.Semaphore(2)
    cond, event = asyncio.Condition(), asyncio.Event()
    got: list[int] = []

    async def producer() -> None:
        for i in range(3):
            async with sem:
                await queue.put(i)

    async def consumer() -> None:
        for _ in range(3):
            item = await queue.get()
            async with lock:
                got.append(item)
        async with cond:
            cond.notify_all()

    async def waiter() -> None:
        async with cond:
            await cond.wait_for(lambda: len(got) == 3)
        event.set()

    async with asyncio.TaskGroup() as group:
        group.create_task(waiter())
        group.create_task(producer())
        group.create_task(consumer())
    await event.wait()
    log.info("queue", got=got)

    called: list[str] = []
    loop.call_soon(called.append, "soon")
    loop.call_later(1, called.append, "later")
    await asyncio.sleep(2)
    log.info("callbacks", called=called, now=loop.time())
    log.info("thread", value=await asyncio.to_thread(sum, [1, 2, 3]))
    log.info("executor", value=await loop.run_in_executor(None, max, 4, 5))
    done, _ = await asyncio.wait([asyncio.ensure_future(sleeper(1)) for _ in range(3)])
    log.info("waited", n=len(done))


def test_unmodified_asyncio_code_runs_on_virtual_time() -> None:
    def setup(sim: Sim, config: dict[str, Any]) -> None:
        sim.store("db")
        sim.process("app", _everything, stores=["db"], runtime="asyncio")

    scenario = inline(setup)
    result = one(scenario)
    assert (result.verdict, result.ended) == ("pass", "quiescent"), result.violated
    said = {event: fields for _, event, fields in events(result)}
    assert said["library"] == {"name": "asyncio"}
    assert said["read"] == {"value": 1}
    assert said["gathered"] == {"at": [2.0, 1.0, 0.0]}
    assert said["wait_for timed out"] == {"now": 5.0}
    assert said["timeout"] == {"now": 10.0}
    assert said["queue"] == {"got": [0, 1, 2]}
    assert said["callbacks"] == {"called": ["soon", "later"], "now": 12.0}
    assert said["thread"] == {"value": 6} and said["executor"] == {"value": 5}
    assert said["waited"] == {"n": 3}
    assert result.virtual_time == 13.0
    assert all(r.verdict == "pass" for r in many(scenario, range(100)))


def test_a_trio_process_sees_no_asyncio_loop() -> None:
    seen: list[str] = []

    async def trio_side(env: Env) -> None:
        seen.append(sniffio.current_async_library())
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            seen.append("no loop")
        await env.store.put("t", 1)
        seen.append(sniffio.current_async_library())

    async def asyncio_side(env: Env) -> None:
        await env.store.put("a", 1)
        seen.append(sniffio.current_async_library())

    def setup(sim: Sim, config: dict[str, Any]) -> None:
        sim.store("db")
        sim.process("t", trio_side, stores=["db"])
        sim.process("a", asyncio_side, stores=["db"], runtime="asyncio")

    assert one(inline(setup)).verdict == "pass"
    assert sorted(seen) == ["asyncio", "no loop", "trio", "trio"]


# -- choices ----------------------------------------------------------------------------------


async def _two_writers(env: Env) -> None:
    async def write(key: str) -> None:
        await env.store.put(key, 1)
        await asyncio.sleep(0)
        await env.store.put(key + "2", 1)

    await asyncio.gather(write("x"), write("y"))


def test_env_calls_and_ready_callbacks_are_the_kernels_choices() -> None:
    def setup(sim: Sim, config: dict[str, Any]) -> None:
        sim.store("db")
        sim.process("p", _two_writers, stores=["db"], runtime="asyncio")

    results = many(inline(setup, faults=FaultPlan(preemptions=2)), range(200))
    options = {label for r in results for enabled in _decisions(r) for label in enabled}
    # Both tasks' calls parked at once, each labelled with the asyncio task that made it;
    # while preemptions last, which ready task runs next is a choice as well.
    assert {"p/write@db.put(x)", "p/write#2@db.put(y)", "p/write@run", "p/write#2@run"} <= options
    orders = {tuple(k for k in ("x", "y", "x2", "y2") if r.sim.stores["db"].peek(k))
              for r in results}
    assert orders == {("x", "y", "x2", "y2")}

    fifo = many(inline(setup, faults=FaultPlan(preemptions=0)), range(50))
    assert not any(label.endswith("@run") for r in fifo for d in _decisions(r) for label in d)


def test_a_reply_runs_its_task_before_the_held_ones() -> None:
    """A decision's continuation goes first, as a trio task woken by a decision does."""
    order: list[str] = []

    async def app(env: Env) -> None:
        async def spinner() -> None:
            for _ in range(3):
                order.append("spin")
                await asyncio.sleep(0)

        async def caller() -> None:
            await env.store.get("k")
            order.append("reply")

        await asyncio.gather(caller(), spinner())

    def setup(sim: Sim, config: dict[str, Any]) -> None:
        sim.store("db")
        sim.process("p", app, stores=["db"], runtime="asyncio")

    scenario = inline(setup, faults=FaultPlan(preemptions=2))
    seen = set()
    for seed in range(200):
        order.clear()
        one(scenario, seed)
        seen.add(tuple(order))
    assert ("spin", "reply", "spin", "spin") in seen  # the reply taken while spinner is held


def test_an_asyncio_timer_races_a_late_reply() -> None:
    async def app(env: Env) -> None:
        try:
            reply = await asyncio.wait_for(env.services.call("pay", "charge", {}), 5)
            await env.store.put("reply", reply)
        except TimeoutError:
            await env.store.put("timed out", env.clock.now())

    def setup(sim: Sim, config: dict[str, Any]) -> Any:
        db = sim.store("db")
        sim.service("pay", lambda op, request: {"ok": True})
        sim.process("p", app, stores=["db"], runtime="asyncio")
        return db

    plan = FaultPlan(services={"pay": ServiceFaults(delay=1, delay_seconds=30.0, weight=1.0)})
    results = many(inline(setup, faults=plan), range(100))
    assert {r.verdict for r in results} == {"pass"}
    timed_out = [r for r in results if r.sim.stores["db"].peek("timed out") is not None]
    answered = [r for r in results if r.sim.stores["db"].peek("reply") is not None]
    assert timed_out and answered
    assert all(r.sim.stores["db"].peek("timed out") == 5.0 for r in timed_out)
    assert any("timer@5.000" in d for r in timed_out for d in _decisions(r))


def test_a_cancelled_receive_leaves_the_message_in_the_mailbox() -> None:
    async def receiver(env: Env) -> None:
        try:
            await asyncio.wait_for(env.net.recv(), 1)
        except TimeoutError:
            log.info("gave up", now=env.clock.now())
        message = await env.net.recv()
        log.info("received", body=message.body)

    async def sender(env: Env) -> None:
        await env.clock.sleep(2)
        await env.net.send("r", "hello")

    def setup(sim: Sim, config: dict[str, Any]) -> None:
        sim.process("r", receiver, runtime="asyncio")
        sim.process("s", sender)

    result = one(inline(setup))
    assert result.verdict == "pass", result.violated
    assert [e for _, e, _ in events(result)] == ["gave up", "received"]


# -- trio and asyncio together ----------------------------------------------------------------


async def _asyncio_server(env: Env) -> None:
    while True:
        message = await env.net.recv()
        reply = await env.services.call("upper", "up", message.body)
        await env.net.send(message.source, reply)


async def _trio_client(env: Env) -> None:
    for word in ("ping", "pong"):
        await env.net.send("server", word)
        with trio.move_on_after(10):
            message = await env.net.recv()
            await env.store.put(f"got/{word}", message.body)


def _mixed(sim: Sim, config: dict[str, Any]) -> Any:
    db = sim.store("db")
    sim.service("upper", lambda op, request: str(request).upper())
    sim.process("server", _asyncio_server, runtime="asyncio")
    sim.process("client", _trio_client, stores=["db"])
    return db


def test_a_trio_process_and_an_asyncio_process_exchange_messages() -> None:
    results = many(inline(_mixed), range(100))
    assert {(r.verdict, r.ended) for r in results} == {("pass", "quiescent")}
    for r in results:
        assert r.sim.stores["db"].peek("got/ping") == "PING"
        assert r.sim.stores["db"].peek("got/pong") == "PONG"
    lossy = many(inline(_mixed, faults=FaultPlan(max_drops=1)), range(100))
    assert {r.verdict for r in lossy} == {"pass"}
    assert any(r.sim.stores["db"].peek("got/ping") is None for r in lossy)


# -- replay and determinism -------------------------------------------------------------------


def test_replay_is_byte_identical_on_asyncio_runs() -> None:
    for case, config in (("aio_lost_wakeup", {"fixed": False}), ("aio_queue_cancel", {})):
        scenario = load(str(Path(__file__).parent / "litmus" / f"{case}.py"))
        results: list[Any] = []
        run_seeds(scenario, scenario.checked_config(config), range(40), results.append)
        for result in results:
            written = loads_trace(result.trace().text())
            replayed = replay_trace(scenario, written)
            assert replayed.divergence is None, replayed.divergence
            assert replayed.trace().record_lines() == written.record_lines()


def test_counter_asyncio_runs_decision_for_decision_as_counter() -> None:
    trio_counter, asyncio_counter = load("counter"), load("counter_asyncio")
    for config in ({"cas": False}, {"cas": True, "workers": 3}):
        a: list[Any] = []
        b: list[Any] = []
        run_seeds(trio_counter, trio_counter.checked_config(config), range(30), a.append)
        run_seeds(asyncio_counter, asyncio_counter.checked_config(config), range(30), b.append)
        for x, y in zip(a, b, strict=True):
            assert x.trace().record_lines() == y.trace().record_lines(), x.seed


DETERMINISM = '''
import asyncio
import structlog
from dst import FaultPlan, Scenario

log = structlog.get_logger()
scenario = Scenario("aio_mix", doc="asyncio features under a crash and preemptions",
                    faults=FaultPlan(max_crashes=1, max_drops=1, preemptions=3))


async def app(env):
    async def one(i):
        await asyncio.sleep(i % 2)
        await env.store.put(f"k{i}", i)
        return i
    tasks = [asyncio.create_task(one(i)) for i in range(4)]
    done, pending = await asyncio.wait(tasks, timeout=0.5)
    log.info("first", done=sorted(t.result() for t in done), order=[t.get_name() for t in done])
    await asyncio.gather(*pending)
    await env.net.send("peer", "hi")
    try:
        reply = await asyncio.wait_for(env.net.recv(), 5)
        log.info("reply", body=reply.body)
    except TimeoutError:
        log.info("no reply")


async def peer(env):
    message = await env.net.recv()
    await env.net.send(message.source, message.body + "!")


@scenario.setup
def setup(sim, config):
    sim.process("app", app, stores=["db"], runtime="asyncio")
    sim.process("peer", peer)
'''


def test_check_determinism_holds_on_asyncio_runs(tmp_path: Path) -> None:
    path = tmp_path / "aio_mix.py"
    path.write_text(DETERMINISM)
    result = CliRunner().invoke(cli, ["run", str(path), "--seeds", "40", "--check-determinism",
                                      "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "40 of 40 seeds replayed identically" in result.output


# -- crashes ----------------------------------------------------------------------------------


async def _crashy(env: Env) -> None:
    loop = asyncio.get_running_loop()
    loop.call_later(50, lambda: log.info("a callback of the dead loop ran"))

    async def beat(i: int) -> None:
        try:
            while True:
                await env.store.put(f"beat/{i}", env.clock.now())
                await asyncio.sleep(1)
        finally:
            log.info("unwound", i=i)
            await env.store.put("unwound", i)  # refused: the process is dead

    async with asyncio.TaskGroup() as group:
        for i in range(2):
            group.create_task(beat(i))


def test_a_crash_kills_every_asyncio_task_of_the_incarnation() -> None:
    def setup(sim: Sim, config: dict[str, Any]) -> Any:
        db = sim.store("db")
        sim.process("p", _crashy, stores=["db"], runtime="asyncio")
        return db

    scenario = inline(setup, faults=FaultPlan(max_crashes=1, crash_weight=0.5), max_steps=80)
    crashed = 0
    for result in many(scenario, range(60)):
        assert result.verdict == "pass", result.violated
        records = result.trace().records
        faults = [(r["fault"], r["detail"]) for r in records if r["type"] == "fault"]
        assert ("refused", "db.put(unwound)") not in faults or ("crash", "") in faults
        assert result.sim.stores["db"].peek("unwound") is None
        assert not any(r["type"] == "event" and "dead loop" in r["event"] for r in records)
        if ("crash", "") not in faults:
            continue
        crashed += 1
        at = next(i for i, r in enumerate(records)
                  if r["type"] == "fault" and r["fault"] == "crash")
        step = records[at]["step"]
        # At the crash, each started task's coroutine is closed once (its finally runs,
        # its call refused); no callback of the dead incarnation's loop runs after that.
        unwinding = [r for r in records[at:] if r["step"] == step and r["type"] != "decision"]
        assert [r.get("event") or r["fault"] for r in unwinding] in (
            ["crash"], ["crash", "unwound", "refused"],
            ["crash", "unwound", "refused", "unwound", "refused"])
        restarted = [i for i, r in enumerate(records) if r["type"] == "fault"
                     and r["fault"] == "restart"]
        later = records[restarted[0]:] if restarted else []
        assert all(r.get("event") != "unwound" or r["step"] > step for r in later)
    assert crashed > 10


# -- findings ---------------------------------------------------------------------------------


def _run(main: Any, **kw: Any) -> Any:
    def setup(sim: Sim, config: dict[str, Any]) -> None:
        sim.store("db")
        sim.process("p", main, stores=["db"], runtime="asyncio", **kw)

    return one(inline(setup))


def test_a_task_blocked_for_ever_is_a_deadlock_named_by_task() -> None:
    async def main(env: Env) -> None:
        event = asyncio.Event()
        lock = asyncio.Lock()
        await lock.acquire()

        async def locked() -> None:
            async with lock:
                pass

        await asyncio.gather(event.wait(), locked())

    result = _run(main)
    assert result.violated == ["Deadlock"]
    message = _violation(result)
    assert "p/wait waits in asyncio.Event.wait" in message
    assert "p/locked waits in asyncio.Lock.acquire at test_asyncio.py" in message
    assert _run(main, idle=True).violated == []


def test_an_asyncio_task_that_spins_is_a_livelock() -> None:
    async def main(env: Env) -> None:
        while True:
            await asyncio.sleep(0)

    result = _run(main)
    assert result.violated == ["Livelock"]


def test_exceptions_nobody_sees_are_uncaught_errors() -> None:
    async def forgotten(env: Env) -> None:
        async def fails() -> None:
            await asyncio.sleep(0)
            raise ValueError("nobody awaits me")

        asyncio.create_task(fails())  # noqa: RUF006 - the bug: nobody keeps or awaits it
        await asyncio.sleep(1)
        await env.store.put("after", 1)

    result = _run(forgotten)
    assert result.violated == ["NoUncaughtError"]
    assert _violation(result).startswith("p/fails raised ValueError: nobody awaits me at "
                                         "test_asyncio.py:")
    assert result.sim.stores["db"].peek("after") is None

    async def kept(env: Env) -> None:
        async def fails() -> None:
            raise KeyError("kept, never awaited")

        task = asyncio.create_task(fails())
        await asyncio.sleep(1)
        log.info("still holding", done=task.done())

    result = _run(kept)
    assert result.violated == ["NoUncaughtError"]
    assert "p/fails raised KeyError" in _violation(result)

    held: list[asyncio.Task[None]] = []  # alive after the process ended: no finalizer tells

    async def held_outside(env: Env) -> None:
        async def fails() -> None:
            raise KeyError("held by the scenario, never awaited")

        held.append(asyncio.create_task(fails()))
        await asyncio.sleep(1)

    result = _run(held_outside)
    assert result.violated == ["NoUncaughtError"]
    assert "p/fails raised KeyError: 'held by the scenario" in _violation(result)
    held.clear()

    async def in_callback(env: Env) -> None:
        asyncio.get_running_loop().call_soon(lambda: 1 / 0)
        await asyncio.sleep(1)

    result = _run(in_callback)
    assert result.violated == ["NoUncaughtError"]
    assert "ZeroDivisionError" in _violation(result)

    async def main_raises(env: Env) -> None:
        await env.store.put("x", 1)
        raise RuntimeError("main")

    result = _run(main_raises)
    assert result.violated == ["NoUncaughtError"]
    assert _violation(result).startswith("p raised RuntimeError: main at test_asyncio.py:")

    async def retrieved(env: Env) -> None:
        async def fails() -> None:
            raise ValueError("seen")

        task = asyncio.create_task(fails())
        await asyncio.sleep(1)
        try:
            await task
        except ValueError:
            log.info("handled")

    assert _run(retrieved).violated == []


def test_the_guard_traps_asyncio_code() -> None:
    async def main(env: Env) -> None:
        await asyncio.sleep(1)
        log.info("now", t=time.time())

    result = _run(main)
    assert result.violated == ["Nondeterminism"]
    assert "time.time()" in _violation(result)


def test_asyncio_runs_leave_nothing_behind() -> None:
    """Leftover tasks are cancelled at the end as ``asyncio.run`` does; a later seed
    starts from nothing (labels, task names, tasks and futures hashed by creation)."""
    async def main(env: Env) -> None:
        async def forever() -> None:
            try:
                await asyncio.Event().wait()
            finally:
                log.info("cancelled at the end")

        task = asyncio.create_task(forever())
        await asyncio.sleep(1)
        current = asyncio.current_task()
        assert current is not None
        log.info("names", main=current.get_name(), other=task.get_name(),
                 hash=hash(task))

    def setup(sim: Sim, config: dict[str, Any]) -> None:
        sim.process("p", main, runtime="asyncio")

    results = many(inline(setup), range(5))
    assert {r.verdict for r in results} == {"pass"}
    assert {tuple(map(str, events(r))) for r in results} == {tuple(map(str, events(results[0])))}
    assert [e for _, e, _ in events(results[0])] == ["names", "cancelled at the end"]
    assert events(results[0])[0][2] == {"main": "p", "other": "forever", "hash": 2}


# -- streams over the simulated network -------------------------------------------------------


async def _line_server(env: Env) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                log.info("server got", line=line.decode().strip())
                writer.write(line.upper())
                await writer.drain()
            writer.close()
            await writer.wait_closed()
        except ConnectionError:
            log.info("client went away")

    server = await asyncio.start_server(handle, None, 8080)
    assert server.sockets and server.is_serving()
    async with server:
        await server.serve_forever()


async def _connect_with_retries(open_it: Any) -> Any:
    while True:
        try:
            return await open_it()
        except OSError:
            await asyncio.sleep(1) if sniffio.current_async_library() == "asyncio" \
                else await trio.sleep(1)


async def _asyncio_line_client(env: Env) -> None:
    reader, writer = await _connect_with_retries(
        lambda: asyncio.open_connection("server", 8080))
    assert writer.get_extra_info("peername")[1] == 8080
    try:
        for word in ("ping", "pong"):
            writer.write(word.encode() + b"\n")
            await writer.drain()
            reply = await reader.readline()
            await env.store.put(f"asyncio/{word}", reply.decode().strip())
        writer.close()
        await writer.wait_closed()
    except ConnectionError as exc:
        log.info("connection broke", error=type(exc).__name__)


async def _trio_line_client(env: Env) -> None:
    stream = await _connect_with_retries(lambda: trio.open_tcp_stream("server", 8080))
    try:
        async with stream:
            await stream.send_all(b"trio\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = await stream.receive_some(100)
                if not chunk:
                    break
                data += chunk
            await env.store.put("trio/trio", data.decode().strip())
    except trio.BrokenResourceError:
        log.info("connection broke")


def _streams(sim: Sim, config: dict[str, Any]) -> Any:
    db = sim.store("db")
    sim.process("server", _line_server, runtime="asyncio", idle=True, crashable=False)
    sim.process("aclient", _asyncio_line_client, stores=["db"], runtime="asyncio")
    sim.process("tclient", _trio_line_client, stores=["db"])
    return db


def test_asyncio_streams_over_the_simulated_network() -> None:
    results = many(inline(_streams), range(150))
    assert {(r.verdict, r.ended) for r in results} == {("pass", "quiescent")}
    for r in results:
        assert dict(r.sim.stores["db"].scan("")) == {
            "asyncio/ping": "PING", "asyncio/pong": "PONG", "trio/trio": "TRIO"}
    labels = {label for r in results for d in _decisions(r) for label in d}
    assert {"aclient@tcp.connect(server:8080)", "server/accept-8080@tcp.accept(8080)"} <= labels
    assert any(label.startswith("server/c1@tcp.recv(c1") for label in labels)

    broken = many(inline(_streams, faults=FaultPlan(max_resets=1)), range(150))
    assert {r.verdict for r in broken} == {"pass"}
    assert any(len(dict(r.sim.stores["db"].scan(""))) < 3 for r in broken)
    assert all(r.trace().text() == t.trace().text() for r, t in zip(
        broken[:20], many(inline(_streams, faults=FaultPlan(max_resets=1)), range(20)),
        strict=True))


def test_the_documented_asyncio_example_runs(tmp_path: Path) -> None:
    page = Path(__file__).resolve().parent.parent / "docs" / "scenarios.md"
    section = page.read_text(encoding="utf-8").split("## asyncio code", 1)[1]
    block = section.split("```python\n", 1)[1].split("```", 1)[0]
    source = tmp_path / "agent_aio.py"
    source.write_text(block, encoding="utf-8")
    scenario = load(str(source))
    results: list[Any] = []
    run_seeds(scenario, scenario.default_config(), range(50), results.append)
    assert {(r.verdict, r.ended) for r in results} == {("pass", "quiescent")}
    labels = {label for r in results for d in _decisions(r) for label in d}
    # asyncio.wait_for runs the call in a task of its own before Python 3.12, and in
    # the caller's task from 3.12 on (it became asyncio.timeout around the awaitable).
    own_task = sys.version_info < (3, 12)
    assert ("agent/order-a:call@call:supplier.order" if own_task
            else "agent/order-a@call:supplier.order") in labels


def test_a_pydantic_ai_agent_runs_on_the_loop() -> None:
    """A real asyncio framework (anyio task groups, tool calls) on dst's loop, under the
    guard: pydantic-ai's own clock and ``os.urandom`` reads (its uuid7 run ids, message
    timestamps) are an installed library's, answered by the run."""
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import FunctionModel

    from dst.runner.single import _result
    from dst.sim.kernel import Sim as Kernel
    from dst.sim.run import run_sims
    from dst.sim.strategy import RandomWalk

    async def model(messages: Any, info: Any) -> ModelResponse:
        if any(isinstance(p, ToolReturnPart) for p in messages[-1].parts):
            return ModelResponse(parts=[TextPart("ordered")])
        return ModelResponse(parts=[ToolCallPart("place_order", {"sku": "widget"})])

    async def agent_main(env: Env) -> None:
        agent: Agent[None, str] = Agent(FunctionModel(model))

        @agent.tool_plain
        async def place_order(sku: str) -> str:
            return str(await env.services.call("supplier", "order", {"sku": sku}))

        result = await agent.run("order a widget")
        await env.store.put("done", result.output)

    def setup(sim: Sim, config: dict[str, Any]) -> None:
        sim.store("db")
        sim.service("supplier", lambda op, request: {"ok": True})
        sim.process("agent", agent_main, stores=["db"], runtime="asyncio")

    scenario = inline(setup)
    results: list[Any] = []
    run_sims(((Kernel(seed, RandomWalk(seed)), lambda sim: scenario.build(sim, {}))
              for seed in range(20)),
             lambda sim: results.append(_result(scenario, {}, sim)))
    assert {(r.verdict, r.ended) for r in results} == {("pass", "quiescent")}, [
        _violation(r) for r in results if r.violated][:1]
    assert all(r.sim.stores["db"].peek("done") == "ordered" for r in results)
    labels = {label for r in results for d in _decisions(r) for label in d}
    assert "agent/place_order@call:supplier.order" in labels
