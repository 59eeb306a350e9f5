"""Fault plans: how often, and how many times, the world misbehaves in one run.

A plan is a frozen, printable value.  Each fault is offered to the strategy as
one more enabled option with a weight relative to the ordinary options (weight
1.0: resume a task, deliver a message, fire a timer), and only while its budget
lasts, so a run with ``max_crashes=1`` explores "crash here" at every step but
never crashes twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

#: What can go wrong with one call to an outside service, each a recorded choice:
#: ``fail``: it fails before the effect (the caller gets ``ServiceUnavailable``);
#: ``lose_reply``: the effect happens and the reply is lost (``ServiceUnavailable``);
#: ``delay``: the effect happens and the reply comes ``delay`` virtual seconds late
#: (so a caller's timeout can win the race); ``repeat``: the request is executed
#: twice (a transport retry reaching a service that does not deduplicate).
SERVICE_FAULTS = ("fail", "lose_reply", "delay", "repeat")


@dataclass(frozen=True)
class ServiceFaults:
    """Budgets per run for one service's faults (see ``SERVICE_FAULTS``)."""

    fail: int = 0
    lose_reply: int = 0
    delay: int = 0
    repeat: int = 0
    #: Virtual seconds a delayed reply takes.
    delay_seconds: float = 30.0
    #: Weight of each fault against 1.0 for the call going through as asked.
    weight: float = 0.2

    def budget(self, kind: str) -> int:
        return int(getattr(self, kind))


@dataclass(frozen=True)
class FaultPlan:
    #: Hard crashes of crashable processes per run.
    max_crashes: int = 0
    #: Weight of "crash P" against 1.0 for an ordinary option.  Small, because
    #: it is offered at every step: 0.05 over ~40 steps crashes about one run in
    #: two when the budget allows.
    crash_weight: float = 0.05
    #: Messages dropped per run.
    max_drops: int = 0
    drop_weight: float = 0.2
    #: Messages duplicated per run.
    max_dups: int = 0
    dup_weight: float = 0.2
    #: With ``max_slow=None`` only (unbudgeted timers): the weight of "fire the
    #: next timer" while a task or a message could go first (alone, a timer
    #: always has weight 1.0).  A budgeted plan weighs that by ``slow_weight``.
    timer_weight: float = 1.0
    #: "Slow" faults per run: the next timer fires while other work could still
    #: run (a task at a choice point or held at a checkpoint, a message to
    #: deliver), as if that work had taken longer than the timeout.  With none
    #: left (the default: 0) a timer is offered only when nothing else can run,
    #: so a 60 s timeout never fires before a reply that needs no virtual time.
    #: None: unbudgeted, every timer may fire before runnable work at
    #: ``timer_weight`` (how every plan behaved before this field; a trace
    #: header without ``max_slow`` means this, so older traces replay as
    #: recorded).
    max_slow: int | None = 0
    #: Weight of "the next timer fires now" beside runnable work, while the
    #: slow budget lasts (against 1.0 for an ordinary option).
    slow_weight: float = 0.2
    #: Preemptions at trio checkpoints per run.  While any are left, every task
    #: of the system that trio would run next (after ``trio.sleep(0)``, a lock,
    #: an event, a channel operation, a new task, a cancellation) is held at a
    #: choice point instead, and running anything but the task trio queued
    #: first spends one.  0 makes checkpoints ordinary again: only ``Env``
    #: calls, messages, timers and faults are choices.
    preemptions: int = 2
    #: Weight of each preempting option, relative to its usual weight, against
    #: 1.0 for running the held task trio queued first.
    preempt_weight: float = 0.2
    #: Faults per outside service (see ServiceFaults), by service name.
    services: Mapping[str, ServiceFaults] = field(default_factory=dict, hash=False)
    #: Crash budgets per process (each also counts against ``max_crashes``);
    #: a process not named here may crash while ``max_crashes`` lasts, unless
    #: ``crash_only`` names the processes that may.
    process_crashes: Mapping[str, int] = field(default_factory=dict, hash=False)
    crash_only: tuple[str, ...] = ()
    #: Crash a process only while one of its tasks is parked at one of these
    #: operations (``get``, ``put``, ``cas``, ``delete``, ``scan``, ``send``,
    #: ``call``): "crash just before a store write".  Empty: at any step.
    crash_at: tuple[str, ...] = ()
    #: Drop and duplicate budgets per link ``"source->dest"`` (each also counts
    #: against ``max_drops``/``max_dups``); with ``links_only`` only the links
    #: named may lose or duplicate messages.
    link_drops: Mapping[str, int] = field(default_factory=dict, hash=False)
    link_dups: Mapping[str, int] = field(default_factory=dict, hash=False)
    links_only: bool = False
    #: Network partitions per run: one process is cut off from every other
    #: process for ``partition_seconds`` of virtual time, then the cut heals.
    #: Messages across the cut are lost.  ``partition_of`` limits which
    #: processes may be cut off (empty: any).
    max_partitions: int = 0
    partition_seconds: float = 60.0
    partition_weight: float = 0.05
    partition_of: tuple[str, ...] = ()
    #: TCP between processes (trio's sockets, ``dst.sim.sockets``).  A partition
    #: breaks the connections across the cut and a crash closes the dead
    #: process's sockets (budgets above); message drops do not apply (TCP
    #: retransmits a lost segment: the loss costs time, which a delay models).
    #: ``split_weight``: a ``recv`` that finds two bytes or more may return only
    #: a part of them, "split" against 1.0 for "all" (0: never; not a fault).
    split_weight: float = 0.25
    #: Connection resets per run, each offered on a parked socket send: the
    #: segment is lost and both ends get ``ECONNRESET`` (on a server's reply: the
    #: reply lost after the server acted).
    max_resets: int = 0
    reset_weight: float = 0.2
    #: Delayed segments per run, each offered on a parked socket send: its bytes
    #: (and the ones sent after them) arrive ``segment_delay_seconds`` late.
    max_segment_delays: int = 0
    segment_delay_seconds: float = 5.0
    segment_delay_weight: float = 0.2
    #: Virtual time after which no new fault is injected (None: while budgets
    #: last).  ``eventually`` properties are timed from when faults stop.
    faults_until: float | None = None
    #: In a run with ``eventually`` properties: the virtual time by which faults
    #: stop at the latest, when nothing stopped them before (every budget spent,
    #: ``faults_until``, nothing left that a fault could strike).  A budget the
    #: system never gives a chance to spend (a drop budget once it stops
    #: sending, a service fault of a service nobody calls) would otherwise keep
    #: the properties' clock from ever starting.  No effect without ``eventually``.
    calm_by: float = 300.0

    def __post_init__(self) -> None:
        if self.max_slow is not None and (isinstance(self.max_slow, bool)
                                          or not isinstance(self.max_slow, int)
                                          or self.max_slow < 0):
            raise ValueError(f"FaultPlan(max_slow=...) is a budget, an integer 0 or more (or "
                             f"None: unbudgeted), not {self.max_slow!r}")
        if not 0.0 <= self.calm_by < float("inf"):
            raise ValueError(f"FaultPlan(calm_by=...) is a virtual time, 0 or more and finite, "
                             f"not {self.calm_by!r}")
        for name, sf in self.services.items():
            if not isinstance(sf, ServiceFaults):
                raise TypeError(
                    f"FaultPlan(services=...) maps a service name to ServiceFaults(...), "
                    f"not {sf!r} (for {name!r})"
                )

    def as_dict(self) -> dict[str, Any]:
        """The plan as the trace header records it (defaults of new fields omitted,
        so that the headers of plans that do not use them stay as they were)."""
        out = asdict(self)
        for name in _OMITTED_WHEN_DEFAULT:
            if out[name] == _DEFAULTS[name]:
                del out[name]
        # ``max_slow`` is always written, and absent only for unbudgeted timers:
        # what a header written before it existed means (see the field).
        if out["max_slow"] is None:
            del out["max_slow"]
        if out["slow_weight"] == _DEFAULTS["slow_weight"]:
            del out["slow_weight"]
        out.update({k: dict(v) for k, v in out.items() if isinstance(v, Mapping)})
        out.update({k: list(v) for k, v in out.items() if isinstance(v, tuple)})
        return out

    @property
    def has_faults(self) -> bool:
        return bool(self.max_crashes or self.max_drops or self.max_dups or self.max_slow
                    or self.max_partitions or self.max_resets or self.max_segment_delays or any(
                        sf.fail or sf.lose_reply or sf.delay or sf.repeat
                        for sf in self.services.values()))

    def describe(self) -> str:
        parts = []
        if self.max_crashes:
            parts.append(f"crashes<={self.max_crashes}")
        if self.max_drops:
            parts.append(f"drops<={self.max_drops}")
        if self.max_dups:
            parts.append(f"dups<={self.max_dups}")
        if self.max_partitions:
            parts.append(f"partitions<={self.max_partitions}")
        if self.max_resets:
            parts.append(f"resets<={self.max_resets}")
        if self.max_segment_delays:
            parts.append(f"segment delays<={self.max_segment_delays}")
        for name, sf in sorted(self.services.items()):
            kinds = [f"{k}<={sf.budget(k)}" for k in SERVICE_FAULTS if sf.budget(k)]
            if kinds:
                parts.append(f"{name}: " + " ".join(kinds))
        if self.max_slow:
            parts.append(f"slow timers<={self.max_slow}")
        if self.preemptions:
            parts.append(f"preemptions<={self.preemptions}")
        return ", ".join(parts) or "no faults"


NO_FAULTS = FaultPlan()


_OMITTED_WHEN_DEFAULT = (
    "services", "process_crashes", "crash_only", "crash_at", "link_drops", "link_dups",
    "links_only", "max_partitions", "partition_seconds", "partition_weight", "partition_of",
    "faults_until", "calm_by", "split_weight", "max_resets", "reset_weight",
    "max_segment_delays", "segment_delay_seconds", "segment_delay_weight",
)
_DEFAULTS = asdict(NO_FAULTS)
