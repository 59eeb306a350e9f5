"""Bulk runs on a Dask cluster: one night's seeds spread over many machines.

``run_on_cluster`` is ``run_bulk`` with the worker processes replaced by the
workers of a Dask scheduler that is already running (``dask scheduler``, then
``dask worker`` on each machine).  Each chunk of seeds (``seed_chunks``) is one
Dask task that calls ``run_chunk``, the very function local workers call, so a
seed's outcome and trace are the same wherever it ran.  Chunks come back as they
complete (``distributed.as_completed``) and are absorbed in seed order, as
``run_bulk`` absorbs them, through the same ``on_chunk`` callback into the same
:class:`~dst.runner.bulk.BulkSummary`: ``dst run`` records them in the same
results database, ``--resume`` works unchanged, and the summary is the one a
local run of the same seeds gives.

What a cluster adds, and how each is handled:

* **A worker lost mid-chunk loses no seed.**  The scheduler gives the chunk to
  another worker (``distributed.scheduler.allowed-failures`` times, then it is
  reported like a local worker that died); a task that raised is tried again
  ``retries`` times.  Each chunk is a future under its own key, read once: a chunk
  that ran twice is recorded once (and ``ResultsDB`` keys a chunk by its start).
* **Hash seed 0.**  ``dst`` runs every seed under it and local workers inherit
  it; a ``dask worker`` started by hand runs under a random one (a nanny's worker
  under 6640), and code that iterates a set of strings would give another trace.
  Rather than pay for a second interpreter per worker, each chunk checks the hash
  seed of its worker and fails with one line telling how to start workers
  (``PYTHONHASHSEED=0 dask worker ... --no-nanny``); the workers present at the
  start are checked before any seed runs.
* **One simulation per process.**  A run installs process-wide traps (the guard)
  and turns the garbage collector off while it runs, so two chunks must never
  run at once in one worker process: workers are started with ``--nthreads 1``
  (one ``dask worker`` per core), workers with more threads are refused at the
  start, and a lock serialises chunks in any that join later.
* **A seed that never finishes.**  Nothing can stop a thread that loops without
  ``await``; a watchdog thread in each worker process notices a seed that has
  not finished for ``seed_timeout`` seconds and reports it as a Dask event, and
  the run stops like a local run whose worker stopped answering.  The worker
  stays busy with the seed until it is restarted; the message says so.
* **The end of the night.**  Chunks carry the deadline (wall-clock time, so
  that it means the same on every machine); the watchdog asks the chunk to stop
  after its current seed once it passes, and the seeds finished so far count.
  Ctrl-C asks every worker the same; chunks that do not come back within
  ``GRACE`` are cancelled and reported in ``summary.not_run``.

Scenario references travel by text: a shipped name, a module importable on the
workers, or a ``.py`` file, which is passed as an absolute path and must exist
at that path on every worker (a shared file system, or the same checkout).
"""

from __future__ import annotations

import logging
import os
import queue
import re
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .. import __version__
from ..errors import DstError, InternalError, ScenarioError, UsageError
from ..registry import describe_exception
from .bulk import GRACE, BulkSummary, SeedOutcome, seed_chunks
from .cluster_worker import (
    START_WORKER,
    binding,
    chunk_task,
    events_topic,
    forget,
    request_stop,
    require_distributed,
    worker_facts,
)
from .groups import KeepPolicy
from .workers import SEED_TIMEOUT, CtrlC

#: ``distributed``'s client and futures, typed loosely: dst runs without the
#: package, and its annotations vary between releases.
Client = Any
Future = Any

#: How long to try reaching the scheduler before saying it cannot be reached.
CONNECT_TIMEOUT = 5.0

#: How long to wait for the first worker to join a scheduler that has none.
WORKER_TIMEOUT = 30.0

#: How often a chunk that raised (not one whose worker died: the scheduler
#: reschedules those by itself) is tried again before the run stops on it.
RETRIES = 2

#: The hash seed every simulation runs under (the ``dst`` command's).
HASH_SEED = 0

#: How often the submitting process looks for finished chunks, Ctrl-C and events.
_POLL = 0.05

#: How long to wait for the result of a chunk that has finished before looking at
#: the rest again (its worker died before answering, and it runs again).
_FETCH = 1.0

#: How often the submitting process asks how many threads the cluster has, to
#: keep about two chunks per thread submitted as workers come and go.
_RESIZE = 5.0

_ADDRESS = re.compile(r"tcp://(?P<host>[A-Za-z0-9.\-]+|\[[0-9A-Fa-f:.]+\]):(?P<port>\d{1,5})")



def parse_address(address: str) -> str:
    """``address`` if it is ``tcp://HOST:PORT`` and Dask distributed is installed.

    What ``dst run --cluster`` checks before connecting: both mistakes are one
    line saying what to type instead.
    """
    m = _ADDRESS.fullmatch(address.strip())
    if m is None or not 0 < int(m.group("port")) < 65536:
        raise UsageError(f"{address!r} is not a Dask scheduler address tcp://HOST:PORT "
                         "(e.g. tcp://10.0.0.5:8786)")
    require_distributed()
    return address.strip()


def connect(address: str, timeout: float = CONNECT_TIMEOUT) -> Client:
    """A client of the scheduler at ``address``, or one line saying it cannot be reached."""
    parse_address(address)
    try:
        return require_distributed().Client(address, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise UsageError(f"cannot reach Dask scheduler at {address} ({_reason(exc)}); start "
                         "one with `dask scheduler`") from None


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if not text or "timed out" in text.lower() or isinstance(exc, TimeoutError):
        return "no answer"
    return text[:120]


# -- in the submitting process -----------------------------------------------------------


def _check_workers(client: Client, address: str, ref: str, hash_seed: int,
                   worker_timeout: float) -> None:
    """Refuse to start unless each worker present can run the scenario as ``dst`` would."""
    start = START_WORKER.format(hash_seed=hash_seed, address=address, binding="")
    try:
        client.wait_for_workers(1, timeout=worker_timeout)
    except TimeoutError:
        raise UsageError(f"no Dask worker joined the scheduler at {address} within "
                         f"{worker_timeout:g}s; start some with `{start} --host H "
                         "--dashboard-address H:0`, H each machine's own address") from None
    threads = client.nthreads()
    facts = client.run(worker_facts, ref, hash_seed, on_error="return")
    for where, fact in sorted(facts.items()):
        if isinstance(fact, BaseException):
            raise DstError(f"Dask worker {where} could not be asked about itself "
                           f"({describe_exception(fact)}); is it the same dst and Python?")
        if fact["version"] != __version__:
            raise UsageError(f"Dask worker {where} runs dst {fact['version']}, this is dst "
                             f"{__version__}: install the same dst on every worker")
        if fact["hash_seed"] is not None:
            raise UsageError(fact["hash_seed"])
        if threads.get(where, 1) != 1:
            start = START_WORKER.format(hash_seed=hash_seed, address=address,
                                        binding=binding(where))
            raise UsageError(f"Dask worker {where} runs {threads[where]} threads, but a "
                             f"process runs one simulation at a time: start workers as "
                             f"`{start}`")
        if fact["scenario"] is not None:
            raise UsageError(f"Dask worker {where}: {fact['scenario']} (a scenario must be a "
                             "shipped name, a module importable there, or a .py file at the "
                             "same path on every worker)")


def _portable_ref(ref: str) -> str:
    """A ``.py`` file by absolute path: a worker's working directory is not ours."""
    if ref.endswith(".py") and os.path.isfile(ref):
        return os.path.abspath(ref)
    return ref


def run_on_cluster(
    address: str,
    scenario_ref: str,
    config: Mapping[str, Any],
    seeds: Iterable[int],
    *,
    deadline: float | None = None,
    on_chunk: Callable[[BulkSummary, list[SeedOutcome]], None] | None = None,
    summary: BulkSummary | None = None,
    seed_timeout: float = SEED_TIMEOUT,
    strategy: str = "random",
    keep: Callable[[], KeepPolicy | None] | None = None,
    max_failures: int | None = None,
    retries: int = RETRIES,
    hash_seed: int = HASH_SEED,
    connect_timeout: float = CONNECT_TIMEOUT,
    worker_timeout: float = WORKER_TIMEOUT,
    scenario_file: str | None = None,
) -> BulkSummary:
    """Run ``seeds`` on the workers of the Dask scheduler at ``address``.

    The arguments and the result are ``run_bulk``'s (``deadline`` is
    ``time.monotonic()`` time here too), without ``workers`` (the cluster has
    what it has) or ``check_determinism`` (it needs workers under other hash
    seeds: run it locally).  Chunks come back as they complete and are absorbed
    in seed order, as ``run_bulk`` absorbs them: ``on_chunk(summary, outcomes)``
    runs once per chunk, ``max_failures`` counts failures in seed order, and the
    summary is the one a local run of the same seeds gives.  An unreachable
    scheduler, no worker, or a worker that cannot run the scenario as ``dst``
    would is a one-line :class:`UsageError` before any seed runs; an error in
    the scenario's own code is raised once the chunks before it are absorbed.
    """
    summary = summary if summary is not None else BulkSummary()
    ref = _portable_ref(scenario_ref)
    client = connect(address, connect_timeout)
    run_id = uuid.uuid4().hex[:12]
    events: queue.Queue[dict[str, Any]] = queue.Queue()
    # Dask logs what it recovers from (a result fetched again after its worker died)
    # as warnings on stderr, where `dst run` draws its progress line; what it could
    # not recover from reaches the summary.
    dask_log = logging.getLogger("distributed")
    level = dask_log.level
    dask_log.setLevel(logging.ERROR)
    try:
        _check_workers(client, address, ref, hash_seed, worker_timeout)
        client.subscribe_topic(events_topic(run_id), lambda event: events.put(event[1]))
        submitter = _Submitter(client, run_id, ref, dict(config), summary, on_chunk, events,
                               seed_timeout=seed_timeout, strategy=strategy, keep=keep,
                               max_failures=max_failures, retries=retries,
                               hash_seed=hash_seed, worker_timeout=worker_timeout,
                               scenario_file=scenario_file)
        return submitter.run(seed_chunks(seeds), deadline)
    finally:
        try:
            client.run(forget, run_id, on_error="ignore")
        except Exception:
            pass  # the scheduler went away: nothing to tidy there
        client.close()
        dask_log.setLevel(level)


@dataclass
class _Chunk:
    """One chunk on its way through the cluster, absorbed in seed order."""

    seeds: list[int]
    future: Future
    outcomes: list[SeedOutcome] | None = None
    abandoned: bool = False

    @property
    def range(self) -> tuple[int, int]:
        return self.seeds[0], self.seeds[-1] + 1

    @property
    def shown(self) -> str:
        return f"seeds {self.seeds[0]}..{self.seeds[-1]}"

    def ready(self) -> bool:
        return self.abandoned or self.outcomes is not None


class _Submitter:
    """Keeps about two chunks per worker thread submitted; absorbs them in seed order."""

    def __init__(self, client: Client, run_id: str, ref: str, config: dict[str, Any],
                 summary: BulkSummary,
                 on_chunk: Callable[[BulkSummary, list[SeedOutcome]], None] | None,
                 events: queue.Queue[dict[str, Any]], *, seed_timeout: float, strategy: str,
                 keep: Callable[[], KeepPolicy | None] | None, max_failures: int | None,
                 retries: int, hash_seed: int, worker_timeout: float,
                 scenario_file: str | None = None) -> None:
        self.client, self.run_id, self.ref, self.config = client, run_id, ref, config
        #: The header's ``scenario_file``, made here: a worker's working directory is not ours.
        self.scenario_file = scenario_file
        self.summary, self.on_chunk, self.events = summary, on_chunk, events
        self.seed_timeout, self.strategy, self.keep = seed_timeout, strategy, keep
        self.max_failures, self.failed_before = max_failures, summary.failed
        self.retries, self.hash_seed = retries, hash_seed
        #: Chunks submitted and not yet absorbed, in seed order.
        self.order: deque[_Chunk] = deque()
        #: The same chunks by task key, until their result is read: a key is read once,
        #: so a chunk that ran twice (its first worker died) is absorbed once.
        self.pending: dict[str, _Chunk] = {}
        self.error: DstError | None = None
        self.window, self.resized = 2, -_RESIZE
        self.worker_timeout = worker_timeout
        #: Since when the scheduler has had no worker (None: it has some).
        self.no_workers_since: float | None = None

    def run(self, todo: Iterator[list[int]], deadline: float | None) -> BulkSummary:
        done = require_distributed().as_completed(loop=self.client.loop)
        exhausted = False
        stop_at: float | None = None  # once set: no new work; what runs gets until then
        summary = self.summary
        with CtrlC() as ctrl_c:
            while True:
                now = time.monotonic()
                self.notice_stuck_seeds()
                if stop_at is None and (ctrl_c.count or self.error is not None
                                        or summary.stalled or summary.stopped_early
                                        or (deadline is not None and now >= deadline)):
                    stop_at = now + GRACE
                    self.stop_workers()
                if ctrl_c.count > 1 and stop_at is not None:
                    stop_at = now  # a second Ctrl-C: stop at once
                if now - self.resized >= _RESIZE:
                    self.resize(now)
                if stop_at is None and not exhausted:
                    exhausted = self.submit(todo, now, deadline, done)
                while self.order and self.order[0].ready():
                    self.absorb(self.order.popleft())
                if not self.order:
                    if exhausted or stop_at is not None:
                        break
                    continue
                if stop_at is not None and now >= stop_at:
                    for chunk in self.order:
                        if not chunk.ready():
                            self.abandon(chunk)
                    continue
                if done.has_ready():
                    for future in done.next_batch(block=False):
                        if not self.received(future):
                            done.add(future)  # its result went with its worker: rerun
                else:
                    time.sleep(_POLL)
            summary.interrupted = bool(ctrl_c.count)
        if self.error is not None:
            raise self.error
        return summary

    def submit(self, todo: Iterator[list[int]], now: float, deadline: float | None,
               done: Any) -> bool:
        """Submit chunks up to the window; True once ``todo`` is exhausted."""
        # Wall-clock time: a worker's monotonic clock is not this process's.
        stop_at = None if deadline is None else time.time() + (deadline - now)
        while len(self.order) < self.window:
            seeds = next(todo, None)
            if seeds is None:
                return True
            key = f"dst-chunk-{self.run_id}-{seeds[0]}"
            policy = self.keep() if self.keep is not None else None
            future = self.client.submit(
                chunk_task, self.run_id, self.ref, self.config, seeds, self.strategy,
                policy, self.hash_seed, stop_at, self.seed_timeout, self.scenario_file, key=key,
                retries=self.retries, pure=False)
            chunk = _Chunk(seeds, future)
            self.order.append(chunk)
            self.pending[key] = chunk
            done.add(future)
        return False

    def resize(self, now: float) -> None:
        """Keep two chunks a worker thread in flight; stop when no worker is left."""
        self.resized = now
        threads = sum(self.client.nthreads().values())
        self.window = max(2, 2 * threads)
        if threads:
            self.no_workers_since = None
            return
        if self.no_workers_since is None:
            self.no_workers_since = now
        elif now - self.no_workers_since >= self.worker_timeout:
            self.stalled(f"no Dask worker left for {self.worker_timeout:g}s (did the code "
                         "under test end their processes?); start workers, then continue "
                         "with --resume", None)

    def received(self, future: Future) -> bool:
        """Take a chunk's result; False if it could not be fetched (the task runs again)."""
        key = str(future.key)
        chunk = self.pending.get(key)
        if chunk is None:
            return True  # abandoned on the way, or read before: a chunk is absorbed once
        status = future.status
        if status == "lost":
            # Finished, then its worker died with the result before it was read: the
            # scheduler runs the chunk again for the future this process holds.
            return False
        if status == "finished":
            try:
                # Its worker may die between finishing and answering: Dask then runs
                # the chunk again, and this waits for that; never block the loop on it.
                reply = future.result(timeout=_FETCH)
            except TimeoutError:
                return False
            del self.pending[key]
            future.release()
            if reply[0] == "ok":
                chunk.outcomes = reply[1]
                return True
            self.error = self.error or _relayed(reply[1], reply[2])
            chunk.abandoned = True
            return True
        del self.pending[key]
        if status == "error":
            exc = future.exception()
            if isinstance(exc, require_distributed().KilledWorker):
                self.stalled(f"{chunk.shown}: every Dask worker that ran them died (the code "
                             "under test ended its process?)", None)
            else:
                self.error = self.error or InternalError(
                    f"{describe_exception(exc)} while running {chunk.shown} on Dask")
        else:
            self.stalled(f"{chunk.shown}: the Dask scheduler reports them {status} (their "
                         "workers died with the result and none is left to run them again, "
                         "or the scheduler restarted)", None)
        chunk.abandoned = True
        return True

    def absorb(self, chunk: _Chunk) -> None:
        summary = self.summary
        if summary.stopped_early:
            return  # beyond the last failure wanted: as if never asked for
        if chunk.abandoned:
            summary.not_run.append(chunk.range)
            return
        outcomes = chunk.outcomes or []
        if self.max_failures is not None:
            left = self.max_failures - (summary.failed - self.failed_before)
            for i, o in enumerate(outcomes):
                left -= o.verdict == "fail"
                if left <= 0:
                    outcomes, summary.stopped_early = outcomes[:i + 1], True
                    break
        if not outcomes:
            return
        summary.absorb(outcomes)
        if self.on_chunk is not None:
            self.on_chunk(summary, outcomes)

    def abandon(self, chunk: _Chunk) -> None:
        """Give up on a chunk: its result, should it come, is not read."""
        self.pending.pop(str(chunk.future.key), None)
        chunk.future.cancel()
        chunk.abandoned = True

    def stalled(self, why: str, seed: int | None) -> None:
        if self.summary.stalled is None:
            self.summary.stalled, self.summary.stalled_seed = why, seed

    def notice_stuck_seeds(self) -> None:
        while True:
            try:
                event = self.events.get_nowait()
            except queue.Empty:
                return
            chunk = self.pending.get(str(event["key"]))
            if chunk is None:
                continue
            self.abandon(chunk)
            self.stalled(f"seed {event['seed']} stopped answering: no run finished for "
                         f"{event['seconds']:g}s on Dask worker {event['worker']} (a loop "
                         "without await, or a call that blocks, in the code under test?); "
                         "that worker stays busy with it until restarted", int(event["seed"]))

    def stop_workers(self) -> None:
        """Chunks in flight stop after their current seed; those not started, at once."""
        try:
            self.client.run(request_stop, self.run_id, on_error="ignore")
        except Exception:
            pass  # a worker that cannot be asked loses its chunk at ``stop_at``


def _relayed(code: int, message: str) -> DstError:
    err = ScenarioError(message) if code == ScenarioError.exit_code else DstError(message)
    err.exit_code = code
    return err
