"""When two options commute: the independence relation behind partial-order reduction.

The exhaustive explorer skips a schedule when it differs from one already run
only in the order of two *independent* options: options that, taken in either
order from the same state, leave the same state and each stay enabled after
the other.  Getting this wrong in the "independent" direction skips schedules
that could break an invariant, and turns a violation into a false "no
violation"; so every rule below is conservative, and anything this module does
not recognise is dependent with everything.

What an option does is more than its label says.  Taking ``P/t@db.put(k)``
writes ``k`` and then runs task ``t``'s Python code until its next choice
point; that code can touch anything process ``P`` holds in memory, wake other
tasks of ``P``, start timers, and ask the fakes for data choices.  Different
processes share only durable stores, messages and outside services (and any
Python object a scenario deliberately gives to more than one of them, which the
relation cannot see: see ``docs/design.md``).  The label gives an option's
*access* (:func:`access`); the explorer also watches each step run and passes
its *footprint* (:mod:`dst.explore.footprint`: the processes whose code ran,
whether it read the clock).  Hence:

* two options whose steps ran code of one process are dependent (they share
  its memory); a delivery to ``P`` runs ``P``'s receiver;
* store operations of different processes commute unless they touch the same
  key of the same store and one of them writes (``put``, ``cas`` and
  ``delete`` write; ``get`` and ``scan`` read; a ``scan(prefix)`` touches every
  key under ``prefix``);
* a send only adds a message to the network, so sends of different processes
  commute (in either order the same messages are in flight, under swapped ids),
  and a send commutes with store operations and deliveries of other processes;
* deliveries to different processes commute;
* a message fault (``drop:``, ``dup:``) spends a budget shared by every message:
  dependent with every other message fault and with any option on the same
  message, independent of the rest;
* a timer moves the clock and wakes the tasks sleeping until then.  With both
  footprints known it commutes with a step of another process that never read
  the clock (and is not a service call: a fake's handler may read ``sim.now``,
  which dst does not see); without them it is dependent with everything;
* a service call runs the fake's handler, Python state shared by every caller:
  dependent with every other service call and with timers, and, with both
  footprints known, independent of the store operations, sends and deliveries
  of other processes;
* crashes, restarts, partitions, tasks held at trio checkpoints (``@run``: they
  spend the preemption budget) and data choices are dependent with everything,
  as is a step whose footprint says it was not atomic;
* with both footprints known, two steps that touched a key of one store, one
  of them writing it, are dependent whatever their labels say: code may read a
  store without a choice point (an observer holding it), and the footprint
  sees that read.

Two tasks of one process share its memory, so their options are dependent by
the rules above; :func:`in_process_commute` is the label and footprint half of
the finer rule for them, and :mod:`dst.explore.views` the memory half.

Two sends, or a send and a duplicate, taken in either order leave the same
messages under swapped ids (``m3``/``m4``): states equal up to the names of
messages, which no program and no invariant sees.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from typing import Any

from .footprint import Footprint, conflict

#: Operations on a store that change it; ``get`` and ``scan`` only read.
_WRITES = frozenset({"put", "cas", "delete"})
_STORE_OP = re.compile(r"(get|put|cas|delete|scan)\((.*)\)", re.DOTALL)
_MESSAGE = re.compile(r"(deliver|drop|dup):(m\d+)\((.*)\)", re.DOTALL)
#: The next timer, fired at rest or, as a slow fault, while other work could run:
#: either way the clock moves to its deadline (two never commute: ``kind`` timer).
_TIMER = re.compile(r"timer@[0-9][0-9.e+-]*(?:!slow)?")
_CALL = re.compile(r"call:([^.!]+)\.[^!]*(?:!(?:fail|lose_reply|delay|repeat))?", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Access:
    """What taking one option touches, as far as commuting goes.

    ``kind`` is ``store``, ``send``, ``deliver``, ``message_fault``, ``timer``,
    ``call`` (a service call or one of its fault variants; ``store`` holds the
    service's name) or ``global`` (dependent with everything).  ``proc`` is the
    process whose memory the option's code starts in (None for a message fault
    or a timer).
    """

    kind: str
    proc: str | None = None
    store: str = ""
    key: str = ""
    write: bool = False
    prefix: bool = False
    dest: str = ""
    message: str = ""
    #: The task whose option it is (``P`` or ``P/name``, as the kernel labels it).
    task: str = ""


GLOBAL = Access("global")
TIMER = Access("timer")


def _overlap(a: Access, b: Access) -> bool:
    if a.prefix and b.prefix:
        return True  # two scans: both read, never asked
    if a.prefix:
        return b.key.startswith(a.key)
    if b.prefix:
        return a.key.startswith(b.key)
    return a.key == b.key


def python_apart(fa: Footprint, fb: Footprint, a: Access, b: Access) -> bool:
    """Whether neither step changed Python memory the other's code can reach: neither
    changed the globals, and neither changed the memory of a process whose code the
    other ran (or whose option it is)."""
    ta, tb = fa.touched, fb.touched
    if ta is None or tb is None or "" in ta or "" in tb:
        return False
    mine = fa.procs | {a.proc} if a.proc is not None else fa.procs
    theirs = fb.procs | {b.proc} if b.proc is not None else fb.procs
    return ta.isdisjoint(theirs - mine) and tb.isdisjoint(mine - theirs)


def commute(a: Access, b: Access, fa: Footprint | None = None,
            fb: Footprint | None = None) -> bool:
    """Whether options with these accesses (and the footprints of their steps from
    the same state) are independent (see the module docstring).  Without both
    footprints, and what each step did to Python memory, nothing is proven."""
    if a.kind == "global" or b.kind == "global":
        return False
    if a.proc is not None and a.proc == b.proc:
        return False
    kinds = {a.kind, b.kind}
    if fa is None or fb is None or not python_apart(fa, fb, a, b):
        return False
    if fa.foreign or fb.foreign or not fa.procs.isdisjoint(fb.procs):
        return False
    if (fa.stores or fb.stores) and conflict(fa.stores, fb.stores):
        return False
    if "timer" in kinds:
        if a.kind == b.kind or "call" in kinds:
            return False
        other = fb if a.kind == "timer" else fa
        return not other.clock
    if "call" in kinds:
        return a.kind != b.kind
    if kinds == {"store"}:
        if a.store != b.store or not (a.write or b.write):
            return True
        return not _overlap(a, b)
    if "message_fault" in kinds:
        if a.kind == b.kind:
            return False  # one budget for every message
        return a.message != b.message
    return True  # sends, deliveries, store operations of two different processes


#: The options a task parks at that two tasks of one process may take in either order.
TASK_KINDS = frozenset({"store", "send", "call"})


def in_process_commute(a: Access, b: Access, fa: Footprint, fb: Footprint) -> bool:
    """Whether the options of two tasks of one process commute as far as their labels
    and footprints tell: each step ran its own task's code alone and started no task,
    the two touched no key of a store that one of them wrote, they are not two service
    calls (the fake's handler is shared) nor two sends on one route.  What their code
    did to the process's memory is :mod:`dst.explore.views`'s to tell."""
    if a.kind not in TASK_KINDS or b.kind not in TASK_KINDS or a.task == b.task:
        return False
    for f, x in ((fa, a), (fb, b)):
        if f.foreign or f.spawned or not f.procs <= {x.proc} or not f.tasks <= {x.task}:
            return False
        if f.touched is None or "" in f.touched:
            return False  # what it did to the globals every task shares is unknown, or done
    if a.kind == b.kind == "call":
        return False
    if a.kind == b.kind == "send" and a.dest == b.dest:
        return False
    if a.kind == b.kind == "store" and a.store == b.store and (a.write or b.write) \
            and _overlap(a, b):
        return False
    return not conflict(fa.stores, fb.stores)


class Independence:
    """Classifies option labels against the processes and stores of a run.

    ``processes`` and ``stores`` are called for the names that exist now (a
    scenario may start processes during the run, and one relation serves every
    run of a search: what it learnt of a label holds while the names are the
    same).  A label that could be read two ways (a process or store name
    containing ``@``, ``/``, ``.``, ``(``) is ``GLOBAL``.
    """

    def __init__(self, processes: Callable[[], Collection[str]],
                 stores: Callable[[], Collection[str]]) -> None:
        self._processes = processes
        self._stores = stores
        self._known: dict[str, Access] = {}
        #: The collections last asked (held, so that no other can take their ids),
        #: their sizes, and the names in them.
        self._seen: tuple[Any, ...] = (None, None, -1, -1)
        self._names: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())

    def access(self, label: str) -> Access:
        procs, stores = self._processes(), self._stores()
        seen = self._seen
        if (procs is not seen[0] or stores is not seen[1] or len(procs) != seen[2]
                or len(stores) != seen[3]):
            names = (frozenset(procs), frozenset(stores))
            if names != self._names:
                self._known.clear()
                self._names = names
            self._seen = (procs, stores, len(procs), len(stores))
        found = self._known.get(label)
        if found is None:
            found = self._known[label] = _classify(label, procs, stores)
        return found

    def independent(self, a: str, b: str, fa: Footprint | None = None,
                    fb: Footprint | None = None) -> bool:
        """Whether options ``a`` and ``b`` commute; ``fa`` and ``fb`` are the footprints
        of their steps from the same state, when the caller watched them run."""
        return a != b and commute(self.access(a), self.access(b), fa, fb)


def _classify(label: str, procs: Collection[str], stores: Collection[str]) -> Access:
    m = _MESSAGE.fullmatch(label)
    if m is not None:
        kind, mid, route = m.groups()
        ends = [(s, d) for s in procs for d in procs if route == f"{s}->{d}"]
        if len(ends) != 1:
            return GLOBAL
        if kind == "deliver":
            return Access("deliver", proc=ends[0][1], message=mid)
        return Access("message_fault", message=mid)
    if _TIMER.fullmatch(label):
        return TIMER
    readings = []
    for at in range(label.find("@"), len(label)):
        if at < 0 or label[at] != "@":
            continue
        proc = _owner(label[:at], procs)
        if proc is None:
            continue
        op = _operation(label[at + 1:], proc, stores)
        if op is not None:
            readings.append(op if op.kind == "global" else replace(op, task=label[:at]))
    return readings[0] if len(readings) == 1 else GLOBAL


def _owner(task: str, procs: Collection[str]) -> str | None:
    """The process a task label belongs to: ``P``, ``P/name`` or ``P/name#2``."""
    owners = [p for p in procs if task == p or task.startswith((p + "/", p + "#"))]
    return owners[0] if len(owners) == 1 else None


def _operation(op: str, proc: str, stores: Collection[str]) -> Access | None:
    if op.startswith("send(") and op.endswith(")"):
        return Access("send", proc=proc, dest=op[5:-1])
    if op == "run":
        return GLOBAL
    if op.startswith("call:"):
        m = _CALL.fullmatch(op)
        return Access("call", proc=proc, store=m.group(1)) if m is not None else GLOBAL
    readings = []
    for store in stores:
        if not op.startswith(store + "."):
            continue
        m = _STORE_OP.fullmatch(op, len(store) + 1)
        if m is not None:
            name, arg = m.groups()
            readings.append(Access("store", proc=proc, store=store, key=arg,
                                   write=name in _WRITES, prefix=name == "scan"))
    return readings[0] if len(readings) == 1 else None
