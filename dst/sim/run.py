"""Running simulated runs: many seeds share one ``trio.run``.

Starting ``trio.run`` costs about as much as a whole small run, so seeds are run
back to back inside one.  Each seed still starts from the same state (time 0,
trio's generator reseeded, fresh task labels), so a seed gives the same trace
whether it runs alone or 500th in a batch; ``tests/test_determinism.py`` pins it.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable

import trio
from trio.abc import Instrument

from . import sockets, trio_internals
from .clock import VirtualClock
from .guard import Guard
from .kernel import ACTIVE, Sim
from .logs import structlog_to_trace
from .trio_internals import Unshuffled, deterministic_trio

Setup = Callable[[Sim], None]


class _KernelHooks(Instrument):
    """Hands trio's events to the active run, on the cheapest hooks that serve.

    ``task_spawned``/``task_exited`` label tasks in the order they start and tie
    them to their process's incarnation.  Passes of trio's loop (which bound
    the work trio does between two decisions) are counted by the batch
    generator (``Unshuffled.count_passes``) instead, which costs no instrument
    dispatch.  The
    run installs per-step instruments of its own only while it needs them (a
    busy run, the tasks of a crashed process), so the common path pays nothing
    per task step.
    """

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        if ACTIVE:
            ACTIVE[-1].task_spawned(task)

    def task_exited(self, task: trio.lowlevel.Task) -> None:
        if ACTIVE:
            ACTIVE[-1].task_exited(task)


class _Oldest:
    """What the oldest generation held after the last full collection between seeds."""

    #: Objects in it then (None: no full collection yet in this process).
    total: int | None = None
    #: The count of younger collections at which fullness was last asked (see below).
    asked_at = 0


def _full_collection_due(count: int, threshold: int) -> bool:
    """CPython's own rule for a full collection, which ``gc.collect(2)`` does not apply.

    CPython collects the oldest generation only once the objects that reached
    it since its last full collection are a quarter of those that collection
    kept, so that a large, stable heap (modules, a scenario's templates) is not
    walked every few hundred seeds.  Asked at most once per ``threshold``
    younger collections: counting the oldest generation walks it too (about a
    tenth of what collecting it costs).
    """
    if _Oldest.total is None:
        return True
    if count < _Oldest.asked_at + threshold:
        return False
    _Oldest.asked_at = count
    return len(gc.get_objects(2)) - _Oldest.total > _Oldest.total // 4


def _collect_between_seeds() -> None:
    """Run the cyclic garbage collector now, between two seeds, if it is due.

    Automatic collection is off while seeds run: a collection fires at an
    allocation count that depends on everything run before in the process, and
    a finalizer (``__del__``) that logs or touches the world would then land in
    one seed's trace and not another's.  Here it runs on CPython's own
    thresholds and rules, but only where no run is active.
    """
    counts = gc.get_count()
    thresholds = gc.get_threshold()
    if counts[0] < thresholds[0]:
        return
    generation = 0
    if counts[1] >= thresholds[1]:
        generation = 1
        if counts[2] >= thresholds[2] and _full_collection_due(counts[2], thresholds[2]):
            generation = 2
    gc.collect(generation)
    if generation == 2:
        _Oldest.total, _Oldest.asked_at = len(gc.get_objects(2)), 0


def run_sims(
    jobs: Iterable[tuple[Sim, Setup]],
    on_done: Callable[[Sim], None],
    *,
    guarded: bool = True,
) -> None:
    """Run each ``(sim, setup)`` in turn in one ``trio.run``; ``on_done(sim)`` after each."""
    clock = VirtualClock()
    traps = Guard()
    batches: list[Unshuffled] = []

    async def main() -> None:
        # Installed inside the run: trio's own start-up opens a socket pair.
        if guarded:
            traps.install()
        trio_internals.fast_instruments()
        # trio's socket factory and resolver, for every seed of the batch: each call
        # goes to the run in progress (``dst.sim.sockets``).
        network = sockets.install()
        loop = batches[0]
        try:
            first = True
            for sim, setup in jobs:
                if not first:  # before the first, collection was simply off: nothing ran
                    _collect_between_seeds()
                first = False
                loop.count_passes(sim.loop_pass)
                try:
                    await sim.run(clock, setup)
                finally:
                    loop.count_passes(None)
                on_done(sim)
        finally:
            network.restore()
            traps.restore()

    collecting = gc.isenabled()
    gc.disable()
    try:
        with deterministic_trio() as loop, structlog_to_trace():
            batches.append(loop)
            trio.run(main, clock=clock, instruments=[_KernelHooks()])
    finally:
        traps.restore()
        if collecting:
            gc.enable()
