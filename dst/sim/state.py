"""The state of one simulated run, shared by the parts of the kernel.

:class:`~dst.sim.kernel.Sim` is assembled from a few parts, each in its own
module (the scheduler in ``kernel``, fault injection, preemption, busy runs,
liveness).  They share this state; each part subclasses :class:`SimState` so
that every attribute is declared, with its meaning, in one place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import trio
import trio.lowlevel as ll

from ..errors import DivergenceError
from .clock import VirtualClock
from .faults import NO_FAULTS, SERVICE_FAULTS, FaultPlan
from .net import Network
from .options import Option
from .process import Incarnation, Process
from .store import SimStore
from .strategy import Strategy

if TYPE_CHECKING:
    from ..coverage import RunCoverage
    from ..env import Env
    from .aio import SimLoop
    from .busy import _DoomWatch, _StepWatch
    from .kernel import Sim
    from .outside import CodeOwners
    from .preemption import HoldWatch
    from .sockets.network import SocketNetwork

#: Steps after which a run stops with verdict "pass (bounded)".  Large enough
#: for every shipped scenario to reach quiescence; small enough that a livelock
#: (a timer that re-arms forever) costs milliseconds, not a hung worker.
DEFAULT_MAX_STEPS = 5000

Invariant = Callable[[], object]


class SimState:
    """Everything one run knows; the methods live in the parts that use them."""

    #: Every attribute of a run, in a slot: set once per seed and read at every
    #: decision, a slot is cheaper both ways than an instance dict with this many
    #: keys (past 30, CPython stops sharing keys and grows a dict per run).  The
    #: parts' own class-level defaults, and attributes set later, go in ``__dict__``.
    __slots__ = (
        "__dict__", "__weakref__", "_busy", "_call_fault", "_calling", "_calm_timer_set", "_clock",
        "_coverage", "_deadline_task", "_doom_watch", "_doomed", "_end_checks", "_envs",
        "_eventually", "_faults_end", "_held", "_hold_watch", "_incarnation_of", "_invariants",
        "_keeper", "_label_owner", "_link_drops", "_link_dups", "_more_faults", "_nursery",
        "_parked", "_pending", "_process_crashes", "_releasing", "_said", "_seed",
        "_service_faults", "_slow_timers", "_spin_counts", "_spinning", "_starting", "_stopping",
        "_suffers",
        "_task_labels", "_waiting", "_watch", "_watched", "_watches", "calm_at", "crashed",
        "crashes_left", "cut_off", "divergence", "drops_left", "dups_left", "ended", "error",
        "faults", "max_steps", "net", "partitions_left", "preemptions_left", "processes", "records",
        "services", "slow_left", "step", "stores", "strategy", "violated",
    )

    #: The run's simulated TCP network (``dst.sim.sockets``), made when a process
    #: first opens a socket or resolves a name: most runs never do.
    _sockets: SocketNetwork | None = None

    #: Which code is the user's (its reads of the real world are refused) and which a
    #: library's (they get the simulation's values): the scenario's declaration, set
    #: by ``Scenario.build``; None: ``dst.sim.outside.DEFAULT_OWNERS``.
    code_owners: CodeOwners | None = None
    #: The generators and per-process values libraries' reads draw from
    #: (``dst.sim.outside``), made on the first such read: most runs make none.
    _outside: dict[Any, Any] | None = None

    #: The event loops of the run's asyncio processes by their driver task (made by
    #: the first: ``dst.sim.aio``); a held driver stands for its ready callbacks.
    _loops: dict[ll.Task, SimLoop] | None = None

    #: Whether anything asked the run for its seed (``seed``).  A run that never did
    #: drew nothing from it but through its strategy and its seeded generators
    #: (``dst.sim.seeding.first_draws`` counts those): its story is then a function
    #: of its decisions alone, which ``dst.runner.paths`` relies on.
    seed_read = False

    @property
    def seed(self) -> int:
        """The run's seed.  Reading it (a setup that seeds a generator of its own
        from it, say) marks the run as one whose story may depend on it."""
        self.seed_read = True
        return self._seed

    def __init__(
        self,
        seed: int,
        strategy: Strategy,
        *,
        faults: FaultPlan = NO_FAULTS,
        max_steps: int = DEFAULT_MAX_STEPS,
    ) -> None:
        self._seed = seed
        self.strategy = strategy
        self.faults = faults
        self.max_steps = max_steps
        #: Decisions taken so far; records are stamped with it.
        self.step = 0
        #: Trace records as tuples; rendered to JSON only when asked.
        self.records: list[tuple[Any, ...]] = []
        self.processes: dict[str, Process] = {}
        #: Every ``Env`` made in this run, severed from it at its end (``Sim.run``).
        self._envs: list[Env] = []
        self.stores: dict[str, SimStore] = {}
        self.services: dict[str, Callable[[str, Any], Any]] = {}
        self.net = Network(cast("Sim", self))
        self.violated: list[str] = []
        self.divergence: DivergenceError | None = None
        #: Why the run ended: "quiescent", "bound", "violation", "diverged".
        self.ended: str | None = None
        self.crashes_left = faults.max_crashes
        #: Names of processes that are crashed now (restart is then an option).
        self.crashed: set[str] = set()
        self.drops_left = faults.max_drops
        self.dups_left = faults.max_dups
        #: "Slow" faults left: a timer firing while other work could run.  With
        #: ``max_slow=None`` (``_slow_timers``) every timer may, unbudgeted, as
        #: plans did before the budget existed.
        self.slow_left = faults.max_slow or 0
        self._slow_timers = faults.max_slow is None
        #: An error raised by a check or the strategy inside trio's loop.
        self.error: BaseException | None = None
        self._invariants: list[tuple[str, Invariant]] = []
        self._end_checks: list[tuple[str, Invariant]] = []
        self._parked: dict[ll.Task, str] = {}
        #: Each task's parking message (``trio_internals.waiting``), made on its first
        #: choice point and yielded again at every later one.
        self._waiting: dict[ll.Task, Any] = {}
        self._task_labels: dict[ll.Task, str] = {}
        self._label_owner: dict[str, ll.Task] = {}
        self._clock: VirtualClock | None = None
        self._nursery: trio.Nursery | None = None
        self._stopping = False
        #: The task running the seed while it holds the run open (``Sim._keep``).
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
        #: taken out of trio's run queue, in the order trio queued them (running
        #: anything but the first preempts it), and the instrument that holds them.
        self.preemptions_left = faults.preemptions
        self._held: dict[ll.Task, str] = {}
        self._hold_watch: HoldWatch | None = None
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
        } if faults.services else {}
        self._suffers: dict[str, tuple[str, ...]] = {}
        self._calling: dict[ll.Task, str] = {}
        self._call_fault: dict[ll.Task, str] = {}
        #: Faults other than crashes and message faults may still be offered
        #: (``_recount_faults``, inlined: every budget kept above is positive).
        self._more_faults = bool(self.partitions_left) or any(self._service_faults.values()) \
            or bool(faults.max_resets or faults.max_segment_delays)
        #: ``eventually`` properties: (name, check, within), those not yet seen to
        #: hold since the faults stopped, and when they stopped (None: not yet).
        self._eventually: list[tuple[str, Invariant, float]] = []
        self._pending: list[tuple[str, Invariant, float]] = []
        self.calm_at: float | None = None
        self._calm_timer_set = False
        #: What each pending property's check last said when it did not hold (its
        #: message, for the violation), by name.
        self._said: dict[str, str] = {}
        #: No new fault from this virtual time on (None: while budgets last): the
        #: plan's ``faults_until``, then, in a run with ``eventually`` properties,
        #: its ``calm_by`` too, and the time the faults stopped once they have.
        self._faults_end: float | None = faults.faults_until
        #: The kernel's own watches (faults stop, a liveness deadline): each task
        #: parked until a virtual time, off trio's deadlines.  A watch is *passive*:
        #: woken only once nothing else can happen before its time or at it (the
        #: system's own timers due then included), so it never cuts the system's
        #: work short the way a premature timeout would, and it never keeps a system
        #: that has come to rest from being seen at rest.
        self._watches: dict[ll.Task, float] = {}
        self._deadline_task: trio.CancelScope | None = None
        #: Tasks of dead incarnations still alive: each is interrupted with
        #: ProcessCrashed whenever it blocks (see ``_bury``).
        self._doomed: set[ll.Task] = set()
        #: Each task's incarnation, for the tasks of processes: the incarnation of
        #: the task that started it, never read from its contextvars context
        #: (``Sim.task_spawned``).
        self._incarnation_of: dict[ll.Task, Incarnation] = {}
        #: True while ``Process.start`` starts a main task (it owns itself).
        self._starting = False
        #: What the run reached (``dst.coverage``), made by its first probe or fingerprint.
        self._coverage: RunCoverage | None = None


    if TYPE_CHECKING:
        # Provided by the parts (see the module docstring); declared here so
        # that each part may call the others.
        @property
        def now(self) -> float: ...
        def fault(self, what: str, target: str, detail: str = "") -> None: ...
        def _decide(self, labels: list[str], weights: list[float] | None) -> int: ...
        def _next_step(self) -> int: ...
        def _perform(self, option: Option, clock: VirtualClock) -> None: ...
        def _options(self, deadline: float) -> list[Option]: ...
        def _soonest(self, deadline: float) -> float: ...
        def _check_invariants(self) -> bool: ...
        def _violate(self, name: str, message: str) -> None: ...
        def _stop(self, why: str) -> None: ...
        def _label_task(self, task: ll.Task, inc: Incarnation) -> str: ...
        def faults_allowed(self) -> bool: ...
        def _recount_faults(self) -> None: ...
        def _check_eventually(self) -> bool: ...
        def _unwatch(self) -> None: ...
        def _schedule_held(self, deadline: float, clock: VirtualClock) -> float: ...
        def _end_quiescent(self) -> None: ...
        def _note_calm(self) -> None: ...
        def _wake_watches(self, now: float) -> None: ...
        async def _watch_until(self, at: float) -> None: ...
        def spend_link(self, source: str, dest: str, drops: bool) -> None: ...
        def _bury(self, inc: Incarnation) -> None: ...
        def _partition(self, proc: Process) -> None: ...
