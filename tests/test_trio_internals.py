"""The two private trio hooks dst relies on still exist and still do what they did."""

from __future__ import annotations

import trio
import trio.testing

from dst.sim.trio_internals import deterministic_trio, reseed_trio


def _order(seed: int) -> list[int]:
    order: list[int] = []

    async def main() -> None:
        reseed_trio(seed)

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


def test_trio_batches_are_ordered_by_the_reseeded_generator() -> None:
    assert _order(7) == _order(7)
    assert len({tuple(_order(s)) for s in range(20)}) > 10


def test_the_deterministic_flag_is_restored_afterwards() -> None:
    from trio._core import _run

    before = _run._ALLOW_DETERMINISTIC_SCHEDULING
    with deterministic_trio():
        assert _run._ALLOW_DETERMINISTIC_SCHEDULING is True
    assert before == _run._ALLOW_DETERMINISTIC_SCHEDULING


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
