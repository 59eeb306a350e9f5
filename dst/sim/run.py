"""Running simulated runs: many seeds share one ``trio.run``.

Starting ``trio.run`` costs about as much as a whole small run, so seeds are run
back to back inside one.  Each seed still starts from the same state (time 0,
trio's generator reseeded, fresh task labels), so a seed gives the same trace
whether it runs alone or 500th in a batch; ``tests/test_determinism.py`` pins it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import trio
from trio.abc import Instrument

from .clock import VirtualClock
from .guard import Guard
from .kernel import ACTIVE, Sim
from .logs import structlog_to_trace
from .trio_determinism import deterministic_trio

Setup = Callable[[Sim], None]


class _SpawnLabels(Instrument):
    """Lets the active run label child tasks in the order they are started."""

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        if ACTIVE:
            ACTIVE[-1].task_spawned(task)


def run_sims(
    jobs: Iterable[tuple[Sim, Setup]],
    on_done: Callable[[Sim], None],
    *,
    guarded: bool = True,
) -> None:
    """Run each ``(sim, setup)`` in turn in one ``trio.run``; ``on_done(sim)`` after each."""
    clock = VirtualClock()
    traps = Guard()

    async def main() -> None:
        # Installed inside the run: trio's own start-up opens a socket pair.
        if guarded:
            traps.install()
        try:
            for sim, setup in jobs:
                await sim.run(clock, setup)
                on_done(sim)
        finally:
            traps.restore()

    try:
        with deterministic_trio(), structlog_to_trace():
            trio.run(main, clock=clock, instruments=[_SpawnLabels()])
    finally:
        traps.restore()
