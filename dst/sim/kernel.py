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
from .faults import NO_FAULTS, SERVICE_FAULTS, FaultPlan
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
_TASK, _TIMER, _DELIVER, _DROP, _DUP, _CRASH, _RESTART, _HELD, _CALL_FAULT, _PARTITION = range(10)

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
        #: Targeted faults (see FaultPlan): budgets left per process, per link,
        #: per service and fault kind; which services suffer which faults; the
        #: service a parked task is calling and the fault chosen for its call.
        self._process_crashes = dict(faults.process_crashes)
        self._link_drops = dict(faults.link_drops)
        self._link_dups = dict(faults.link_dups)
        self.partitions_left = faults.max_partitions
        #: The process cut off from the others now, if any.
        self.cut_off: str | None = None
        self._service_faults: dict[str, dict[str, int]] = {
            name: {k: sf.budget(k) for k in SERVICE_FAULTS if sf.budget(k) > 0}
            for name, sf in faults.services.items()
        }
        self._suffers: dict[str, tuple[str, ...]] = {}
        self._calling: dict[ll.Task, str] = {}
        self._call_fault: dict[ll.Task, str] = {}
        #: Faults other than crashes and message faults may still be offered.
        self._more_faults = False
        self._recount_faults()
        #: ``eventually`` properties: (name, check, within), those not yet seen to
        #: hold since the faults stopped, and when they stopped (None: not yet).
        self._eventually: list[tuple[str, Invariant, float]] = []
        self._pending: list[tuple[str, Invariant, float]] = []
        self.calm_at: float | None = None
        self._calm_timer_set = False
        #: Deadlines of the kernel's own watches (faults stop, a liveness
        #: deadline): offered only when nothing else can happen, so that they
        #: never cut the system's work short the way a premature timeout would.
        self._passive: set[float] = set()
        self._deadline_task: trio.CancelScope | None = None
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

    def service(
        self, name: str, handler: Callable[[str, Any], Any], *,
        suffers: Sequence[str] = SERVICE_FAULTS,
    ) -> None:
        """Register a fake outside service: ``handler(op, request) -> reply``.

        ``suffers`` names the faults (of ``SERVICE_FAULTS``) this service can have
        in the world it stands for; the fault plan's budgets (``FaultPlan(
        services={name: ServiceFaults(...)})``) decide how many a run injects.
        """
        unknown = [k for k in suffers if k not in SERVICE_FAULTS]
        if unknown:
            raise ValueError(
                f"service {name!r} cannot suffer {', '.join(unknown)}; "
                f"the service faults are {', '.join(SERVICE_FAULTS)}"
            )
        self.services[name] = handler
        self._suffers[name] = tuple(suffers)
        budgets = self._service_faults.get(name)
        if budgets:
            for kind in list(budgets):
                if kind not in suffers:
                    del budgets[kind]
            self._recount_faults()

    def invariant(self, name: str, check: Invariant) -> None:
        """``check()`` runs after every step: ``True`` holds; ``False`` or a message breaks it."""
        self._invariants.append((name, check))

    def at_end(self, name: str, check: Invariant) -> None:
        """``check()`` runs once when the run reaches quiescence."""
        self._end_checks.append((name, check))

    def eventually(self, name: str, check: Invariant, within: float) -> None:
        """``check()`` must hold within ``within`` virtual seconds after the faults stop.

        Faults stop when every fault budget is spent, or at the plan's
        ``faults_until``, whichever comes first (at 0 for a plan without
        faults).  From then on the property is checked after every step; it
        is met the first time it holds.  If ``within`` seconds pass, or the
        system comes to rest, before it has held, the run fails with the
        property's message and how long it waited.  Once every such property
        has held, the run ends there (``ended: held``): a system that never
        rests does not have to run to its step bound.
        """
        if within <= 0:
            raise ValueError(f"eventually({name!r}) needs within > 0 seconds, not {within!r}")
        self._eventually.append((name, check, float(within)))

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
            if self.divergence is None:
                self.divergence = exc
            self._stop("diverged")
            raise RunStopped("the run diverged from its trace") from None
        except BaseException as exc:
            # The strategy itself failed (or a driver such as Hypothesis stopped
            # the run): never let it pass through the code under test, which
            # would report it as its own error.
            if self.error is None:
                self.error = exc
            self._stop("error")
            raise RunStopped("the strategy stopped the run") from None
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

    async def call_service(self, proc: Incarnation, service: str, op: str) -> str | None:
        """Park at a service call; the fault the strategy chose for it, if any."""
        task = ll.current_task()
        self._calling[task] = service
        try:
            await self.enter(proc, f"call:{service}.{op}")
        finally:
            self._calling.pop(task, None)
        return self._call_fault.pop(task, None) if self._call_fault else None

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
        # Everything the hook wakes is the decision itself, never a new choice point.
        self._releasing = True
        try:
            return self._schedule(deadline)
        except BaseException as exc:
            self.error = exc
            self._stop("error")
            return 0.0
        finally:
            self._releasing = False

    def _schedule(self, deadline: float) -> float:
        clock = self._clock
        assert clock is not None
        # The busy count is reset by decisions only: a held task released because
        # nothing else could go (no decision) is still the system keeping busy.
        if self._stopping:
            return 0.0
        now = clock.now
        if deadline <= now:
            return 0.0  # trio expires it in this very pass; nothing to choose
        if (self._invariants or self._pending) and self._check_invariants():
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
            and not self._more_faults
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

    def _recount_faults(self) -> None:
        """Whether a partition or a service fault may still be offered (the lean path's test)."""
        self._more_faults = bool(self.partitions_left or any(
            any(budgets.values()) for budgets in self._service_faults.values()))

    def faults_allowed(self) -> bool:
        """False once the plan's ``faults_until`` has passed: no new fault from then on."""
        until = self.faults.faults_until
        return until is None or self.now < until

    def _options(self, deadline: float) -> list[tuple[str, float, int, Any]]:
        options: list[tuple[str, float, int, Any]] = []
        parked = self._parked
        faulty = self.faults_allowed()
        if parked:
            items = list(parked.items()) if len(parked) == 1 else sorted(
                parked.items(), key=_by_label)
            calling = self._calling if (self._service_faults and faulty) else None
            for task, label in items:
                options.append((label, 1.0, _TASK, task))
                if calling and task in calling:
                    self._add_call_faults(options, task, label, calling[task])
        if self.net.in_flight:
            self.net.add_options(options, faulty)
        timer_at = len(options)
        if not math.isinf(deadline):
            weight = self.faults.timer_weight if options else 1.0
            options.append((f"timer@{deadline:.3f}", weight, _TIMER, deadline))
        if self.crashes_left > 0 or self.crashed:
            for proc in self.processes.values():
                if proc.state is RUNNING:
                    if faulty and self.crashes_left > 0 and self._may_crash(proc):
                        options.append(
                            (f"crash:{proc.name}", self.faults.crash_weight, _CRASH, proc)
                        )
                elif proc.state is CRASHED:
                    options.append((f"restart:{proc.name}", 1.0, _RESTART, proc))
        if self.partitions_left > 0 and self.cut_off is None and faulty:
            only = self.faults.partition_of
            for proc in self.processes.values():
                if proc.state is RUNNING and (not only or proc.name in only):
                    options.append((f"partition:{proc.name}", self.faults.partition_weight,
                                    _PARTITION, proc))
        if deadline in self._passive and len(options) > 1:
            del options[timer_at]  # a kernel watch: only when nothing else can happen
        return options

    def _add_call_faults(self, options: list[tuple[str, float, int, Any]], task: ll.Task,
                         label: str, service: str) -> None:
        budgets = self._service_faults.get(service)
        if not budgets:
            return
        weight = self.faults.services[service].weight
        for kind in SERVICE_FAULTS:
            if budgets.get(kind, 0) > 0:
                options.append((f"{label}!{kind}", weight, _CALL_FAULT, (task, kind)))

    def _may_crash(self, proc: Process) -> bool:
        """Whether the plan lets ``proc`` crash now (crashable, budgets, crash points)."""
        if not proc.crashable:
            return False
        plan = self.faults
        if plan.crash_only and proc.name not in plan.crash_only:
            return False
        if proc.name in self._process_crashes and self._process_crashes[proc.name] <= 0:
            return False
        if plan.crash_at:
            inc = proc.live
            return any(_op_kind(label) in plan.crash_at
                       for task, label in self._parked.items() if task in inc.tasks)
        return True

    def link_budget(self, source: str, dest: str, drops: bool) -> bool:
        """Whether the plan lets a message on ``source->dest`` be dropped (or duplicated)."""
        budgets = self._link_drops if drops else self._link_dups
        link = f"{source}->{dest}"
        if link in budgets:
            return budgets[link] > 0
        return not self.faults.links_only

    def spend_link(self, source: str, dest: str, drops: bool) -> None:
        budgets = self._link_drops if drops else self._link_dups
        link = f"{source}->{dest}"
        if link in budgets:
            budgets[link] -= 1

    def _perform(self, option: tuple[str, float, int, Any], clock: VirtualClock) -> None:
        releasing, self._releasing = self._releasing, True
        try:
            self._perform_option(option, clock)
        finally:
            self._releasing = releasing
        if self.calm_at is None and self._eventually:
            self._note_calm()

    # -- partitions -------------------------------------------------------------

    def _partition(self, proc: Process) -> None:
        """Cut ``proc`` off from every other process until the cut heals."""
        heal_at = self.now + self.faults.partition_seconds
        self.cut_off = proc.name
        self.fault("partition", proc.name, f"until {heal_at:.3f}")
        self.net.cut(proc.name)
        assert self._nursery is not None
        self._nursery.start_soon(self._heal, heal_at, name="dst-heal")

    async def _heal(self, heal_at: float) -> None:
        await trio.sleep_until(heal_at)
        if self.cut_off is not None:
            self.fault("heal", self.cut_off)
            self.cut_off = None

    # -- eventually -------------------------------------------------------------

    def _faults_left(self) -> bool:
        if not self.faults_allowed():
            return False
        return bool(self.crashes_left > 0 or self.drops_left > 0 or self.dups_left > 0
                    or self._more_faults)

    def _note_calm(self) -> None:
        """Faults have stopped: start the clock of every ``eventually`` property."""
        if self._faults_left():
            until = self.faults.faults_until
            if until is None or self._nursery is None or self._calm_timer_set:
                return
            # Faults stop at ``until`` at the latest: wake then to start the clock.
            self._calm_timer_set = True
            self._nursery.start_soon(self._calm_later, until, name="dst-calm")
            return
        self.calm_at = self.now
        self._pending = list(self._eventually)
        longest = max(within for _, _, within in self._eventually)
        assert self._nursery is not None
        self._deadline_task = trio.CancelScope()
        self._nursery.start_soon(self._liveness_deadline, self.calm_at + longest,
                                 name="dst-deadline")

    async def _calm_later(self, until: float) -> None:
        self._passive.add(until)
        await trio.sleep_until(until)
        if self.calm_at is None:
            self._note_calm()

    async def _liveness_deadline(self, last: float) -> None:
        """Wake at each pending property's deadline; one not met by then is violated."""
        assert self._deadline_task is not None
        with self._deadline_task:
            await self._watch_deadlines()

    async def _watch_deadlines(self) -> None:
        while self._pending and not self._stopping:
            calm = self.calm_at
            assert calm is not None
            due = min(calm + within for _, _, within in self._pending)
            if due > self.now:
                self._passive.add(due)
                await trio.sleep_until(due)
            if self._stopping:
                return
            if self._check_eventually():
                return
            for name, _, within in self._pending:
                if calm + within <= self.now:
                    self._violate(name, f"{name} did not hold within {within:g}s after the "
                                        f"faults stopped (at {calm:.3f}; waited until "
                                        f"{self.now:.3f})")
                    return

    def _check_eventually(self) -> bool:
        """Drop the pending properties that hold now.

        When none is left, a scenario without end-of-run checks ends the run
        here (``held``): a system that never rests need not run to its step
        bound.  Otherwise the run goes on to rest, where those checks run.
        """
        still = [(n, c, w) for n, c, w in self._pending if c() is not True]
        self._pending = still
        if not still:
            if not self._end_checks:
                self._stop("held")
                return True
            if self._deadline_task is not None:
                self._deadline_task.cancel()
        return False

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
            self.spend_link(target.source, target.dest, drops=True)
            self.net.drop(target)
        elif kind == _DUP:
            self.dups_left -= 1
            self.spend_link(target.source, target.dest, drops=False)
            self.net.duplicate(target)
        elif kind == _CRASH:
            self.crashes_left -= 1
            if target.name in self._process_crashes:
                self._process_crashes[target.name] -= 1
            self._bury(target.crash())
        elif kind == _CALL_FAULT:
            task, fault = target
            service = self._calling[task]
            self._service_faults[service][fault] -= 1
            self._recount_faults()
            self._call_fault[task] = fault
            del self._parked[task]
            ll.reschedule(task)
        elif kind == _PARTITION:
            self.partitions_left -= 1
            self._recount_faults()
            self._partition(target)
        elif kind == _RESTART:
            assert self._nursery is not None
            target.restart(self._nursery)

    def _check_invariants(self) -> bool:
        """Run every invariant; on the first violation record it, stop, return True.

        Pending ``eventually`` properties are looked at here too: the run ends
        (True) once every one of them has held.
        """
        for name, check in self._invariants:
            result = check()
            if result is True:
                continue
            message = _violation_message(name, result)
            self._violate(name, message)
            return True
        if self._pending:
            return self._check_eventually()
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
        releasing, self._releasing = self._releasing, True
        try:
            for task in list(self._parked):
                del self._parked[task]
                ll.reschedule(task, outcome.Error(RunStopped("the run has stopped")))
        finally:
            self._releasing = releasing
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
        if (self._invariants or self._pending) and self._check_invariants():
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
        if deadline in self._passive:  # a kernel watch waits while tasks can run
            options = [o for o in options if not (o[2] == _TIMER and o[3] == deadline)]
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
        if self._eventually and self.calm_at is None:
            # Nothing is left to happen, faults included: they have stopped.
            self.calm_at = self.now
            self._pending = list(self._eventually)
        if self._pending and not self._check_eventually():
            name, _, within = self._pending[0]
            self._violate(name, f"{name} did not hold, and the system came to rest at "
                                f"{self.now:.3f}, {self.now - (self.calm_at or 0.0):g}s after "
                                f"the faults stopped (within {within:g}s)")
            return
        if self._stopping:
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
                if not trio_internals.is_blocked(task):
                    continue
                # A task with live children usually waits for them (a nursery's
                # end), which is not a wait of its own; but the body of a nursery
                # may itself wait in recv, and then the process is listening.
                if any(n.child_tasks for n in task.child_nurseries) and not _waits_for_mail(
                        task, inc):
                    continue
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
                if self._eventually:
                    self._note_calm()
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


def _op_kind(label: str) -> str:
    """``p/t@db.put(k)`` -> ``put``; ``p@send(q)`` -> ``send``; ``p@call:svc.op`` -> ``call``."""
    op = label.partition("@")[2]
    if op.startswith("call:"):
        return "call"
    head = op.partition("(")[0]
    return head.rpartition(".")[2]


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
