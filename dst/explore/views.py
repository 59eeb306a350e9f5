"""When steps of two tasks of one process commute: what each task can reach.

Tasks of one process share its memory, so the independence relation
(:mod:`dst.explore.independence`) takes any two of their options as dependent.
Yet two turns of one agent mostly touch what is their own: the message each
handles, the record each restored, the reply each sends.  Taken in either
order, such steps reach one state, and exploring both orders only finds that
state twice (state caching then stops the second run there, one run later).

This module tells when that holds, from what the search can see.  A task's
*view* is a digest of everything its frames reach, written out exactly as
:mod:`dst.explore.memory` writes a state, the objects the exact fingerprint
names included in full (the probe, the fakes): whatever its code can read or
change, short of module globals, which an exact fingerprint already promises do
not steer the code.  Options ``x`` of task ``T1`` and ``y`` of task ``T2``,
both explored from one state ``s``, commute when

* their labels and footprints allow it (:func:`dst.explore.independence.in_process_commute`:
  each step ran its own task's code alone and started no task, they touched no
  key of a store one of them wrote, they are not two service calls nor two
  sends on one route);
* ``x`` left ``T2``'s view as it was in ``s``, and ``y`` left ``T1``'s.

Then ``y`` from ``s·x`` runs the same code on the same objects as from ``s``
(nothing it reads changed), and writes the same; so does ``x`` from ``s·y``;
the two orders end in one state, and each option is still enabled after the
other (its task is parked where it was, its cancel scopes unchanged: the view
holds them).  The views of ``s`` are read when the search first reaches it,
those of ``s·x`` when a run first takes ``x`` from ``s``; nothing is assumed of
an option the search did not run from ``s`` itself (an option asleep since an
earlier state keeps the relation's verdict).

Views cost a pickle of the tasks' memory, so they are read only where two or
more tasks of a process have options their labels allow to commute, and only
with state caching on (the same exactness the state keys rely on); what the
state's key read of the tasks' frames is read once for both.
"""

from __future__ import annotations

import hashlib
from collections.abc import Container, Iterable

from ..sim.kernel import Sim
from .footprint import Footprint
from .independence import TASK_KINDS, Access, Independence, in_process_commute
from .memory import Reads, Unreadable, tasks_memory
from .states import task_labels


def sharing(independence: Independence, labels: Iterable[str],
            skip: Container[str] = ()) -> dict[str, list[str]]:
    """For each process with options of two or more of its tasks among ``labels`` (those
    not in ``skip``: asleep, never taken there) that their labels allow to commute, those
    tasks, sorted: the tasks whose views this state needs."""
    by_proc: dict[str, list[Access]] = {}
    for label in labels:
        if label in skip:
            continue
        a = independence.access(label)
        if a.task and a.proc is not None and a.kind in TASK_KINDS:
            by_proc.setdefault(a.proc, []).append(a)
    out = {}
    for proc, options in by_proc.items():
        tasks = sorted({a.task for a in options for b in options
                        if a.task != b.task and in_process_commute(a, b, _QUIET, _QUIET)})
        if tasks:
            out[proc] = tasks
    return out


#: A step that touched nothing: to ask what the labels alone allow.
_QUIET = Footprint(touched=frozenset())


def views(sim: Sim, tasks: Iterable[str], reads: Reads | None = None) -> dict[str, bytes]:
    """The view of each of ``tasks`` (by label) now; a task that is gone, or holds what
    cannot be read, has none (and so commutes with nothing)."""
    owner = getattr(sim, "_label_owner", {})
    label = task_labels(sim)
    out: dict[str, bytes] = {}
    for name in tasks:
        task = owner.get(name)
        if task is None:
            continue
        try:
            out[name] = hashlib.blake2b(tasks_memory([(name, task)], label, reads=reads),
                                        digest_size=16).digest()
        except Unreadable:
            continue
    return out


def unchanged(before: dict[str, bytes], after: dict[str, bytes] | None, task: str) -> bool:
    """Whether ``task``'s view is the same in both (and was read in both)."""
    if after is None:
        return False
    seen = before.get(task)
    return seen is not None and after.get(task) == seen


def views_after(independence: Independence, groups: dict[str, list[str]], taken: str,
                sim: Sim, reads: Reads | None = None) -> dict[str, bytes] | None:
    """In the state option ``taken`` just led to, the views of the other tasks of its
    task's group (None if its task is in no group)."""
    a = independence.access(taken)
    group = groups.get(a.proc or "")
    if group is None or a.task not in group:
        return None
    return views(sim, [t for t in group if t != a.task], reads)


def commute_in_process(independence: Independence, labels: tuple[str, ...], chosen: int,
                       before: dict[str, bytes], after: dict[int, dict[str, bytes]],
                       x: str, fx: Footprint | None, fy: Footprint) -> bool:
    """Whether option ``x``, explored from a state with options ``labels`` and views
    ``before``, commutes with option ``chosen`` just taken there, both options of two
    tasks of one process (``after``: each option's views of the others, once taken)."""
    if fx is None:
        return False
    a, b = independence.access(x), independence.access(labels[chosen])
    if a.proc is None or a.proc != b.proc or not in_process_commute(a, b, fx, fy):
        return False
    return (unchanged(before, after.get(labels.index(x)), b.task)
            and unchanged(before, after.get(chosen), a.task))
