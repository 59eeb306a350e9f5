"""What one step actually did: which processes' code ran, and whether it read the clock.

A label says what an option starts with (a store write, a delivery, a timer);
the code it then runs, until every task is blocked again, is known only by
running it.  The explorer watches each step as it runs and keeps its
*footprint*, so that independence can rest on what happened rather than on
what might:

* ``procs``: the processes whose tasks took a step (trio's
  ``before_task_step``), each task tied to its process's incarnation by the
  kernel's table of owners (``Sim._incarnation_of``).  Code of a process runs in its memory
  only; two steps that ran code of one process are dependent.
* ``clock``: code inside a task read virtual time (``trio.current_time``,
  ``env.clock.now()``, a ``sleep`` or ``move_on_after`` computing its
  deadline, a library's ``time.time()`` answered from the simulation).  A step
  that never read the clock does the same whenever it runs, so it commutes with a
  timer that wakes another process.
* ``foreign``: a task that belongs to no process ran (a kernel task), or the
  step made a data choice or was decided while a task still ran: the step is
  not one atomic transition, and it is dependent with everything.
* ``tasks``: the labels of the tasks that took a step, and ``spawned``: a task
  was started.  Two steps of one process commute only if each ran its own
  task's code alone and started none (:mod:`dst.explore.views`).
* ``touched``: the processes whose memory (what their tasks' frames and
  contexts reach, :mod:`dst.explore.memory`) differs after the step, and
  ``""`` when module globals, class attributes or function attributes and
  defaults changed; the explorer fills it in from the digests of the states
  before and after the step.  A step of ``P`` that changed the memory of
  ``Q`` wrote an object both reach; a step that changed the globals wrote
  memory every task shares.
* ``stores``: every key of a durable store the step's code touched, the
  option's own operation included, and whether it wrote it.  A task performs
  its store operation itself when it is resumed; code may also read a store
  without a choice point (an observer the scenario hands the runtime, peeking
  at it), and such a read depends on every write to that key.

The clock is watched by replacing ``current_time`` on the run's clock object
for the length of the search; reads outside a task (trio's own loop, the
kernel) are not the code under test observing time and are not counted.  The
stores are watched by wrapping each run's stores' methods (:func:`watch_stores`);
calls outside a task (the kernel, the checks) are not counted either.

The watch is an instrument, so trio calls it at every task step; the explorer
installs it only from the first step whose footprint it does not know yet (a
run first replays the search's path, whose footprints it took before).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

import trio
import trio.lowlevel as ll

from ..sim.process import Incarnation


class Touch(NamedTuple):
    """A key of a store that a step's code touched (``prefix``: every key under it)."""

    store: str
    key: str
    write: bool
    prefix: bool = False


def _overlap(a: Touch, b: Touch) -> bool:
    if a.prefix:
        return b.key.startswith(a.key) or (b.prefix and a.key.startswith(b.key))
    if b.prefix:
        return a.key.startswith(b.key)
    return a.key == b.key


def conflict(a: Iterable[Touch], b: Iterable[Touch]) -> bool:
    """Whether two steps touched a key of one store, one of them writing it."""
    for x in a:
        for y in b:
            if x.store == y.store and (x.write or y.write) and _overlap(x, y):
                return True
    return False


@dataclass(frozen=True, slots=True)
class Footprint:
    """What one step did (see the module docstring)."""

    procs: frozenset[str] = frozenset()
    clock: bool = False
    foreign: bool = False
    tasks: frozenset[str] = frozenset()
    spawned: bool = False
    stores: frozenset[Touch] = frozenset()
    #: The processes whose memory the step changed, read off the states before and
    #: after it (``""``: the globals every process shares changed); None while unknown.
    touched: frozenset[str] | None = None


#: The footprint of a step that is dependent with everything.
FOREIGN = Footprint(foreign=True)


class StepWatch(trio.abc.Instrument):
    """Collects the footprint of each step of one run; installed inside the run."""

    def __init__(self) -> None:
        self.current: ll.Task | None = None
        self._procs: set[str] = set()
        self._tasks: set[str] = set()
        self._stores: set[Touch] = set()
        self._clock = False
        self._foreign = False
        self._spawned = False
        #: The run's task labels (the kernel's), to name the tasks that step.
        self.labels: dict[ll.Task, str] = {}
        #: Each task's incarnation (the kernel's ``_incarnation_of``).
        self.owners: dict[ll.Task, Incarnation] = {}
        #: Whether trio calls the watch now (see ``install``).
        self.installed = False

    def __dir__(self) -> list[str]:
        # What trio looks the hooks up in, each time the watch is installed.
        return ["after_task_step", "before_task_step", "task_spawned"]

    def install(self) -> None:
        """Have trio call the watch at every task step from now on."""
        if not self.installed:
            ll.add_instrument(self)
            self.installed = True

    def uninstall(self) -> None:
        if self.installed:
            ll.remove_instrument(self)
            self.installed = False
            self.current = None

    def before_task_step(self, task: ll.Task) -> None:
        self.current = task
        inc = self.owners.get(task)  # the kernel's: its context may be another process's
        if inc is None:
            self._foreign = True
        else:
            self._procs.add(inc.process.name)
            self._tasks.add(self.labels.get(task, ""))

    def after_task_step(self, task: ll.Task) -> None:
        self.current = None

    def task_spawned(self, task: ll.Task) -> None:
        self._spawned = True

    def touch(self, store: str, key: str, write: bool, prefix: bool = False) -> None:
        """A task's code called a store (see :func:`watch_stores`)."""
        if self.current is not None:
            self._stores.add(Touch(store, key, write, prefix))

    def taint(self) -> None:
        """The step is not atomic (a data choice, a decision taken while a task ran)."""
        self._foreign = True

    def take(self) -> Footprint:
        """The footprint since the last ``take``, and start the next."""
        if self._foreign:
            fp = FOREIGN
        elif self._procs or self._clock or self._spawned or self._stores:
            fp = Footprint(frozenset(self._procs), self._clock, False, frozenset(self._tasks),
                           self._spawned, frozenset(self._stores))
        else:
            fp = _EMPTY
        if self._procs:
            self._procs = set()
            self._tasks = set()
        if self._stores:
            self._stores = set()
        self._clock = self._foreign = self._spawned = False
        return fp


_EMPTY = Footprint()

#: A store's methods: whether each writes, and whether its argument is a key (else
#: a prefix, or nothing: every key).
_STORE_METHODS: dict[str, tuple[bool, bool]] = {
    "get": (False, True), "peek": (False, True), "view": (False, True),
    "scan": (False, False), "put": (True, True), "cas": (True, True),
    "delete": (True, True), "snapshot": (False, False), "copy_from": (True, False),
}


def watch_stores(stores: Iterable[Any], watch: StepWatch) -> None:
    """Report every call of these stores' methods made by a task's code to ``watch``.

    Each store of a run is wrapped once, by instance attributes that shadow the
    class's methods (the stores live as long as their run).
    """
    for store in stores:
        if "_dst_watched" in vars(store):
            continue
        store._dst_watched = True
        for name, (write, keyed) in _STORE_METHODS.items():
            method = getattr(store, name, None)
            if method is not None:
                setattr(store, name, _watched(store.name, name, method, watch, write, keyed))


def _watched(store: str, name: str, method: Callable[..., Any], watch: StepWatch,
             write: bool, keyed: bool) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        if watch.current is not None:
            arg = args[0] if args else None
            if not isinstance(arg, str) or name in ("snapshot", "copy_from"):
                watch.touch(store, "", write, True)  # every key
            else:
                watch.touch(store, arg, write, not keyed)
        return method(*args, **kwargs)

    return call


class ClockTap:
    """Reports reads of a clock's time to the watch of the run in progress.

    ``install`` replaces ``current_time`` on the clock object itself (trio
    looks it up on every call); ``remove`` puts the class's method back.
    """

    def __init__(self) -> None:
        self.watch: StepWatch | None = None
        self._clock: Any = None

    def install(self, clock: Any) -> None:
        if self._clock is clock:
            return
        self.remove()
        self._clock = clock
        tap = self

        def current_time() -> float:
            watch = tap.watch
            if watch is not None and watch.current is not None:
                watch._clock = True
            return float(clock.now)

        clock.current_time = current_time

    def remove(self) -> None:
        clock, self._clock = self._clock, None
        if clock is not None and "current_time" in vars(clock):
            del clock.current_time
