"""Worker processes for bulk runs: start, heartbeat, watch, stop.

Each worker publishes a heartbeat in shared memory (runs finished, the seed it
is on, a stop request), so that watching it costs the worker no system call
inside the guarded run, and the watching process can tell a worker that is slow
from one that is stuck.  A worker ignores Ctrl-C (the watching process turns it
into a clean stop) and, on Linux, dies with the watching process: a ``dst run``
killed outright (``kill -9``, the machine's out-of-memory killer) leaves no
orphan still running seeds, and ``--resume`` can start at once.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

# Slots of a worker's heartbeat array.
TICKS, CURRENT, STOP = 0, 1, 2

#: How long a worker may go without finishing a seed before it is declared
#: stuck (``dst run --seed-timeout``).  Generous: the slowest shipped scenario
#: finishes a seed in well under a second.  (Here, not in ``bulk``, so that
#: ``dst run --help`` can say it without importing the kernel.)
SEED_TIMEOUT = 60.0

#: ``prctl`` option asking the kernel to signal this process when its parent exits.
_PR_SET_PDEATHSIG = 1


class Beat:
    """A worker's heartbeat: shared memory the watching process reads without asking."""

    def __init__(self, array: Any) -> None:
        self.array = array

    @property
    def stopped(self) -> bool:
        return bool(self.array[STOP])

    def starting(self, seed: int) -> None:
        self.array[CURRENT] = seed

    def finished(self) -> None:
        self.array[TICKS] += 1


def die_with_parent() -> None:
    """Have the kernel kill this process when the process that started it exits (Linux)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes  # here: ``dst run --help`` imports this module for its constants

    try:
        # The process's own symbols, libc's among them: ``find_library`` would run
        # ``ldconfig -p`` in a subprocess, in every worker.
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return  # no prctl: an orphan finishes its chunk, finds its pipe closed and exits


class Slot:
    """One worker process, its pipe, its heartbeat and the chunk it is running."""

    def __init__(self, ctx: Any, serve: Callable[..., None], hash_seed: int | None) -> None:
        self.array = ctx.RawArray("q", 3)
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=serve, args=(child, self.array, hash_seed),
                                daemon=True, name="dst-worker")
        start_without_sigint(self.proc, hash_seed, spawned=ctx.get_start_method() != "fork")
        child.close()
        #: The hash seed it was started under; None: inherited from this process.
        self.hash_seed = hash_seed
        self.entry: Any = None
        self.seen = (0, 0.0)

    def send(self, entry: Any, first_seed: int, job: tuple[Any, ...]) -> None:
        self.array[STOP] = 0
        self.array[CURRENT] = first_seed
        self.entry = entry
        self.seen = (self.array[TICKS], time.monotonic())
        self.conn.send(job)

    @property
    def seed(self) -> int:
        return int(self.array[CURRENT])

    def stuck_for(self, now: float) -> float:
        """Seconds since this worker last finished a seed (or got its chunk)."""
        ticks = self.array[TICKS]
        if ticks != self.seen[0]:
            self.seen = (ticks, now)
        return now - self.seen[1]

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)

    def close(self) -> None:
        if self.proc.is_alive() and self.entry is None:
            try:
                self.conn.send(None)
            except OSError:
                pass
            self.proc.join(1)
        self.kill()
        self.conn.close()


#: Whether Ctrl-C can be held back (POSIX) rather than ignored around a worker's start.
_CAN_BLOCK = hasattr(signal, "pthread_sigmask")


def start_without_sigint(proc: Any, hash_seed: int | None, *, spawned: bool = False) -> None:
    """Start ``proc`` deaf to Ctrl-C from its first instruction, and under ``hash_seed``
    when given (a ``spawned`` interpreter reads it from the environment).

    Ctrl-C is *blocked* in this thread while the worker starts, not ignored: the
    worker inherits the blocked signal (through ``exec`` too) until
    :func:`ignore_sigint` makes it ignore Ctrl-C for good, so no Ctrl-C can stop
    it half-started; and a Ctrl-C that arrives meanwhile stays pending here and
    reaches this process's handler as soon as the worker is started.  Ignoring
    it here instead (``SIG_IGN`` for the duration) would drop that Ctrl-C: the
    run would go on to its end as if it had never been pressed.  (The standard
    library starts its resource tracker the same way, bpo-33613.)
    """
    main = threading.current_thread() is threading.main_thread()
    held: Any = None
    previous: Any = None
    saved = os.environ.get("PYTHONHASHSEED")
    if spawned and _CAN_BLOCK:
        # A spawned worker needs multiprocessing's resource tracker, and starting
        # the tracker unblocks Ctrl-C behind our back: have it running first.
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
    try:
        if _CAN_BLOCK:
            held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        elif main:  # no signal masks (Windows): ignoring is the best there is
            previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        if hash_seed is not None:
            os.environ["PYTHONHASHSEED"] = str(hash_seed)
        proc.start()
    finally:
        if hash_seed is not None:
            if saved is None:
                os.environ.pop("PYTHONHASHSEED", None)
            else:
                os.environ["PYTHONHASHSEED"] = saved
        if held is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)  # a pending Ctrl-C lands now
        elif previous is not None:
            signal.signal(signal.SIGINT, previous)


def ignore_sigint() -> None:
    """In a worker: ignore Ctrl-C from now on, then stop holding it back.

    The watching process turns Ctrl-C into a clean stop; a worker that took it
    would die in the middle of a seed.  A Ctrl-C held back since the worker
    started is discarded here, as ignoring a pending signal discards it.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if _CAN_BLOCK:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


class Pool:
    """Up to ``size`` workers, each started when a chunk first needs it."""

    def __init__(self, ctx: Any, size: int, serve: Callable[..., None],
                 hash_seed: int | None = None) -> None:
        self.ctx, self.size, self.serve, self.hash_seed = ctx, size, serve, hash_seed
        self.slots: list[Slot] = []

    def idle(self) -> Iterator[Slot]:
        for slot in self.slots:
            if slot.entry is None:
                yield slot
        while len(self.slots) < self.size:
            slot = Slot(self.ctx, self.serve, self.hash_seed)
            self.slots.append(slot)
            yield slot

    def has_idle(self) -> bool:
        return len(self.slots) < self.size or any(s.entry is None for s in self.slots)

    def busy(self) -> list[Slot]:
        return [s for s in self.slots if s.entry is not None]

    def close(self) -> None:
        for slot in self.slots:
            slot.close()


class CtrlC:
    """Counts Ctrl-C presses instead of raising in the middle of recording a chunk.

    Scopes nest: one opened inside another (``dst run`` holds one from before the
    run is recorded to after its workers are gone; ``run_bulk`` opens its own)
    starts with the presses the outer one counted, and each press inside counts
    in both.  So a Ctrl-C pressed before the workers exist still stops the run,
    and one pressed while they are stopped is not lost either.

    With ``escalate``, a second press in this scope itself (not in one nested in
    it) raises ``KeyboardInterrupt``: for a scope whose code does not watch
    ``count`` (setting a run up, waiting for a cluster's workers), so that "a
    second Ctrl-C stops at once" holds there too.
    """

    def __init__(self, *, escalate: bool = False) -> None:
        self.count = 0
        self.escalate = escalate
        self.previous: Any = None
        self.installed = False
        self.outer: CtrlC | None = None

    def __enter__(self) -> CtrlC:
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGINT, self._hit)
            self.installed = True
            outer = getattr(self.previous, "__self__", None)
            if isinstance(outer, CtrlC) and outer is not self:
                self.outer = outer
                self.count += outer.count
        return self

    def _hit(self, _signum: int, _frame: Any) -> None:
        self._counted()
        if self.escalate and self.count > 1:
            raise KeyboardInterrupt

    def _counted(self) -> None:
        self.count += 1
        if self.outer is not None:
            self.outer._counted()

    def __exit__(self, *exc: object) -> None:
        if self.installed:
            signal.signal(signal.SIGINT, self.previous)


def describe_death(slot: Slot) -> str:
    code = slot.proc.exitcode
    how = f"was killed by signal {-code}" if code is not None and code < 0 \
        else f"exited with status {code}"
    return f"seed {slot.seed}: its worker process {how} (the code under test ended it?)"
