"""Bulk runs: seeds in chunks, on worker processes watched by this one.

Workers get the scenario by reference and a chunk of seeds, run it
(``dst.runner.chunk``) and send back one small summary per seed plus the full
trace text of failing seeds only.

Seeds run in worker processes even with one worker, so that this process stays
free to watch them: it stops a worker whose seed stops finishing (a loop without
``await``, or a blocking call, in the code under test: nothing inside the run can
preempt those), it turns Ctrl-C into a clean stop after the seeds in flight, and
it never waits long past ``deadline``.  Each worker publishes a heartbeat in
shared memory (runs finished, the seed it is on, a stop request), so watching
costs the worker no system call inside the guarded run.

``check_determinism`` runs every seed three times: twice in one worker (state
that leaks from one run into the next shows up) and once more in a worker started
under another ``PYTHONHASHSEED`` (code that iterates a set of strings shows up).
The traces are compared byte for byte, header aside, which names the hash seed.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection as mpc
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import DstError, InternalError, ScenarioError
from ..registry import describe_exception, load
from ..trace.model import current_hash_seed
from .chunk import CHUNK, SeedOutcome, _run_pass, run_chunk, seed_chunks, user_error
from .determinism import comparable, cross_difference, other_hash_seeds
from .groups import BOUNDED_KEPT, GroupBook, KeepPolicy
from .paths import PathMemo
from .workers import (
    SEED_TIMEOUT,
    STOP,
    Beat,
    CtrlC,
    Pool,
    Slot,
    describe_death,
    die_with_parent,
    ignore_sigint,
)

#: After ``deadline`` or Ctrl-C, how long the seeds in flight get to finish
#: before their workers are stopped (a worker stops after its current seed).
GRACE = 2.0

#: How often the watching process looks at the heartbeats when nothing arrives.
_POLL = 0.1

#: The heartbeat, by its old name (``run_chunk(beat=...)``).
_Beat = Beat


__all__ = ["CHUNK", "GRACE", "BulkSummary", "SeedOutcome", "run_bulk", "run_chunk", "seed_chunks",
           "user_error"]


@dataclass
class BulkSummary:
    runs: int = 0
    #: Runs an earlier seed's run of the same decisions stood for (``dst.runner.paths``).
    reused: int = 0
    #: Every failing seed, when ``keep_traces``; otherwise empty, and ``failed``
    #: and ``groups`` say what failed (a long run must not hold an entry per failure).
    failures: list[SeedOutcome] = field(default_factory=list)
    by_invariant: dict[str, int] = field(default_factory=dict)
    nondeterministic: list[SeedOutcome] = field(default_factory=list)
    decisions: int = 0
    #: Runs that hit the scenario's step bound (end-of-run checks not run), and
    #: the first few of their seeds in this invocation.
    bounded: int = 0
    bounded_seeds: list[int] = field(default_factory=list)
    #: True when Ctrl-C stopped the run early (the chunks done so far count).
    interrupted: bool = False
    #: Seeds that were in flight on a worker that had to be stopped (it stopped
    #: answering, died, or outlived the grace after ``deadline`` or Ctrl-C), as
    #: ``[start, stop)`` ranges.  They are not recorded as done.
    not_run: list[tuple[int, int]] = field(default_factory=list)
    #: Why a worker was stopped or died, when one was: the run is then incomplete.
    stalled: str | None = None
    #: The seed the stopped worker was on, when ``stalled``.
    stalled_seed: int | None = None
    #: Keep every failure, with its trace text, in ``failures``.  Off when the
    #: caller writes the traces it keeps to disk as chunks come back: a long run
    #: with a planted bug switched on must not hold thousands of them in memory.
    keep_traces: bool = True
    #: Coverage across the runs: every probe called in any run, those that held
    #: in at least one, and the digests of the distinct fingerprints seen.
    probes_declared: set[str] = field(default_factory=set)
    probes_reached: set[str] = field(default_factory=set)
    states: set[int] = field(default_factory=set)
    #: Failing seeds, and their groups by signature (``dst.runner.groups``).
    failed: int = 0
    groups: GroupBook = field(default_factory=GroupBook)
    #: ``max_failures`` was reached: the seeds after the last failure counted did not run.
    stopped_early: bool = False
    #: Traces of runs cut at the step bound kept so far (the caller counts them).
    bounded_kept: int = 0
    #: Seeds whose ``@dst.test`` body skipped (``pytest.skip()``), by reason, and the
    #: first few of them (this invocation's: a resumed run's are not recorded).
    skipped: dict[str, int] = field(default_factory=dict)
    skipped_seeds: list[int] = field(default_factory=list)

    @property
    def probes_never_reached(self) -> list[str]:
        return sorted(self.probes_declared - self.probes_reached)

    def add_bounded(self, seed: int) -> None:
        """Count a run cut at the step bound (from this invocation or a resumed one)."""
        self.bounded += 1
        if len(self.bounded_seeds) < 3:
            self.bounded_seeds.append(seed)

    def count_failure(self, seed: int, steps: int, violated: Iterable[str],
                      sig: str | None) -> None:
        """Count one failing seed in ``failed``, ``by_invariant`` and its group (or,
        past ``--max-groups``, in the groups' count of failures not kept)."""
        self.failed += 1
        violated = tuple(violated)
        for name in violated:
            self.by_invariant[name] = self.by_invariant.get(name, 0) + 1
        if sig is not None:
            self.groups.count(sig, seed, steps, violated)

    def keep_policy(self) -> KeepPolicy | None:
        """What workers should render now (None: every failing trace)."""
        return self.groups.policy(max(0, BOUNDED_KEPT - self.bounded_kept))

    def absorb(self, outcomes: list[SeedOutcome]) -> None:
        for o in outcomes:
            self.runs += 1
            self.reused += o.reused
            self.decisions += o.steps
            if o.ended == "bound":
                self.add_bounded(o.seed)
            if o.skipped is not None:
                self.skipped[o.skipped] = self.skipped.get(o.skipped, 0) + 1
                if len(self.skipped_seeds) < 3:
                    self.skipped_seeds.append(o.seed)
            if o.verdict == "fail":
                if self.keep_traces:
                    self.failures.append(replace(o, lines=None))
                self.count_failure(o.seed, o.steps, o.violated, o.signature)
            if o.nondeterminism:
                self.nondeterministic.append(replace(o, lines=None))
            if o.probes_declared:
                self.probes_declared |= o.probes_declared
                self.probes_reached |= o.probes_reached
            if o.states:
                self.states |= o.states


# -- worker processes -------------------------------------------------------------------


def _serve(conn: Any, array: Any, hash_seed: int | None) -> None:
    """A worker's loop: run each job sent, answer with its result or a one-line error.

    Ctrl-C is left to the watching process, which stops cleanly and summarises.
    """
    ignore_sigint()
    die_with_parent()
    beat = Beat(array)
    # The schedules this worker has run, for the rest of its chunks: a worker serves
    # one ``run_bulk``, so one scenario, config and strategy (keyed all the same).
    memos: dict[tuple[Any, ...], PathMemo] = {}
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        ref, config, seeds, mode, strategy, keep, scenario_file = job
        reply: tuple[Any, ...]
        try:
            if hash_seed is not None and current_hash_seed() != hash_seed:
                raise DstError(f"the determinism check could not start a worker under "
                               f"PYTHONHASHSEED={hash_seed}; is python run with -E or -I?")
            if mode == "other":
                scenario = load(ref)
                reply = ("ok", [comparable(r) for r in
                                _run_pass(scenario, ref, config, seeds, beat, strategy)])
            else:
                memo: bool | PathMemo = False
                if mode == "run":
                    memo = memos.setdefault(
                        (ref, repr(sorted(config.items())), strategy, scenario_file),
                        PathMemo())
                reply = ("ok", run_chunk(ref, config, seeds, mode == "check", beat=beat,
                                         strategy=strategy, keep=keep,
                                         scenario_file=scenario_file, reuse=memo))
        except DstError as err:
            reply = ("error", err.exit_code, str(err))
        except BaseException as exc:  # a dst bug: still one line, never a pool traceback
            reply = ("error", InternalError.exit_code,
                     str(InternalError(describe_exception(exc))))
        try:
            conn.send(reply)
        except OSError:  # the watching process is gone: nobody to answer
            return


def _relayed(code: int, message: str) -> DstError:
    err = ScenarioError(message) if code == ScenarioError.exit_code else DstError(message)
    err.exit_code = code
    return err


@dataclass
class _Entry:
    """One chunk on its way through the workers, absorbed in seed order."""

    seeds: list[int]
    #: The hash seeds this chunk still has to be run under for the determinism check.
    awaiting: set[int]
    outcomes: list[SeedOutcome] | None = None
    #: ``comparable`` lines of the chunk's seeds run under each other hash seed.
    others: dict[int, list[tuple[str, ...]]] = field(default_factory=dict)
    abandoned: bool = False

    def ready(self) -> bool:
        return self.abandoned or (self.outcomes is not None and not self.awaiting)


def _upto_failures(outcomes: list[SeedOutcome], left: int) -> list[SeedOutcome] | None:
    """``outcomes`` up to and with the ``left``-th failure; None if they hold fewer."""
    for i, o in enumerate(outcomes):
        if o.verdict == "fail":
            left -= 1
            if left <= 0:
                return outcomes[:i + 1]
    return None


def run_bulk(
    scenario_ref: str,
    config: Mapping[str, Any],
    seeds: Iterable[int],
    *,
    workers: int = 1,
    deadline: float | None = None,
    check_determinism: bool = False,
    on_chunk: Callable[[BulkSummary, list[SeedOutcome]], None] | None = None,
    summary: BulkSummary | None = None,
    seed_timeout: float = SEED_TIMEOUT,
    strategy: str = "random",
    keep: Callable[[], KeepPolicy | None] | None = None,
    max_failures: int | None = None,
    scenario_file: str | None = None,
    reuse: bool = True,
) -> BulkSummary:
    """Run ``seeds`` (possibly endless: then until ``deadline``) in chunks on workers.

    ``on_chunk(summary, outcomes)`` runs after each chunk is absorbed into
    ``summary`` (a fresh one unless given); chunks are absorbed in seed order
    whatever the timing.  Ctrl-C stops the run after the seeds in flight (a
    second Ctrl-C at once) and sets ``summary.interrupted``; a worker that
    finishes no seed for ``seed_timeout`` seconds is stopped and described in
    ``summary.stalled``.  An error in the scenario's own code is raised as a
    one-line :class:`~dst.errors.DstError` once the chunks before it are absorbed.
    ``strategy`` is a spec (``dst.explore.strategies``): workers rebuild it from
    the text, so a strategy needs no pickling and the run key can name it.

    ``keep()``, asked as each chunk is sent, tells the worker which failing traces
    to render (``dst.runner.groups``); without it every failing trace comes back.
    ``max_failures`` stops the run once that many seeds have failed (in seed
    order, so whatever the number of workers): the chunk holding the last one is
    cut after it, and the seeds after it count as not run at all.  ``scenario_file``
    goes in the header of every trace (``dst.trace.model.scenario_file``).
    With ``reuse`` (the default), each worker answers a seed whose decisions one of
    its earlier seeds took with that run (``dst.runner.paths``); without, every seed
    runs.
    """
    summary = summary if summary is not None else BulkSummary()
    cfg = dict(config)
    chunks = seed_chunks(seeds)
    mine = current_hash_seed()
    main = Pool(multiprocessing.get_context("fork"), workers, _serve)
    # Spawned, not forked: a fork would inherit this interpreter's hash seed.
    checkers = {seed: Pool(multiprocessing.get_context("spawn"), workers, _serve, seed)
                for seed in (other_hash_seeds(mine) if check_determinism else [])}
    pools = [main, *checkers.values()]
    unchecked: dict[int, deque[_Entry]] = {seed: deque() for seed in checkers}
    entries: deque[_Entry] = deque()
    error: DstError | None = None
    exhausted = False
    stop_at: float | None = None  # once set: no new work; what runs gets until then
    failed_before = summary.failed
    # A chunk came back cut short by a stop: the chunks after it are dropped too, so
    # that the seeds done stay one contiguous run from the first (``--resume`` with a
    # longer range then continues where the summary says it stopped).
    cut_short = False

    def absorb(entry: _Entry) -> None:
        nonlocal cut_short
        if summary.stopped_early:
            return  # beyond the last failure wanted: as if never asked for
        if entry.abandoned:
            summary.not_run.append((entry.seeds[0], entry.seeds[-1] + 1))
            return
        if cut_short:
            return
        outcomes = entry.outcomes or []
        for seed, texts in entry.others.items():
            # Only the seeds every process finished count (a stop may cut a pass short).
            outcomes = [o if o.nondeterminism or o.lines is None else replace(
                o, nondeterminism=cross_difference(o.lines, lines, mine, seed))
                for o, lines in zip(outcomes, texts, strict=False)]
        cut_short = len(outcomes) < len(entry.seeds)
        if max_failures is not None:
            cut = _upto_failures(outcomes, max_failures - (summary.failed - failed_before))
            if cut is not None:
                outcomes, summary.stopped_early = cut, True
        if not outcomes:
            return
        summary.absorb(outcomes)
        if on_chunk is not None:
            on_chunk(summary, outcomes)

    def abandon(slot: Slot) -> None:
        if slot.entry is not None:
            slot.entry.abandoned = True
            slot.entry = None
        slot.kill()

    def stalled(slot: Slot, why: str) -> None:
        if summary.stalled is None:
            summary.stalled, summary.stalled_seed = why, slot.seed
        abandon(slot)

    def received(slot: Slot, reply: tuple[Any, ...]) -> None:
        nonlocal error
        entry = slot.entry
        assert entry is not None
        slot.entry = None
        if reply[0] != "ok":
            entry.abandoned = True
            error = error or _relayed(reply[1], reply[2])
        elif slot.hash_seed is None:
            entry.outcomes = reply[1]
        else:
            entry.others[slot.hash_seed] = reply[1]
            entry.awaiting.discard(slot.hash_seed)

    with CtrlC() as ctrl_c:
        try:
            while True:
                now = time.monotonic()
                if stop_at is None and (ctrl_c.count or error is not None or summary.stalled
                                        or summary.stopped_early
                                        or (deadline is not None and now >= deadline)):
                    stop_at = now + GRACE
                    for pool in pools:
                        for slot in pool.busy():
                            slot.array[STOP] = 1
                    for waiting in unchecked.values():
                        for entry in waiting:
                            # Never started: an empty pass, so none of the chunk counts.
                            entry.awaiting.clear()
                            entry.others[-1] = []
                        waiting.clear()
                if ctrl_c.count > 1 and stop_at is not None:
                    stop_at = now  # a second Ctrl-C: stop at once
                while stop_at is None and not ctrl_c.count and not exhausted \
                        and len(entries) <= 2 * workers and main.has_idle():
                    todo = next(chunks, None)
                    if todo is None:
                        exhausted = True
                        break
                    slot = next(main.idle())
                    if ctrl_c.count:
                        # Pressed while that worker started (it lands once it has):
                        # this chunk is not sent, like every chunk after it.
                        break
                    entry = _Entry(todo, awaiting=set(checkers))
                    entries.append(entry)
                    policy = keep() if keep is not None else None
                    if policy is not None and max_failures is not None:
                        left = max_failures - (summary.failed - failed_before)
                        policy = replace(policy, first=max(0, left))
                    slot.send(entry, todo[0], (
                        scenario_ref, cfg, todo,
                        "check" if check_determinism else "run" if reuse else "every",
                        strategy, policy, scenario_file))
                    for waiting in unchecked.values():
                        waiting.append(entry)
                if stop_at is None and not ctrl_c.count:
                    for seed, pool in checkers.items():
                        for slot in pool.idle():
                            if not unchecked[seed] or ctrl_c.count:
                                break
                            entry = unchecked[seed].popleft()
                            slot.send(entry, entry.seeds[0], (
                                scenario_ref, cfg, entry.seeds, "other", strategy, None,
                                None))
                while entries and entries[0].ready():
                    absorb(entries.popleft())
                if not entries:
                    if exhausted or stop_at is not None:
                        break
                    continue
                if stop_at is None and ctrl_c.count:
                    continue  # pressed since the top: stop the workers now, not after a wait
                busy = [s for pool in pools for s in pool.busy()]
                if stop_at is not None and now >= stop_at:
                    for slot in busy:
                        abandon(slot)
                    continue
                waits = [s.conn for s in busy] + [s.proc.sentinel for s in busy]
                ready = mpc.wait(waits, timeout=_POLL) if waits else []
                now = time.monotonic()
                for slot in busy:
                    if slot.conn in ready or slot.conn.poll():
                        try:
                            received(slot, slot.conn.recv())
                            continue
                        except (EOFError, OSError):
                            pass  # it died while answering: told below
                    if not slot.proc.is_alive():
                        stalled(slot, describe_death(slot))
                    elif slot.stuck_for(now) > seed_timeout and stop_at is None:
                        stalled(slot, f"seed {slot.seed} stopped answering: no run finished "
                                      f"for {seed_timeout:g}s, so its worker was stopped (a "
                                      "loop without await, or a call that blocks, in the "
                                      "code under test?)")
            summary.interrupted = bool(ctrl_c.count)
        finally:
            # Still counting Ctrl-C: a press while the workers are stopped is no
            # KeyboardInterrupt out of the middle of closing them.
            for pool in pools:
                pool.close()
    if error is not None:
        raise error
    return summary
