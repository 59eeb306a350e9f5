"""The half of a Dask run that runs in the worker processes (see :mod:`dst.runner.cluster`).

Dask ships these functions to the workers by name: one chunk of seeds at a
time, under a watchdog thread that stops a chunk whose run was stopped or whose
deadline passed, and reports a seed stuck past its timeout.  What the submitting
process sends and reads back is in :mod:`dst.runner.cluster`.

A worker that closes (SIGTERM, Ctrl-C, its scheduler gone) waits for the task in
its thread before it exits, up to Dask's close timeout (30 s).  So the watchdog
stops the chunk after its current seed as soon as the worker is closing, and a
seed still running :data:`CLOSE_GRACE` seconds later (a loop without ``await``)
is interrupted: an exception raised in its thread, which ends the chunk.  The
chunk's result is never delivered (the worker cancels the task, and the
scheduler gives the chunk to another worker), and the task raises rather than
answer with part of a chunk.  Only code that holds the GIL in one C call can
keep a worker from exiting then; Dask's timeout, or a signal, ends it.
"""

from __future__ import annotations

import ctypes
import importlib
import re
import threading
import time
from typing import Any

from .. import __version__
from ..errors import DstError, UsageError
from ..registry import load
from ..trace.model import current_hash_seed
from .bulk import run_chunk
from .groups import KeepPolicy
from .workers import Beat

#: How often the watchdog in a worker process looks at the chunk it is running.
_WATCH = 0.5
#: Once the worker is closing, how long a seed may go on before its thread is
#: interrupted (the chunk was asked to stop after it).
CLOSE_GRACE = 2.0
#: Worker states in which it is going away: its tasks' results are not delivered.
_CLOSING = frozenset({"closing", "closed", "failed"})


class WorkerClosing(BaseException):
    """Raised in a chunk's thread, and by its task, when its worker closes mid-chunk.

    A ``BaseException``: the code under test catching ``Exception`` must not
    swallow it.
    """

#: How to start a worker, one per core.  Without a nanny: a nanny starts its worker
#: process under ``PYTHONHASHSEED=6640`` when the variable is unset or 0 (Dask's
#: choice, for hashing that agrees across workers), whatever the shell says.
START_WORKER = ("PYTHONHASHSEED={hash_seed} dask worker {address} --nthreads 1 --no-nanny"
                "{binding}")


def binding(worker_address: str | None) -> str:
    """`` --host H --dashboard-address H:0`` for a worker at ``worker_address``: every
    port it opens on that address, none on all interfaces (``docs/cluster.md``); empty
    when the worker's address is not known."""
    found = re.fullmatch(r"[a-z]+://\[?([^\]]*?)\]?:\d+", worker_address or "")
    if found is None or not found.group(1):
        return ""
    host = found.group(1)
    at = f"[{host}]" if ":" in host else host
    return f" --host {host} --dashboard-address {at}:0"

#: The hash seed a Dask nanny gives its worker process in place of 0.
_NANNY_HASH_SEED = 6640


def require_distributed() -> Any:
    """The ``distributed`` module, or a one-line :class:`UsageError` saying how to install it."""
    try:
        return importlib.import_module("distributed")
    except ImportError:
        raise UsageError("running on a Dask cluster needs Dask distributed, which is not "
                         "installed: pip install 'dst[cluster]'") from None


class _WorkerBeat(Beat):
    """``run_chunk``'s heartbeat, kept in plain attributes the watchdog thread reads."""

    def __init__(self, run_id: str, stop_at: float | None, seed_timeout: float) -> None:
        super().__init__(None)
        self.run_id, self.stop_at, self.seed_timeout = run_id, stop_at, seed_timeout
        self.ticks, self.current, self.stop = 0, -1, False
        self.seen, self.since, self.reported = 0, time.monotonic(), False
        #: The thread running the chunk; since when its worker is closing (None: it
        #: is not); whether that thread was interrupted.
        self.thread = threading.get_ident()
        self.closing: float | None = None
        self.interrupted = False

    @property
    def stopped(self) -> bool:
        return self.stop

    def starting(self, seed: int) -> None:
        self.current = seed

    def finished(self) -> None:
        self.ticks += 1


#: One simulation at a time in a process: the guard and the collector are process-wide.
_ONE_AT_A_TIME = threading.Lock()
#: The chunk this process runs (task key -> its heartbeat), for the watchdog.
_RUNNING: dict[str, _WorkerBeat] = {}
#: Runs asked to stop (Ctrl-C, an error or a stuck seed on another worker).
_STOPPED: set[str] = set()
_WATCHDOG: list[threading.Thread] = []
_STATE = threading.Lock()


def events_topic(run_id: str) -> str:
    return f"dst-{run_id}"


def _closing(worker: Any) -> bool:
    return getattr(getattr(worker, "status", None), "name", "") in _CLOSING


def _interrupt(thread: int) -> None:
    """Raise :class:`WorkerClosing` in ``thread`` at its next Python instruction."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread),
                                               ctypes.py_object(WorkerClosing))


def _watch(worker: Any) -> None:
    """Stop chunks past their deadline or whose run was stopped; report stuck seeds;
    when the worker closes, stop its chunk and interrupt a seed that goes on."""
    while True:
        time.sleep(_WATCH)
        closing = _closing(worker)
        with _STATE:
            running = list(_RUNNING.items())
            now, wall = time.monotonic(), time.time()
            for _key, beat in running:
                if not closing:
                    break
                beat.stop = True
                if beat.closing is None:
                    beat.closing, beat.seen = now, beat.ticks
                elif (not beat.interrupted and beat.ticks == beat.seen
                      and now - beat.closing > CLOSE_GRACE):
                    beat.interrupted = True  # under _STATE: the chunk is still running
                    _interrupt(beat.thread)
        if closing:
            continue
        for key, beat in running:
            if beat.run_id in _STOPPED or (beat.stop_at is not None and wall >= beat.stop_at):
                beat.stop = True
            if beat.ticks != beat.seen:
                beat.seen, beat.since = beat.ticks, now
            elif not beat.reported and now - beat.since > beat.seed_timeout:
                beat.reported = True
                worker.log_event(events_topic(beat.run_id), {
                    "key": key, "seed": beat.current, "worker": worker.address,
                    "seconds": beat.seed_timeout})


def _start_watchdog(worker: Any) -> None:
    with _STATE:
        if not _WATCHDOG:
            thread = threading.Thread(target=_watch, args=(worker,), daemon=True,
                                      name="dst-watchdog")
            thread.start()
            _WATCHDOG.append(thread)


def _wrong_hash_seed(worker: Any, wanted: int) -> str | None:
    """One line saying how to start workers, if ``worker`` (this process's) runs under
    another hash seed than ``wanted``."""
    mine = current_hash_seed()
    if mine == wanted:
        return None
    what = "a random hash seed" if mine is None else f"hash seed {mine}"
    if mine == _NANNY_HASH_SEED:
        what += " (a Dask nanny's)"
    start = START_WORKER.format(hash_seed=wanted, address=worker.scheduler.address,
                                binding=binding(worker.address))
    return (f"Dask worker {worker.address} runs under {what}, but every seed runs under "
            f"hash seed {wanted}: start workers as `{start}`, one per core")


def chunk_task(run_id: str, ref: str, config: dict[str, Any], seeds: list[int],
                strategy: str, keep: KeepPolicy | None, hash_seed: int, stop_at: float | None,
                seed_timeout: float, scenario_file: str | None = None) -> tuple[Any, ...]:
    """One chunk, on a Dask worker: ``("ok", outcomes)`` or ``("error", exit code, line)``.

    Errors are answered, not raised: Dask would retry a raised one, and a broken
    scenario or a wrongly started worker fails the same way every time.
    """
    worker = require_distributed().get_worker()
    wrong = _wrong_hash_seed(worker, hash_seed)
    if wrong is not None:
        return ("error", UsageError.exit_code, wrong)
    _start_watchdog(worker)
    key = str(worker.get_current_task())
    with _ONE_AT_A_TIME:
        beat = _WorkerBeat(run_id, stop_at, seed_timeout)
        beat.stop = run_id in _STOPPED
        with _STATE:
            _RUNNING[key] = beat
        try:
            try:
                load(ref)
            except DstError as err:
                return ("error", err.exit_code, f"Dask worker {worker.address}: {err}")
            outcomes = run_chunk(ref, config, seeds, beat=beat, strategy=strategy,
                                 keep=keep, scenario_file=scenario_file)
        except DstError as err:
            if beat.closing is None:
                return ("error", err.exit_code, str(err))
            outcomes = []  # the interruption, reported as the scenario's own error
        finally:
            with _STATE:
                _RUNNING.pop(key, None)
        if beat.closing is not None:  # never part of a chunk for the whole of it
            raise WorkerClosing(f"Dask worker {worker.address} closed during {key}")
        return ("ok", outcomes)


def worker_facts(ref: str, hash_seed: int, dask_worker: Any = None) -> dict[str, Any]:
    """What the submitting process checks of each worker before any seed runs."""
    try:
        load(ref)
        missing = None
    except DstError as err:
        missing = str(err)
    return {"hash_seed": _wrong_hash_seed(dask_worker, hash_seed), "scenario": missing,
            "version": __version__}


def request_stop(run_id: str) -> None:
    with _STATE:
        _STOPPED.add(run_id)
        for beat in _RUNNING.values():
            if beat.run_id == run_id:
                beat.stop = True


def forget(run_id: str) -> None:
    with _STATE:
        _STOPPED.discard(run_id)
