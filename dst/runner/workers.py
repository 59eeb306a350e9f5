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

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

# Slots of a worker's heartbeat array.
TICKS, CURRENT, STOP = 0, 1, 2

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
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
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
        start_without_sigint(self.proc, hash_seed)
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


def start_without_sigint(proc: Any, hash_seed: int | None) -> None:
    """Start ``proc`` with Ctrl-C ignored from its first instruction, and under
    ``hash_seed`` when given (a spawned interpreter reads it from the environment)."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if main else None
    saved = os.environ.get("PYTHONHASHSEED")
    try:
        if main:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        if hash_seed is not None:
            os.environ["PYTHONHASHSEED"] = str(hash_seed)
        proc.start()
    finally:
        if hash_seed is not None:
            if saved is None:
                os.environ.pop("PYTHONHASHSEED", None)
            else:
                os.environ["PYTHONHASHSEED"] = saved
        if main:
            signal.signal(signal.SIGINT, previous)


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
    """Counts Ctrl-C presses instead of raising in the middle of recording a chunk."""

    def __init__(self) -> None:
        self.count = 0
        self.previous: Any = None
        self.installed = False

    def __enter__(self) -> CtrlC:
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGINT, self._hit)
            self.installed = True
        return self

    def _hit(self, _signum: int, _frame: Any) -> None:
        self.count += 1

    def __exit__(self, *exc: object) -> None:
        if self.installed:
            signal.signal(signal.SIGINT, self.previous)


def describe_death(slot: Slot) -> str:
    code = slot.proc.exitcode
    how = f"was killed by signal {-code}" if code is not None and code < 0 \
        else f"exited with status {code}"
    return f"seed {slot.seed}: its worker process {how} (the code under test ended it?)"
