"""The two private trio hooks dst relies on still exist and still do what they did."""

from __future__ import annotations

import trio

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
