"""The durable runtime on real stores and trio's mock clock (no simulator)."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from dst.env import Json, ServiceUnavailable, Store
from dst.runtime import (
    LocalNetwork,
    LocalServices,
    MemoryStore,
    SQLiteStore,
    TrioClock,
    make_env,
)
from dst.runtime.durable import (
    Context,
    NonDeterminismError,
    RetryPolicy,
    StepCall,
    StepFailed,
    Worker,
    WorkflowType,
    log_prefix,
    meta_key,
)

WF = Callable[[Context], Awaitable[Json]]


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "memory":
        yield MemoryStore()
    else:
        with SQLiteStore(tmp_path / "wf.db") as db:
            yield db


class Rig:
    """One store and network; ``boot`` starts a worker, ``crash`` drops it."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.net = LocalNetwork()
        self.calls: list[tuple[str, str, int]] = []
        self.scope: trio.CancelScope | None = None
        # Deadlines in a log are absolute, so every boot must count time from
        # the same epoch (a real deployment uses wall-clock time).
        self.clock = TrioClock(start=0.0)

    async def boot(self, nursery: trio.Nursery, types: list[WorkflowType],
                   start: list[tuple[str, str, Json]], **kw: Any) -> Worker:
        env = make_env("p", stores={"main": self.store}, network=self.net,
                       services=LocalServices(), seed=1, clock=self.clock)
        worker = Worker(env, types, **kw)

        async def run(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
            with trio.CancelScope() as scope:
                self.scope = scope
                task_status.started()
                await worker.run(start)

        await nursery.start(run)
        return worker

    def crash(self) -> None:
        assert self.scope is not None
        self.scope.cancel()

    def effect(self, name: str) -> Callable[[StepCall], Awaitable[Json]]:
        async def fn(call: StepCall) -> Json:
            self.calls.append((name, call.key, call.attempt))
            await trio.sleep(0)  # an outside call yields, as a real one does
            return f"{name}-done"
        return fn


def run(main: Callable[[], Awaitable[None]]) -> None:
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_after_a_crash_recorded_steps_return_their_output_without_running(store: Store) -> None:
    async def main() -> None:
        rig = Rig(store)

        async def wf(ctx: Context) -> Json:
            a = await ctx.step("a", rig.effect("a"))
            await ctx.sleep(3 * 86400)
            b = await ctx.step("b", rig.effect("b"), {"a": a})
            return {"a": a, "b": b}

        types = [WorkflowType("wf", wf)]
        async with trio.open_nursery() as n:
            await rig.boot(n, types, [("w1", "wf", None)])
            await trio.sleep(86400)  # crash on day 1 of the 3-day wait
            rig.crash()
        async with trio.open_nursery() as n:
            await rig.boot(n, types, [("w1", "wf", None)])
            await trio.sleep(5 * 86400)
            rig.crash()
        assert [c[0] for c in rig.calls] == ["a", "b"]
        meta = await store.get(meta_key("w1"))
        assert isinstance(meta, dict)
        assert meta["status"] == "completed"
        assert meta["result"] == {"a": "a-done", "b": "b-done"}

    run(main)


@pytest.mark.parametrize("first", [True, False], ids=["first-step", "after-a-step"])
def test_a_wait_that_crashed_ends_when_it_was_due_not_later(store: Store, first: bool) -> None:
    """The deadline comes from the log: a timer step (first step of a run) or the
    previous step's logged time."""

    async def main() -> None:
        rig = Rig(store)
        ended: list[float] = []

        async def wf(ctx: Context) -> Json:
            if not first:
                await ctx.step("before", rig.effect("before"))
            await ctx.sleep(3 * 86400)
            await ctx.step("after", rig.effect("after"))
            ended.append(trio.current_time())
            return None

        types = [WorkflowType("wf", wf)]
        start = trio.current_time()
        async with trio.open_nursery() as n:
            await rig.boot(n, types, [("w1", "wf", None)])
            await trio.sleep(2 * 86400)
            rig.crash()
        async with trio.open_nursery() as n:
            await rig.boot(n, types, [])
            await trio.sleep(4 * 86400)
            rig.crash()
        assert ended and ended[0] - start == pytest.approx(3 * 86400)
        entries: list[Any] = [v for _, v in await store.scan(log_prefix("w1"))]
        names = [v["name"] for v in entries]
        assert names == (["timer", "wait", "after"] if first else ["before", "wait", "after"])

    run(main)


def test_retries_back_off_on_the_clock_with_one_key_for_every_attempt(store: Store) -> None:
    async def main() -> None:
        rig = Rig(store)
        times: list[float] = []

        async def flaky(call: StepCall) -> Json:
            times.append(trio.current_time())
            rig.calls.append(("order", call.key, call.attempt))
            if call.attempt < 4:
                raise ServiceUnavailable("down")
            return "ok"

        async def wf(ctx: Context) -> Json:
            return await ctx.step("order", flaky, retry=RetryPolicy(6, 2.0, 2.0))

        async with trio.open_nursery() as n:
            await rig.boot(n, [WorkflowType("wf", wf)], [("w1", "wf", None)])
            await trio.sleep(60)
            rig.crash()
        assert [c[2] for c in rig.calls] == [1, 2, 3, 4]
        assert len({c[1] for c in rig.calls}) == 1
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert gaps == pytest.approx([2.0, 4.0, 8.0])

    run(main)


def test_a_message_is_routed_by_workflow_id_and_a_resent_one_lands_once(store: Store) -> None:
    async def main() -> None:
        rig = Rig(store)
        got: list[Json] = []

        async def wf(ctx: Context) -> Json:
            for _ in range(2):
                msg, _ = await ctx.wait(["note"], timeout=86400)
                got.append(msg)
            return None

        async with trio.open_nursery() as n:
            await rig.boot(n, [WorkflowType("wf", wf)], [("w1", "wf", None), ("w2", "wf", None)])
            sender = rig.net.endpoint("sender")
            for _ in range(2):  # the same message twice (a resend)
                await sender.send("p", {"to": "w1", "id": "m1", "kind": "note", "n": 1})
            await trio.sleep(3 * 86400)
            rig.crash()
        assert got.count(None) == 3  # w1's second wait and both of w2's time out
        assert [g for g in got if g] == [{"to": "w1", "id": "m1", "kind": "note", "n": 1}]
        acks = [(await sender.recv()).body for _ in range(2)]
        assert acks == [{"ack": "m1"}, {"ack": "m1"}]

    run(main)


def test_continue_as_new_keeps_the_log_bounded_and_carries_state(store: Store) -> None:
    async def main() -> None:
        rig = Rig(store)
        sizes: list[int] = []

        async def wf(ctx: Context) -> Json:
            count: Any = ctx.carried or 0
            while count < 50:
                await ctx.step("tick", rig.effect("tick"), {"n": count})
                count += 1
                if ctx.steps >= 10:
                    sizes.append(len(await store.scan(log_prefix(ctx.id))))
                    ctx.continue_as_new(count)
            return count

        async with trio.open_nursery() as n:
            await rig.boot(n, [WorkflowType("wf", wf)], [("w1", "wf", None)])
            await trio.sleep(1)
            rig.crash()
        meta = await store.get(meta_key("w1"))
        assert isinstance(meta, dict)
        assert meta["result"] == 50 and meta["run"] == 5
        assert len(rig.calls) == 50
        assert max(sizes) <= 20  # at most the old run's 10 while they are collected

    run(main)


def test_a_message_consumed_before_continue_as_new_is_not_read_again(store: Store) -> None:
    async def main() -> None:
        rig = Rig(store)
        got: list[Json] = []

        async def wf(ctx: Context) -> Json:
            msg, _ = await ctx.wait(["note"], timeout=86400)
            got.append(msg)
            if ctx.carried is None:
                ctx.continue_as_new("again")
            return None

        async with trio.open_nursery() as n:
            await rig.boot(n, [WorkflowType("wf", wf)], [("w1", "wf", None)])
            await rig.net.endpoint("sender").send("p", {"to": "w1", "id": "m1", "kind": "note"})
            await trio.sleep(3 * 86400)
            rig.crash()
        assert got == [{"to": "w1", "id": "m1", "kind": "note"}, None]
        assert [k for k, _ in await store.scan(log_prefix("w1")) if "/in/" in k] == []

    run(main)


def test_a_parent_that_joins_a_child_goes_on_only_once_the_child_has_ended(
    store: Store,
) -> None:
    async def main() -> None:
        rig = Rig(store)
        seen: list[Json] = []

        async def child(ctx: Context) -> Json:
            await ctx.signal("p1", {"kind": "outcome"})
            await ctx.sleep(86400)  # still running a day after it reported
            return "done"

        async def parent(ctx: Context) -> Json:
            await ctx.start_child("child", "c1", None)
            await ctx.wait(["outcome"])
            meta: Any = await store.get(meta_key("c1"))
            seen.append(meta["status"])
            seen.append(await ctx.join("c1"))
            return None

        types = [WorkflowType("parent", parent), WorkflowType("child", child)]
        async with trio.open_nursery() as n:
            await rig.boot(n, types, [("p1", "parent", None)])
            await trio.sleep(3 * 86400)
            rig.crash()
        assert seen == ["running", {"status": "completed", "result": "done"}]

    run(main)


def _versioned(rig: Rig, branch: bool) -> tuple[WF, WF]:
    async def v1(ctx: Context) -> Json:
        await ctx.step("draft", rig.effect("draft"), {"qty": 16})
        await ctx.sleep(86400)
        return await ctx.step("order", rig.effect("order"), {"qty": 16})

    async def v2(ctx: Context) -> Json:
        qty = 16 if (branch and not ctx.patched(2)) else 26
        await ctx.step("draft", rig.effect("draft"), {"qty": qty})
        await ctx.sleep(86400)
        return await ctx.step("order", rig.effect("order"), {"qty": qty})

    return v1, v2


@pytest.mark.parametrize("branch", [True, False])
def test_new_code_replays_an_old_log_through_a_version_branch_or_stops_loudly(
    store: Store, branch: bool
) -> None:
    async def main() -> None:
        rig = Rig(store)
        v1, v2 = _versioned(rig, branch)
        async with trio.open_nursery() as n:
            await rig.boot(n, [WorkflowType("wf", v1, version=1)], [("w1", "wf", None)])
            await trio.sleep(3600)
            rig.crash()
        async with trio.open_nursery() as n:
            await rig.boot(n, [WorkflowType("wf", v2, version=2)], [])
            await trio.sleep(2 * 86400)
            rig.crash()
        meta = await store.get(meta_key("w1"))
        assert isinstance(meta, dict)
        if branch:
            assert meta["status"] == "completed"
            assert [c[0] for c in rig.calls] == ["draft", "order"]
        else:
            assert meta["status"] == "stopped"
            assert "workflow w1 step 0" in meta["error"]
            assert "draft" in meta["error"] and '"qty":26' in meta["error"]
            assert [c[0] for c in rig.calls] == ["draft"]

    run(main)


def test_the_non_determinism_error_names_the_step_and_both_sides() -> None:
    err = NonDeterminismError("w1", 4, ("decide", {"turn": 3}), ("check_budget", None))
    assert str(err).startswith("workflow w1 step 4: the log holds decide({\"turn\":3}) but "
                               "the code asks for check_budget(null)")


async def _crash_and_deploy(rig: Rig, v1: WF, v2: WF) -> dict[str, Any]:
    """Run w1 on ``v1`` for an hour, crash, restart on ``v2`` for an hour: w1's meta record."""
    async with trio.open_nursery() as n:
        await rig.boot(n, [WorkflowType("wf", v1)], [("w1", "wf", None)])
        await trio.sleep(3600)
        rig.crash()
    async with trio.open_nursery() as n:
        await rig.boot(n, [WorkflowType("wf", v2)], [])
        await trio.sleep(3600)
        rig.crash()
    meta = await rig.store.get(meta_key("w1"))
    assert isinstance(meta, dict)
    return meta


def test_new_code_that_ends_before_the_log_does_is_stopped_not_completed(store: Store) -> None:
    """Two logged steps, new code that takes one and returns: never a silent completion."""

    async def main() -> None:
        rig = Rig(store)

        async def v1(ctx: Context) -> Json:
            await ctx.step("a", rig.effect("a"), 1)
            await ctx.step("b", rig.effect("b"), 2)
            await ctx.sleep(86400)
            return "v1"

        async def v2(ctx: Context) -> Json:
            await ctx.step("a", rig.effect("a"), 1)
            return "done without b"

        meta = await _crash_and_deploy(rig, v1, v2)
        assert meta["status"] == "stopped" and meta["reason"] == "nondeterminism"
        assert meta["error"].startswith("workflow w1 step 1: the log holds b(2) but the code ends")
        assert [c[0] for c in rig.calls] == ["a", "b"]

    run(main)


def test_new_code_that_lets_a_logged_failure_escape_early_is_stopped_not_failed(
    store: Store,
) -> None:
    """v1 caught step a's failure and went on to b; v2 lets it escape: not a plain failure."""

    async def main() -> None:
        rig = Rig(store)

        async def down(call: StepCall) -> Json:
            raise ServiceUnavailable("supplier down")

        async def v1(ctx: Context) -> Json:
            try:
                await ctx.step("a", down, 1)
            except StepFailed:
                pass
            await ctx.step("b", rig.effect("b"), 2)
            await ctx.sleep(86400)
            return "v1"

        async def v2(ctx: Context) -> Json:
            await ctx.step("a", down, 1)
            return "v2"

        meta = await _crash_and_deploy(rig, v1, v2)
        assert meta["status"] == "stopped" and meta["reason"] == "nondeterminism", meta
        assert meta["error"].startswith("workflow w1 step 1: the log holds b(2) but the code ends")

    run(main)
