"""The private trio internals dst relies on still exist and still do what they did."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from dst.sim.trio_internals import deterministic_trio, hold, release


def _order(extra_checkpoint: bool) -> list[int]:
    order: list[int] = []

    async def main() -> None:
        if extra_checkpoint:
            await trio.sleep(0)

        async def task(i: int) -> None:
            for _ in range(3):
                await trio.lowlevel.checkpoint()
                order.append(i)

        async with trio.open_nursery() as nursery:
            for i in range(6):
                nursery.start_soon(task, i)

    with deterministic_trio():
        trio.run(main)
    return order


def test_trio_batches_run_in_a_fixed_order_that_no_generator_decides() -> None:
    first = _order(extra_checkpoint=False)
    assert first == _order(extra_checkpoint=False)
    # Newest task first, in every batch; an added checkpoint elsewhere changes nothing.
    assert first == [5, 4, 3, 2, 1, 0] * 3
    assert _order(extra_checkpoint=True) == first


def test_the_scheduling_state_is_restored_afterwards() -> None:
    from trio._core import _run

    before = (_run._ALLOW_DETERMINISTIC_SCHEDULING, _run._r)
    with deterministic_trio():
        assert _run._ALLOW_DETERMINISTIC_SCHEDULING is True
        assert _run._r is not before[1]
    assert (_run._ALLOW_DETERMINISTIC_SCHEDULING, _run._r) == before


def test_a_rescheduled_task_can_be_held_out_of_the_run_queue_and_released() -> None:
    order: list[str] = []
    held: list[trio.lowlevel.Task] = []

    class Holder(trio.abc.Instrument):
        def task_scheduled(self, task: trio.lowlevel.Task) -> None:
            if task.name.endswith("slow") and not held and hold(task):
                held.append(task)

    async def main() -> None:
        async def slow() -> None:
            await trio.sleep(0)  # held here until released
            order.append("slow")

        async def fast() -> None:
            for _ in range(5):
                await trio.sleep(0)
            order.append("fast")
            release(held[0])

        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow)
            nursery.start_soon(fast)

    trio.run(main, instruments=[Holder()])
    assert order == ["fast", "slow"]


def test_a_blocked_task_can_be_interrupted_through_a_shield() -> None:
    from dst.sim.trio_internals import interrupt, is_blocked

    seen: list[str] = []

    class Stop(BaseException):
        pass

    async def main() -> None:
        async def victim() -> None:
            try:
                with trio.CancelScope(shield=True):
                    await trio.sleep_forever()
            except Stop:
                seen.append("stopped")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(victim)
            await trio.testing.wait_all_tasks_blocked()
            (task,) = [t for t in nursery.child_tasks]
            assert is_blocked(task)
            nursery.cancel_scope.cancel()  # cannot reach through the shield
            assert is_blocked(task)
            assert interrupt(task, Stop())

    trio.run(main)
    assert seen == ["stopped"]


def test_a_task_about_to_step_can_be_made_to_raise() -> None:
    from dst.sim.trio_internals import throw_on_next_step

    seen: list[str] = []

    class Stop(BaseException):
        pass

    steps: list[int] = []

    class Thrower(trio.abc.Instrument):
        def before_task_step(self, task: trio.lowlevel.Task) -> None:
            if task.name.endswith("spinner"):
                steps.append(1)
                if len(steps) == 100:
                    throw_on_next_step(task, Stop())

    async def spinner() -> None:
        try:
            with trio.CancelScope(shield=True):
                while True:
                    await trio.sleep(0)
        except Stop:
            seen.append("stopped")

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(spinner)

    trio.run(main, instruments=[Thrower()])
    assert seen == ["stopped"]


def test_the_kernel_s_shortcuts_are_taken_with_this_trio() -> None:
    """The fast paths bind to private trio names; with a trio that moved them dst falls back
    to the public calls (correct, slower), and this test says so loudly."""
    from dst.sim import trio_internals as ti

    assert ti.PARK_AS, "trio._core._traps.WaitTaskRescheduled moved: choice points are slow"
    assert ti.park is not trio.lowlevel.wait_task_rescheduled
    assert ti.wake is not trio.lowlevel.reschedule
    assert ti.RUN_CONTEXT is not None, "trio's GLOBAL_RUN_CONTEXT moved"
    assert ti._Instruments is not None, "trio._core._instrumentation.Instruments moved"
    assert ti.STEP, "trio's loop names moved: every decision takes a pass of trio's loop"
    assert ti.spawn is ti._spawn, "trio's Task moved: each process start goes through start_soon"


def test_spawn_makes_the_task_start_soon_makes() -> None:
    """``trio_internals.spawn`` starts a task as ``start_soon`` does: the same name, parent
    nursery, context (a copy of the spawner's), instrument calls, cancel status and result;
    and a closed nursery refuses it with trio's error."""
    import contextvars

    from dst.sim import trio_internals as ti

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")

    def story(start: Any) -> list[object]:
        seen: list[object] = []

        class Hooks(trio.abc.Instrument):
            def task_spawned(self, task: trio.lowlevel.Task) -> None:
                seen.append(("spawned", task.name))

            def task_scheduled(self, task: trio.lowlevel.Task) -> None:
                seen.append(("scheduled", task.name))

            def task_exited(self, task: trio.lowlevel.Task) -> None:
                seen.append(("exited", task.name))

        async def child(n: int) -> None:
            task = trio.lowlevel.current_task()
            seen.append((n, var.get(), task.parent_nursery is nursery_box[0]))
            var.set("child")  # its own copy: the spawner's value stays
            await trio.sleep_forever()

        nursery_box: list[trio.Nursery] = []

        async def main() -> None:
            var.set("parent")
            async with trio.open_nursery() as nursery:
                nursery_box.append(nursery)
                start(nursery, child, (1,), "one")
                await trio.testing.wait_all_tasks_blocked()
                nursery.cancel_scope.cancel()
            seen.append(var.get())
            with pytest.raises(RuntimeError, match="Nursery is closed to new arrivals"):
                start(nursery, child, (2,), "two")

        trio.run(main, instruments=[Hooks()])
        return [s for s in seen if "<" not in str(s) and "main" not in str(s)]  # trio's own tasks

    mine = story(ti.spawn)
    assert mine == story(ti._start_soon)
    assert mine[:3] == [("spawned", "one"), ("scheduled", "one"), (1, "parent", True)]


def test_a_step_taken_in_place_reads_the_trio_names_trio_s_loop_reads() -> None:
    """``trio_internals.step`` is trio's task step, taken from the quiescence hook: the
    runner and task attributes it reads and writes are trio's own."""
    from dst.sim import trio_internals as ti

    names: list[str] = []

    async def main() -> None:
        runner = ti.RUN_CONTEXT.runner
        task = trio.lowlevel.current_task()
        for obj, attr in [(runner, "runq"), (runner, "ki_pending"), (runner, "waiting_for_idle"),
                          (runner.entry_queue, "queue"), (runner.entry_queue, "idempotent_queue"),
                          (runner.io_manager, "_registered"),
                          (runner, "instruments"), (runner, "main_task"),
                          (runner.deadlines, "next_deadline"), (runner, "task_exited"),
                          (runner, "reschedule"), (task, "_schedule_points"),
                          (task, "_cancel_points"), (task, "_next_send_fn"),
                          (task, "_next_send"), (task, "_abort_func"),
                          (task, "_attempt_delivery_of_pending_ki"),
                          (task, "_attempt_delivery_of_any_pending_cancel")]:
            if not hasattr(obj, attr):
                names.append(f"{type(obj).__name__}.{attr}")

    trio.run(main)
    assert names == [], f"trio {trio.__version__} moved {names}: the in-place step is wrong"


def test_parked_tasks_woken_by_the_shortcuts_get_values_and_cancellations() -> None:
    from dst.sim import trio_internals as ti

    got: list[object] = []
    parked: list[trio.lowlevel.Task] = []

    async def main() -> None:
        async def sleeper() -> None:
            parked.append(trio.lowlevel.current_task())
            msg = ti.waiting(lambda _: trio.lowlevel.Abort.SUCCEEDED)
            got.append(await ti.park_as(msg))  # woken by wake(): None
            with trio.move_on_after(1) as scope:
                await ti.park_as(msg)  # the same message again, cancelled this time
            got.append(scope.cancelled_caught)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sleeper)
            await trio.testing.wait_all_tasks_blocked()
            ti.wake(parked[0])

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert got == [None, True]


def test_an_instrument_that_raises_is_disabled_and_logged_as_trio_does_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The dict table's ``call`` is trio's: the others still run, the faulty one
    is removed, and trio's logger records it with its traceback."""
    from dst.sim import trio_internals as ti

    seen: list[str] = []

    class Faulty(trio.abc.Instrument):
        def task_scheduled(self, task: trio.lowlevel.Task) -> None:
            seen.append("faulty")
            raise RuntimeError("an instrument's own bug")

    class Fine(trio.abc.Instrument):
        def task_scheduled(self, task: trio.lowlevel.Task) -> None:
            seen.append("fine")

    async def main() -> None:
        ti.fast_instruments()
        assert type(ti.RUN_CONTEXT.runner.instruments) is ti._DictInstruments
        trio.lowlevel.add_instrument(Faulty())
        trio.lowlevel.add_instrument(Fine())
        await trio.sleep(0)
        await trio.sleep(0)

    with caplog.at_level("ERROR", logger="trio.abc.Instrument"):
        trio.run(main)
    assert seen[:2] == ["faulty", "fine"] and seen.count("faulty") == 1 and len(seen) > 2
    (record,) = caplog.records
    assert "Instrument has been disabled" in record.getMessage()
    assert record.exc_info is not None and "an instrument's own bug" in str(record.exc_info[1])


def _tables() -> tuple[Any, Any]:
    """trio's own table of instruments and dst's, both empty."""
    from trio._core._instrumentation import Instruments

    from dst.sim import trio_internals as ti

    return Instruments([]), ti._DictInstruments(Instruments([]).data)


def _contents(table: Any) -> dict[str, list[object]]:
    """The table's instruments by hook; for dst's, checked against the methods it calls."""
    contents = {hook: list(on) for hook, on in table.data.items()}
    calls = getattr(table, "_calls", None)
    if calls is not None:
        assert {hook: [i for i, _ in pairs] for hook, pairs in calls.items()} == {
            hook: on for hook, on in contents.items() if hook != "_all"}
    return contents


def test_the_dict_table_adds_and_removes_exactly_as_trio_does() -> None:
    """Same hooks for the same instruments (inherited hooks skipped, a hook named
    twice by ``__dir__`` counted once, one whose hook cannot be looked up undone),
    in the same order."""

    class Stepper(trio.abc.Instrument):
        def before_task_step(self, task: trio.lowlevel.Task) -> None: ...
        def after_task_step(self, task: trio.lowlevel.Task) -> None: ...

    class Twice(trio.abc.Instrument):
        def __init__(self) -> None:
            self.task_scheduled = lambda task: None  # type: ignore[method-assign]

        def __dir__(self) -> list[str]:
            return ["task_scheduled", "task_scheduled", "before_run", "_private", "unknown"]

    class Broken(trio.abc.Instrument):
        def task_exited(self, task: trio.lowlevel.Task) -> None: ...

        def __getattribute__(self, name: str) -> object:
            if name == "task_spawned":
                raise RuntimeError("no such luck")
            return super().__getattribute__(name)

    stepper, twice, other, broken = Stepper(), Twice(), Stepper(), Broken()
    theirs, ours = _tables()
    for table in (theirs, ours):
        table.add_instrument(stepper)
        table.add_instrument(twice)
        table.add_instrument(other)
        table.add_instrument(stepper)  # already there: nothing
        with pytest.raises(RuntimeError, match="no such luck"):
            table.add_instrument(broken)
    assert _contents(ours) == _contents(theirs)
    assert _contents(ours)["task_scheduled"] == [twice]
    assert _contents(ours)["before_task_step"] == [stepper, other]
    for table in (theirs, ours):
        table.remove_instrument(stepper)
        with pytest.raises(KeyError):
            table.remove_instrument(stepper)
        table.add_instrument(stepper)  # now after the other
        table.remove_instrument(twice)
    assert _contents(ours) == _contents(theirs)
    assert _contents(ours)["before_task_step"] == [other, stepper]
    assert "task_scheduled" not in ours


def _churn(table: Any) -> list[tuple[str, object]]:
    """Three calls of ``task_scheduled`` and one of ``after_run`` while instruments come and go."""
    log: list[tuple[str, object]] = []

    class Rec(trio.abc.Instrument):
        def __init__(self, name: str) -> None:
            self.name = name

        def task_scheduled(self, task: object) -> None:
            log.append((self.name, task))

        def after_run(self) -> None:
            log.append((self.name, "after_run"))

    a, b, c = Rec("a"), Rec("b"), Rec("c")

    class Churner(Rec):
        def task_scheduled(self, task: object) -> None:
            log.append((self.name, task))
            if task == 1:
                table.remove_instrument(a)  # still called in this call
                table.add_instrument(c)  # called from the next one
            if task == 2:
                raise RuntimeError("churned out")

    for instrument in (Churner("churner"), a, b):
        table.add_instrument(instrument)
    for task in (1, 2, 3):
        table.call("task_scheduled", task)
    table.call("after_run")
    assert _contents(table) == {"_all": [b, c], "task_scheduled": [b, c], "after_run": [b, c]}
    return log


def test_the_dict_table_calls_exactly_as_trio_does_while_instruments_come_and_go(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Instruments added or removed during a call change the next call, not this
    one; one that raises is disabled and logged, and not called again."""
    for table in _tables():
        caplog.clear()
        with caplog.at_level("ERROR", logger="trio.abc.Instrument"):
            log = _churn(table)
        assert log == [
            ("churner", 1), ("a", 1), ("b", 1),
            ("churner", 2), ("b", 2), ("c", 2),
            ("b", 3), ("c", 3),
            ("b", "after_run"), ("c", "after_run"),
        ], type(table)
        (record,) = caplog.records
        assert "Instrument has been disabled" in record.getMessage()
        assert record.exc_info is not None and "churned out" in str(record.exc_info[1])


class _Args(trio.abc.Instrument):
    def __init__(self) -> None:
        self.log: list[tuple[object, ...]] = []

    def task_scheduled(self, *args: object) -> None:
        self.log.append(args)


def test_the_dict_table_passes_any_number_of_arguments_as_trio_does() -> None:
    logs = []
    for table in _tables():
        instrument = _Args()
        table.add_instrument(instrument)
        table.call("task_scheduled")
        table.call("task_scheduled", None)
        table.call("task_scheduled", 1, 2)
        logs.append(instrument.log)
    assert logs[0] == logs[1] == [(), (None,), (1, 2)]


def test_an_instrument_whose_hook_cannot_be_looked_up_again_keeps_trios_table() -> None:
    """The dict table looks up the hooks of the instruments given to ``trio.run``
    once more; if that fails, trio's own table stays (and disables it at its call)."""
    from trio._core._instrumentation import Instruments

    from dst.sim import trio_internals as ti

    class Fickle(trio.abc.Instrument):
        fickle = False

        def __getattribute__(self, name: str) -> object:
            if name == "task_spawned" and Fickle.fickle:
                raise RuntimeError("not any more")
            return super().__getattribute__(name)

        def task_spawned(self, task: trio.lowlevel.Task) -> None: ...

    kinds: list[type] = []

    async def main() -> None:
        Fickle.fickle = True
        ti.fast_instruments()
        kinds.append(type(ti.RUN_CONTEXT.runner.instruments))

    trio.run(main, instruments=[Fickle()])
    assert kinds == [Instruments]



def test_cancel_is_trio_cancel_without_its_costs() -> None:
    """``trio_internals.cancel`` delivers the Cancelled trio's ``cancel`` would (the same
    source, reason and cancelling task), from inside a task and from outside any (as the
    quiescence hook cancels, between two steps)."""
    import re

    from dst.sim import trio_internals

    def texts(cancel: Any) -> list[str]:
        caught: list[str] = []
        pending: list[trio.CancelScope] = []

        class Between(trio.abc.Clock):
            """Cancels where dst's quiescence hook does: between two steps, no task running."""

            def start_clock(self) -> None:
                pass

            def current_time(self) -> float:
                return 0.0

            def deadline_to_sleep_time(self, deadline: float) -> float:
                if pending:
                    cancel(pending.pop())
                    return 0.0
                return 1.0  # trio waits less when a task waits for all to block

        async def victim(box: list[trio.CancelScope]) -> None:
            with trio.CancelScope() as scope:
                box.append(scope)
                try:
                    await trio.sleep_forever()
                except trio.Cancelled as exc:
                    caught.append(re.sub(r"0x[0-9a-f]+", "0x", str(exc)))
                    raise

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                box: list[trio.CancelScope] = []
                nursery.start_soon(victim, box)
                await trio.testing.wait_all_tasks_blocked()
                cancel(box[0])  # from inside a task: the reason names it
                cancel(box[0])  # idempotent
                other: list[trio.CancelScope] = []
                nursery.start_soon(victim, other)
                await trio.testing.wait_all_tasks_blocked()
                pending.append(other[0])  # cancelled between two steps: no task
            assert box[0].cancelled_caught and other[0].cancelled_caught

        trio.run(main, clock=Between())
        return caught

    mine = texts(trio_internals.cancel)
    assert mine == texts(trio.CancelScope.cancel)
    assert len(mine) == 2 and "main" in mine[0] and "main" not in mine[1]
