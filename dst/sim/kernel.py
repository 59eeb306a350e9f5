"""The controlled scheduler: one simulated run of a system under test.

Design
------
A *choice point* is any call the code under test makes through its ``Env``
(a store read or write, a send, a service call): the calling task records what
it is about to do and parks.  Timers and messages in flight are choice points
too, owned by nobody.  Code between two choice points runs without interruption
from dst (trio may still interleave tasks that become runnable together; their
order comes from trio's generator, which is reseeded per run).

When every task is blocked (*quiescence*, detected by :class:`VirtualClock`),
the kernel lists the enabled options in a stable order (tasks sorted by label,
then messages by id, then the next timer, then faults), checks the invariants
against the state the last step left, and asks the :class:`Strategy` for one
option.  It records the decision, performs it (reschedule one task, deliver /
drop / duplicate one message, jump the clock to the next deadline, crash or
restart one process) and hands control back to trio.  The run therefore is a
pure function of the scenario, its config, the seed and the strategy; the
decision records are exactly what a replay must force.

A hard crash is not a cancellation, although it uses one to unwind: the
process is marked dead *first*, so that every ``finally``/``except`` block that
runs while its tasks unwind finds each ``Env`` call refused (and recorded),
and its volatile state is dropped; a restart runs its ``main`` again with fresh
memory over the same durable stores.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import outcome
import trio
import trio.lowlevel as ll
from trio.abc import Instrument

from ..errors import DivergenceError, ProcessCrashed
from . import trio_internals
from .blocked import describe_wait, in_lock_cycle, user_frames
from .clock import VirtualClock
from .faults import NO_FAULTS, FaultPlan
from .net import Network
from .process import _CURRENT as _INCARNATION_VAR
from .process import CRASHED, RUNNING, Incarnation, Process
from .store import SimStore
from .strategy import Strategy

#: Steps after which a run stops with verdict "pass (bounded)".  Large enough
#: for every shipped scenario to reach quiescence; small enough that a livelock
#: (a timer that re-arms forever) costs milliseconds, not a hung worker.
DEFAULT_MAX_STEPS = 5000

#: Passes of trio's run loop between two decisions before the scheduler steps in.
#: Code that keeps trio's run queue busy (``while not flag: await trio.sleep(0)``)
#: never lets the system come to rest, so quiescence never comes; past this
#: many passes the scheduler decides anyway (another task, a message, a timer, a
#: fault may go next), and when nothing else could go the run is a ``Livelock``.
#: Far above what any shipped scenario does between two choice points.
BUSY_PASSES = 1000

#: Task steps watched, once a run is busy, to see which tasks keep running.
_WATCHED_STEPS = 64

Invariant = Callable[[], object]

_INF = math.inf

# Option kinds (ints: compared on the hot path).
_TASK, _TIMER, _DELIVER, _DROP, _DUP, _CRASH, _RESTART, _HELD = range(8)

class RunStopped(BaseException):
    """Unwinds a task when the run stops: thrown into tasks that a cancellation cannot
    reach (a shielded ``Env`` call, a shielded loop), and raised by a data choice
    when a replay diverges."""


#: The run currently executing in this thread (set while its tasks run), for
#: the structlog processor and the guard, which have no other way to find it.
ACTIVE: list[Sim] = []


def canonical(value: object) -> str:
    """Canonical JSON: sorted keys, no NaN, UTF-8 as is."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


class Sim:
    """One simulated run.  Scenarios build the system on it in their ``setup``."""

    def __init__(
        self,
        seed: int,
        strategy: Strategy,
        *,
        faults: FaultPlan = NO_FAULTS,
        max_steps: int = DEFAULT_MAX_STEPS,
    ) -> None:
        self.seed = seed
        self.strategy = strategy
        self.faults = faults
        self.max_steps = max_steps
        #: Decisions taken so far; records are stamped with it.
        self.step = 0
        #: Trace records as tuples; rendered to JSON only when asked.
        self.records: list[tuple[Any, ...]] = []
        self.processes: dict[str, Process] = {}
        self.stores: dict[str, SimStore] = {}
        self.services: dict[str, Callable[[str, Any], Any]] = {}
        self.net = Network(self)
        self.violated: list[str] = []
        self.divergence: DivergenceError | None = None
        #: Why the run ended: "quiescent", "bound", "violation", "diverged".
        self.ended: str | None = None
        self.crashes_left = faults.max_crashes
        #: Names of processes that are crashed now (restart is then an option).
        self.crashed: set[str] = set()
        self.drops_left = faults.max_drops
        self.dups_left = faults.max_dups
        #: An error raised by a check or the strategy inside trio's loop.
        self.error: BaseException | None = None
        self._invariants: list[tuple[str, Invariant]] = []
        self._end_checks: list[tuple[str, Invariant]] = []
        self._parked: dict[ll.Task, str] = {}
        self._task_labels: dict[ll.Task, str] = {}
        self._label_owner: dict[str, ll.Task] = {}
        self._clock: VirtualClock | None = None
        self._nursery: trio.Nursery | None = None
        self._stopping = False
        self._keeper: ll.Task | None = None
        #: Loop passes since the last decision (see BUSY_PASSES); once past it,
        #: the instrument that watches task steps, the steps it saw, and the
        #: labels of the tasks that kept running, for the Livelock report.
        self._busy = 0
        self._watch: _StepWatch | None = None
        self._watched = 0
        self._spinning: set[str] = set()
        self._spin_counts: dict[ll.Task, int] = {}
        self._doom_watch: _DoomWatch | None = None
        #: Preemption at trio checkpoints (see FaultPlan.preemptions): tasks
        #: taken out of trio's run queue, the task that yielded last (running
        #: anything else preempts it), and the instrument that holds them.
        self.preemptions_left = faults.preemptions
        self._held: dict[ll.Task, str] = {}
        self._continuation: ll.Task | None = None
        self._hold_watch: _HoldWatch | None = None
        #: True while the kernel itself wakes tasks (performing a decision):
        #: those wake-ups are the decision, not new choice points.
        self._releasing = False
        #: Tasks of dead incarnations still alive: each is interrupted with
        #: ProcessCrashed whenever it blocks (see ``_bury``).
        self._doomed: set[ll.Task] = set()
        #: Each task's incarnation, for the tasks of processes.
        self._incarnation_of: dict[ll.Task, Incarnation] = {}

    # -- building the system (called from a scenario's setup) -----------------

    def store(self, name: str) -> SimStore:
        """The durable store ``name`` (created empty on first use); survives crashes."""
        store = self.stores.get(name)
        if store is None:
            store = self.stores[name] = SimStore(name)
        return store

    def process(
        self,
        name: str,
        main: Callable[[Any], Awaitable[object]],
        *,
        stores: Sequence[str] = (),
        crashable: bool = True,
        idle: bool = False,
    ) -> Process:
        """Start ``main(env)`` as process ``name``, connected to the named stores.

        ``idle=True`` says the process may wait forever once its work is done (a
        server waiting for the next request on a ``trio.Event`` or in
        ``sleep_forever``): at the end of the run its blocked tasks are idle, not
        a ``Deadlock``.  Waiting in ``env.net.recv()`` is always idle.
        """
        if name in self.processes:
            raise ValueError(f"a process named {name!r} already exists in this run")
        for store_name in stores:
            self.store(store_name)
        proc = Process(self, name, main, tuple(stores), crashable, idle)
        self.processes[name] = proc
        if self._nursery is not None:
            proc.start(self._nursery)
        return proc

    def service(self, name: str, handler: Callable[[str, Any], Any]) -> None:
        """Register a fake outside service: ``handler(op, request) -> reply``."""
        self.services[name] = handler

    def invariant(self, name: str, check: Invariant) -> None:
        """``check()`` runs after every step: ``True`` holds; ``False`` or a message breaks it."""
        self._invariants.append((name, check))

    def at_end(self, name: str, check: Invariant) -> None:
        """``check()`` runs once when the run reaches quiescence."""
        self._end_checks.append((name, check))

    def choose(self, label: str, options: Sequence[str]) -> str:
        """A data choice (what the fake LLM picks, whether a supplier fails...).

        Recorded like a scheduling decision, so replay forces it and search can
        branch on it.  ``options`` must be in a stable order.
        """
        if not options:
            raise ValueError(f"choose({label!r}) needs at least one option")
        labels = [f"{label}:{o}" for o in options]
        self.step += 1
        if self._watch is not None:
            self._unwatch()
        self._busy = 0
        try:
            index = self.strategy.choose(self.step, labels, None)
        except DivergenceError as exc:
            self.divergence = exc
            self._stop("diverged")
            raise RunStopped("the run diverged from its trace") from None
        self.records.append(("decision", self.step, self.now, "data", tuple(labels), index))
        return options[index]

    def rng(self, purpose: str) -> random.Random:
        """A generator derived from the seed and ``purpose`` (for fakes)."""
        return random.Random(f"dst/{self.seed}/{purpose}")

    @property
    def now(self) -> float:
        return self._clock.now if self._clock is not None else 0.0

    # -- what the code under test reaches through Env -------------------------

    def event(self, actor: str, event: str, fields: dict[str, Any]) -> None:
        """Record a runtime event (the structlog processor lands here)."""
        self.records.append(
            ("event", self.step, self.now, actor, event, canonical_fields(fields))
        )

    def fault(self, what: str, target: str, detail: str = "") -> None:
        self.records.append(("fault", self.step, self.now, what, target, detail))

    def actor(self) -> str:
        """Who is running now: the current task's label, or its process's name."""
        try:
            task = ll.current_task()
        except RuntimeError:
            return "dst"
        label = self._task_labels.get(task)
        if label is not None:
            return label
        proc = Process.current()
        return proc.name if proc is not None else "dst"

    def enter(self, proc: Incarnation, op: str) -> Awaitable[object]:
        """Park the calling task at a choice point until the strategy picks it.

        ``proc`` is the incarnation whose ``Env`` made the call: a call through
        the handles of a dead incarnation is refused even after its process
        restarted.  A parked call is performed only if its incarnation is still
        alive when the strategy picks it: a crash takes its parked calls out of
        the enabled set (``_bury``), shielded or not.
        """
        if proc.state is not RUNNING:
            return self.refuse(proc, op)
        if self._stopping:
            return _stopped()
        task = ll.current_task()
        label = self._task_labels.get(task)
        if label is None:
            label = self._label_task(task, proc)
        parked = self._parked
        parked[task] = f"{label}@{op}"

        def abort(_: object) -> ll.Abort:
            parked.pop(task, None)
            return ll.Abort.SUCCEEDED

        return ll.wait_task_rescheduled(abort)

    async def refuse(self, proc: Incarnation, op: str) -> None:
        """A dead incarnation tried to touch the world: record it, then unwind."""
        live = proc.process.live
        if live is not proc:
            op = f"{op} by incarnation {proc.number} (now {live.number})"
        self.fault("refused", proc.name, op)
        self._doom(ll.current_task())
        await ll.checkpoint()  # raises Cancelled when the process's own scope is cancelled
        raise ProcessCrashed(f"process {proc.name} has crashed; {op} refused")

    def release_labels(self, proc: Process) -> None:
        """A restarted process's new tasks take the labels its dead ones had."""
        prefix = proc.name + "/"
        for label in [lb for lb in self._label_owner if lb == proc.name or lb.startswith(prefix)
                      or lb.startswith(proc.name + "#")]:
            task = self._label_owner.pop(label)
            self._task_labels.pop(task, None)

    def task_spawned(self, task: ll.Task) -> None:
        """Label a process's child task in the order it was started (stable, readable),
        and tie it to its incarnation, so that it dies with it wherever it runs."""
        inc = task.context.get(_INCARNATION_VAR)
        if inc is not None and inc.process.sim is self:
            inc.tasks.add(task)
            self._incarnation_of[task] = inc
            if inc.state is not RUNNING:
                self._doom(task)  # started while its incarnation was dying
            self._label_task(task, inc)

    def task_exited(self, task: ll.Task) -> None:
        inc = self._incarnation_of.pop(task, None)
        if inc is not None:
            inc.tasks.discard(task)
        self._doomed.discard(task)

    def _label_task(self, task: ll.Task, inc: Incarnation) -> str:
        proc = inc.process
        if task is inc.main_task:
            base = proc.name
        else:
            base = f"{proc.name}/{_task_name(task)}"
        label, n = base, 1
        while label in self._label_owner and self._label_owner[label] is not task:
            n += 1
            label = f"{base}#{n}"
        self._label_owner[label] = task
        self._task_labels[task] = label
        return label

    # -- the scheduler --------------------------------------------------------

    def on_quiescence(self, deadline: float) -> float:
        """Every task is blocked: check, choose one option, perform it.

        trio calls this from inside its run loop, where an exception would be a
        ``TrioInternalError``; a failing invariant or strategy is therefore kept,
        the run stopped, and the error re-raised once ``trio.run`` is unwound.
        """
        try:
            return self._schedule(deadline)
        except BaseException as exc:
            self.error = exc
            self._stop("error")
            return 0.0

    def _schedule(self, deadline: float) -> float:
        clock = self._clock
        assert clock is not None
        if self._watch is not None:
            self._unwatch()
        self._busy = 0
        if self._stopping:
            return 0.0
        now = clock.now
        if deadline <= now:
            return 0.0  # trio expires it in this very pass; nothing to choose
        if self._invariants and self._check_invariants():
            return 0.0
        if self._held:
            return self._schedule_held(deadline, clock)
        if self.step >= self.max_steps:
            self._stop("bound")
            return 0.0
        parked = self._parked
        if (
            deadline == _INF
            and not self.net.in_flight
            and self.crashes_left <= 0
            and not self.crashed
        ):
            # The common case, kept lean: only parked tasks are enabled.
            if not parked:
                self._end_quiescent()
                return 0.0
            if len(parked) == 1:
                ((task, label),) = parked.items()
                labels = [label]
                index = self._decide(labels, None)
            else:
                items = sorted(parked.items(), key=_by_label)
                labels = [label for _, label in items]
                index = self._decide(labels, None)
                task = items[index][0]
            if index >= 0:
                del parked[task]
                ll.reschedule(task)
            return 0.0
        options = self._options(deadline)
        if not options:
            self._end_quiescent()
            return 0.0
        labels = [o[0] for o in options]
        weights: list[float] | None = None
        for o in options:
            if o[1] != 1.0:
                weights = [o[1] for o in options]
                break
        index = self._decide(labels, weights)
        if index >= 0:
            self._perform(options[index], clock)
        return 0.0

    def _decide(self, labels: list[str], weights: list[float] | None) -> int:
        """Ask the strategy and record the decision; -1 when the replay diverged."""
        self.step += 1
        if self._watch is not None:
            self._unwatch()
        self._busy = 0
        try:
            index = self.strategy.choose(self.step, labels, weights)
        except DivergenceError as exc:
            self.divergence = exc
            self._stop("diverged")
            return -1
        self.records.append(("decision", self.step, self.now, "schedule", tuple(labels), index))
        return index

    def _options(self, deadline: float) -> list[tuple[str, float, int, Any]]:
        options: list[tuple[str, float, int, Any]] = []
        parked = self._parked
        if parked:
            if len(parked) == 1:
                for task, label in parked.items():
                    options.append((label, 1.0, _TASK, task))
            else:
                for task, label in sorted(parked.items(), key=_by_label):
                    options.append((label, 1.0, _TASK, task))
        if self.net.in_flight:
            self.net.add_options(options)
        if not math.isinf(deadline):
            weight = self.faults.timer_weight if options else 1.0
            options.append((f"timer@{deadline:.3f}", weight, _TIMER, deadline))
        if self.crashes_left > 0 or self.crashed:
            for proc in self.processes.values():
                if proc.state is RUNNING and proc.crashable and self.crashes_left > 0:
                    options.append(
                        (f"crash:{proc.name}", self.faults.crash_weight, _CRASH, proc)
                    )
                elif proc.state is CRASHED:
                    options.append((f"restart:{proc.name}", 1.0, _RESTART, proc))
        return options

    def _perform(self, option: tuple[str, float, int, Any], clock: VirtualClock) -> None:
        self._releasing = True
        try:
            self._perform_option(option, clock)
        finally:
            self._releasing = False

    def _perform_option(self, option: tuple[str, float, int, Any], clock: VirtualClock) -> None:
        kind, target = option[2], option[3]
        if kind == _HELD:
            del self._held[target]
            trio_internals.release(target)
        elif kind == _TASK:
            del self._parked[target]
            ll.reschedule(target)
        elif kind == _TIMER:
            clock.now = target
        elif kind == _DELIVER:
            self.net.deliver(target)
        elif kind == _DROP:
            self.drops_left -= 1
            self.net.drop(target)
        elif kind == _DUP:
            self.dups_left -= 1
            self.net.duplicate(target)
        elif kind == _CRASH:
            self.crashes_left -= 1
            self._bury(target.crash())
        elif kind == _RESTART:
            assert self._nursery is not None
            target.restart(self._nursery)

    def _check_invariants(self) -> bool:
        """Run every invariant; on the first violation record it, stop, return True."""
        for name, check in self._invariants:
            result = check()
            if result is True:
                continue
            message = _violation_message(name, result)
            self._violate(name, message)
            return True
        return False

    def _violate(self, name: str, message: str) -> None:
        self.records.append(("violation", self.step, self.now, name, message))
        if name not in self.violated:
            self.violated.append(name)
        self._stop("violation")

    async def _keep(self) -> None:
        self._keeper = ll.current_task()
        await ll.wait_task_rescheduled(_abort_ok)

    def _stop(self, why: str) -> None:
        if self._stopping:
            return
        self._stopping = True
        self.ended = why
        nursery = self._nursery
        if nursery is not None:
            keeper = self._keeper
            if keeper is not None and nursery.child_tasks == {keeper}:
                self._keeper = None
                ll.reschedule(keeper)
            else:
                nursery.cancel_scope.cancel()
        # A cancellation does not reach a call parked inside a shielded scope:
        # end those calls too, or the run could never finish.
        self._releasing = True
        try:
            for task in list(self._parked):
                del self._parked[task]
                ll.reschedule(task, outcome.Error(RunStopped("the run has stopped")))
        finally:
            self._releasing = False
        self._end_preemption()

    def _bury(self, inc: Incarnation) -> None:
        """A crash: end every task of the dead incarnation, wherever it runs.

        The incarnation's scope is already cancelled; what that cannot reach is
        a call parked in a shielded scope and a task the process started in a
        nursery it does not own.  Their parked calls leave the enabled set now
        (they will never be performed), blocked tasks are interrupted with
        ``ProcessCrashed`` at once, and running ones whenever they next block.
        """
        parked = self._parked
        for task in list(inc.tasks):
            label = parked.pop(task, None)
            if label is not None:
                self.fault("refused", inc.name, label.partition("@")[2])
            if self._held.pop(task, None) is not None:
                trio_internals.release(task)  # runs into its cancelled scope
            self._doom(task)
            if trio_internals.is_blocked(task):
                trio_internals.interrupt(task, ProcessCrashed(f"process {inc.name} has crashed"))

    # -- hooks from trio's run loop (see dst.sim.run) -------------------------

    def before_io_wait(self) -> None:
        """One pass of trio's loop: count the passes since the last decision.

        Counting passes, not task steps, keeps the common path to one call per
        decision.  Past BUSY_PASSES a step watcher is installed to see which
        tasks keep running and to step in between two of their steps.
        """
        self._busy += 1
        if self._busy >= BUSY_PASSES and self._watch is None:
            self._watch = _StepWatch(self)
            self._watched = 0
            ll.add_instrument(self._watch)

    def watched_step(self, task: ll.Task) -> None:
        """A task step while the run is busy (see before_io_wait)."""
        self._watched += 1
        spins = self._spin_counts
        spins[task] = spins.get(task, 0) + 1
        self._spinning.add(self._task_labels.get(task) or _task_name(task))
        if self._watched < _WATCHED_STEPS:
            return
        try:
            self._busy_decision(task)
        except BaseException as exc:  # never into trio's loop: see on_quiescence
            self.error = exc
            self._stop("error")

    def _unwatch(self) -> None:
        if self._watch is not None:
            ll.remove_instrument(self._watch)
            self._watch = None
        self._busy = 0
        self._spinning.clear()
        self._spin_counts.clear()

    def doomed_step(self, task: ll.Task) -> None:
        """After a step of any task while some are doomed: interrupt one that blocked."""
        doomed = self._doomed
        if task in doomed and trio_internals.is_blocked(task):
            trio_internals.interrupt(task, ProcessCrashed("its process has crashed"))
        if not doomed and self._doom_watch is not None:
            ll.remove_instrument(self._doom_watch)
            self._doom_watch = None

    def _doom(self, task: ll.Task) -> None:
        self._doomed.add(task)
        if self._doom_watch is None:
            self._doom_watch = _DoomWatch(self)
            ll.add_instrument(self._doom_watch)

    def _busy_decision(self, task: ll.Task) -> None:
        """trio's run queue has not emptied for BUSY_STEPS task steps.

        Some code keeps trio busy without coming to rest (polling a flag with
        ``trio.sleep(0)``).  If anything else could happen (a parked call, a
        message, a timer, a fault), the strategy decides now, as at quiescence;
        otherwise nothing dst can do will ever change what the spinning tasks
        see, and that is the built-in violation ``Livelock``.
        """
        if self._stopping:
            # Still spinning after the run stopped: a loop in a shielded scope.
            # End the task that keeps stepping (never one waiting for its
            # children: trio cannot take an exception there).
            inc = task.context.get(_INCARNATION_VAR)
            if (self._spin_counts.get(task, 0) >= 8 and inc is not None
                    and inc.process.sim is self
                    and not any(n.child_tasks for n in task.child_nurseries)):
                trio_internals.throw_on_next_step(task, RunStopped("the run has stopped"))
                self._spin_counts.pop(task)
            return
        clock = self._clock
        assert clock is not None
        if self._invariants and self._check_invariants():
            return
        if self.step >= self.max_steps:
            self._stop("bound")
            return
        ahead = ll.current_statistics().seconds_to_next_deadline
        options = self._options(clock.now + ahead if not math.isinf(ahead) else _INF)
        if options:
            labels = [o[0] for o in options]
            weights = [o[1] for o in options] if any(o[1] != 1.0 for o in options) else None
            index = self._decide(labels, weights)  # resets the busy count
            if index >= 0:
                self._perform(options[index], clock)
            return
        spinning = ", ".join(sorted(self._spinning))
        self._violate(
            "Livelock",
            f"{spinning} kept running for {BUSY_PASSES} passes of trio's loop without the "
            "system coming to rest, and nothing else could happen",
        )

    # -- preemption at trio checkpoints ---------------------------------------

    def task_scheduled(self, task: ll.Task) -> None:
        """trio made ``task`` runnable while some task stepped: hold it at a choice point.

        Only wake-ups caused by the code under test are held (a checkpoint, an
        event set, a lock handed over, a new task); those the kernel causes by
        performing a decision, and those trio's loop causes (timers, I/O), are
        the decision itself.
        """
        if self._releasing or self._stopping:
            return
        inc = task.context.get(_INCARNATION_VAR)
        if inc is None or inc.state is not RUNNING or inc.process.sim is not self:
            return
        try:
            current = ll.current_task()
        except RuntimeError:
            return  # trio's loop itself (a timer expired): not inside a step
        if not trio_internals.hold(task):
            return
        self._held[task] = self._task_labels.get(task) or self._label_task(task, inc)
        if task is current:
            self._continuation = task

    def _schedule_held(self, deadline: float, clock: VirtualClock) -> float:
        """Some tasks are held at checkpoints: choose what runs next.

        Letting the task that just yielded go on is the ordinary choice (weight
        1.0); anything else preempts it, at ``preempt_weight`` times its usual
        weight, and spends one preemption.  With no such task (it blocked), the
        choice among the woken tasks and the rest is an ordinary one.
        """
        if self.step >= self.max_steps:
            self._stop("bound")
            return 0.0
        held = sorted(self._held.items(), key=_by_label)
        options: list[tuple[str, float, int, Any]] = [
            (f"{label}@run", 1.0, _HELD, task) for task, label in held
        ]
        options.extend(self._options(deadline))
        cont = self._continuation
        self._continuation = None
        if len(options) == 1:
            self._perform(options[0], clock)  # nothing else could go: not a choice
            return 0.0
        weights: list[float] | None = None
        if cont is not None and cont in self._held:
            pw = self.faults.preempt_weight
            weights = [1.0 if o[3] is cont else o[1] * pw for o in options]
        elif any(o[1] != 1.0 for o in options):
            weights = [o[1] for o in options]
        index = self._decide([o[0] for o in options], weights)
        if index < 0:
            return 0.0
        chosen = options[index]
        self._perform(chosen, clock)
        if cont is not None and chosen[3] is not cont and weights is not None:
            self.preemptions_left -= 1
            if self.preemptions_left <= 0:
                self._end_preemption()
        return 0.0

    def _end_preemption(self) -> None:
        """No preemption left (or the run stops): trio runs its queue as usual again."""
        if self._hold_watch is not None:
            ll.remove_instrument(self._hold_watch)
            self._hold_watch = None
        if self._held:
            for task, _ in sorted(self._held.items(), key=_by_label):
                trio_internals.release(task)
            self._held.clear()
        self._continuation = None

    def _end_quiescent(self) -> None:
        """Nothing is enabled: the run ends, unless tasks are stuck for ever.

        A task still blocked now waits on something nothing left can do: a
        ``Deadlock``, unless it waits for a message (``env.net.recv``: the world
        may still write), or its process has a task waiting for one (the next
        message may wake the rest), or its process was declared ``idle``.  Tasks
        that wait for each other's locks in a cycle are a ``Deadlock`` always.
        """
        stuck: list[str] = []
        blocked = self._blocked_tasks()
        # A process with a task waiting in recv is a server: the next message may
        # wake any of its tasks (a dispatcher sets an event), so only a lock cycle
        # there is certainly stuck.
        listening = {inc for task, inc in blocked if _waits_for_mail(task, inc)}
        for task, inc in blocked:
            if inc.process.idle or inc in listening or _waits_for_mail(task, inc):
                if not in_lock_cycle(task):
                    continue
            label = self._task_labels.get(task) or f"{inc.name}/{_task_name(task)}"
            stuck.append(f"{label} waits in {describe_wait(task)}")
        if stuck:
            self._violate(
                "Deadlock",
                "nothing left can wake " + "; ".join(sorted(stuck)),
            )
            return
        self._stop("quiescent")

    def _blocked_tasks(self) -> list[tuple[ll.Task, Incarnation]]:
        """Leaf tasks of live incarnations (not waiting for their own children)."""
        out: list[tuple[ll.Task, Incarnation]] = []
        for proc in self.processes.values():
            inc = proc.live
            if inc.state is not RUNNING:
                continue
            for task in inc.tasks:
                if any(n.child_tasks for n in task.child_nurseries):
                    continue
                if trio_internals.is_blocked(task):
                    out.append((task, inc))
        return out

    def trapped(self, message: str) -> None:
        """A guard trap fired: the run is void, whatever the code under test does next.

        Recorded as the built-in violation ``Nondeterminism`` and the run stopped
        at once, so that ``except Exception`` around the offending call cannot
        turn the run back into a pass.
        """
        if "Nondeterminism" not in self.violated:
            self._violate("Nondeterminism", message)

    def uncaught(self, proc: Process, exc: BaseException) -> None:
        """A process raised: that is a finding, not a dst failure.

        The violation names the exception and where the user's code raised it;
        the record carries the user's frames (``file:line in func``) for
        ``dst show --verbose``.
        """
        leaf = exc
        while isinstance(leaf, BaseExceptionGroup):
            leaf = leaf.exceptions[0]
        frames = user_frames(leaf.__traceback__)
        where = f" at {frames[-1]}" if frames else ""
        message = f"{proc.name} raised {type(leaf).__name__}: {leaf}{where}"
        if isinstance(leaf, ProcessCrashed):
            message += (" (a task started by a crashed process died with it inside this "
                        "process's nursery; processes should not share nurseries)")
        self.records.append(("violation", self.step, self.now, "NoUncaughtError", message, frames))
        if "NoUncaughtError" not in self.violated:
            self.violated.append("NoUncaughtError")
        self._stop("violation")

    # -- running --------------------------------------------------------------

    async def run(self, clock: VirtualClock, setup: Callable[[Sim], None]) -> None:
        """Run to the end inside an already running ``trio.run`` driven by ``clock``."""
        self._clock = clock
        clock.reset()
        ACTIVE.append(self)
        clock.on_quiescence = self.on_quiescence
        if self.preemptions_left > 0:
            self._hold_watch = _HoldWatch(self)
            ll.add_instrument(self._hold_watch)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                # Holds the run open when every process has exited or crashed, so
                # that the scheduler still gets to offer "restart P"; the run ends
                # when the scheduler finds nothing left to choose.
                nursery.start_soon(self._keep, name="dst-keeper")
                setup(self)
            if self.error is not None:
                raise self.error
            if self.ended is None:
                self.ended = "quiescent"
            if self.ended == "quiescent":
                self._stopping = False
                if not self._check_invariants():
                    self._run_end_checks()
        finally:
            clock.on_quiescence = None
            ACTIVE.pop()
            self._parked.clear()
            self._task_labels.clear()
            self._label_owner.clear()
            self._incarnation_of.clear()
            self._doomed.clear()
            self._unwatch()
            self._end_preemption()
            if self._doom_watch is not None:
                ll.remove_instrument(self._doom_watch)
                self._doom_watch = None
            self._nursery = None
            # Drop the back references, so that refcounting frees the run.
            for proc in self.processes.values():
                proc.release()
            self.net.sim = None  # type: ignore[assignment]

    def _run_end_checks(self) -> None:
        for name, check in self._end_checks:
            result = check()
            ok = result is True
            message = "" if ok else _violation_message(name, result)
            self.records.append(("check", self.step, self.now, name, ok, message))
            if not ok:
                self.records.append(("violation", self.step, self.now, name, message))
                if name not in self.violated:
                    self.violated.append(name)

    @property
    def verdict(self) -> str:
        return "fail" if self.violated else "pass"


class _StepWatch(Instrument):
    """Installed only while a run is busy: sees each task step (see before_io_wait)."""

    def __init__(self, sim: Sim) -> None:
        self.before_task_step = sim.watched_step  # type: ignore[method-assign]


class _HoldWatch(Instrument):
    """Installed while preemptions are left: sees every task trio makes runnable."""

    def __init__(self, sim: Sim) -> None:
        self.task_scheduled = sim.task_scheduled  # type: ignore[method-assign]


class _DoomWatch(Instrument):
    """Installed only while tasks of a dead incarnation live: catches them blocking."""

    def __init__(self, sim: Sim) -> None:
        self.after_task_step = sim.doomed_step  # type: ignore[method-assign]


def _abort_ok(_: object) -> ll.Abort:
    return ll.Abort.SUCCEEDED


async def _stopped() -> None:
    raise RunStopped("the run has stopped")


def _task_name(task: ll.Task) -> str:
    """A task's readable, stable name: its function's, never a memory address.

    trio names a task after its function, or after ``repr`` of a callable
    object, which holds an address that differs between runs (and would sort
    the enabled options differently).
    """
    name = task.name
    if " at 0x" in name or name.startswith("<"):
        qual = getattr(task.coro, "__qualname__", "") or "task"
        name = qual[: -len(".__call__")] if qual.endswith(".__call__") else qual
    return name.rsplit(".", 1)[-1]


def _waits_for_mail(task: ll.Task, inc: Incarnation) -> bool:
    """Blocked in ``env.net.recv()``: waiting on the world, which is idle, not stuck."""
    return inc.mail_lot.statistics().tasks_waiting > 0 and describe_wait(task).startswith(
        "dst.sim.env.SimTransport.recv"
    )


def _by_label(item: tuple[ll.Task, str]) -> str:
    return item[1]


def _violation_message(name: str, result: object) -> str:
    if result is False:
        return f"{name} does not hold"
    if isinstance(result, str):
        return result
    raise TypeError(
        f"invariant {name} returned {result!r}; return True when it holds, "
        "False or a message when it is violated"
    )


_IMMUTABLE = (int, str, float, bool, type(None))


def canonical_fields(fields: dict[str, Any]) -> Any:
    """Snapshot an event's fields now, so a later mutation cannot leak into the trace.

    Scalar-only fields (the common case) are kept as a dict, which is cheap;
    anything else is frozen as canonical JSON text.
    """
    for v in fields.values():
        if type(v) not in _IMMUTABLE:
            break
    else:
        return fields
    return json.dumps(
        fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr
    )
