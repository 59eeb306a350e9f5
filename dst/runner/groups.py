"""Failures grouped by what broke: a signature per failing seed, a few traces per group.

A long run with a bug switched on fails in thousands of seeds, nearly all of
them the same bug.  Keeping a trace (and a path, and an outcome) per failing
seed fills the disk and the watching process's memory; rendering each trace
costs the workers a quarter of their time.  So every failure is reduced, in the
worker that ran it, to a *signature*, and the run keeps per signature a count,
the first seed, the shortest seed (fewest steps) and the traces of the ``N``
shortest seeds (``dst run --keep-traces N``, 1 by default).

The signature is the invariants violated, the violation's message and the
*action that broke it* (the last event or fault before the violation; a service or
TCP fault with its kind, so that a reply lost, a reply late and a call failed are
three groups: the code under test must survive each), with
everything a seed decides folded away: every run of digits becomes ``#``, so
``worker-2 incremented (to=1)`` and ``worker-1 incremented (to=5)`` are alike,
and so are message ids, task numbers and counts.  The whole story is *not* part
of it: which unrelated steps interleave, and whether a harmless message was
dropped, is exactly what a seed varies.  Measured on the shipped planted bugs
(1,000 seeds each), the whole normalised action sequence split one bug into 56
to 862 groups; this signature gives 1 to 4.

When shrinking is on, each group's shortest trace is shrunk, and groups whose
shrunk stories have the same *shape* (the invariants and the normalised actions
of the shrunk story, in order) are reported as one: shrinking strips what the
seed added, so two groups that shrink to one story are one bug.  Not when the
shrinker swapped the group's decisive fault for another kind of it (a reply lost,
one step shorter than the seeds' reply late): that group stays apart, told by its
own trace (:func:`swapped`).

Workers decide which traces to render from a :class:`KeepPolicy` the watching
process sends with each chunk (the steps and seed a failure must beat to be
kept, per signature): a failure-heavy run renders a handful of traces, not one
per seed.

The groups themselves are bounded too (``dst run --max-groups N``, ``MAX_GROUPS``
by default): a scenario whose messages differ in more than digits could
otherwise make a group, a trace file and a report entry of every failing seed.
The groups kept are the first ``N`` distinct signatures in seed order (chunks
are absorbed in seed order whatever the workers, locally or on a cluster, so
the same ``N`` whatever their number); with ``--resume``, the groups recorded
earlier come first.  A failure of any other signature is counted, per
invariant, as *not kept*: no group, no trace, no report entry, only the counts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The longest message or action kept in a signature: a check's message can be
#: as long as the code under test likes, and a signature travels with every failure.
_PART = 200

#: Runs cut at the step bound whose traces are kept (the summary offers one).
BOUNDED_KEPT = 3

#: Failure groups kept by default (``dst run --max-groups``): past them, failures
#: are only counted per invariant, so that memory, traces and reports stay bounded.
MAX_GROUPS = 100

_DIGITS = re.compile(r"\d+")


def fold(text: str) -> str:
    """``text`` with every run of digits as ``#``: ids, counts and numbers a seed decides."""
    return _DIGITS.sub("#", text)[:_PART]


#: Fault kinds whose record's detail says which fault it was: a service call's reply
#: lost, late or the call failed; a connection reset, delayed or cut.  The other kinds
#: are one fault each (``drop``, ``crash``...), their detail a route or a count.
_KIND_IN_DETAIL = frozenset({"service", "tcp"})


def _fault_action(what: str, target: str, detail: str) -> str:
    """A fault as a folded action: ``world: service payments: charge took effect; its
    reply was lost``.  The kind of fault is part of it, so that a lost reply and a late
    one are two groups: two faults the code under test must each survive."""
    told = f"world: {what} {target}"
    return fold(f"{told}: {detail}" if what in _KIND_IN_DETAIL and detail else told)


def _action_of_tuple(rec: tuple[Any, ...]) -> str | None:
    """A kernel record (``dst.sim.kernel``) as a folded action; None if it is no action."""
    if rec[0] == "event":
        return fold(f"{rec[3]}: {rec[4]}")
    if rec[0] == "fault":
        return _fault_action(rec[3], rec[4], rec[5])
    return None


def _action_of_dict(rec: dict[str, Any]) -> str | None:
    """A trace record (``docs/trace-format.md``) as a folded action; None if it is no action."""
    if rec.get("type") == "event":
        return fold(f"{rec.get('actor')}: {rec.get('event')}")
    if rec.get("type") == "fault":
        return _fault_action(str(rec.get("fault")), str(rec.get("target")),
                             str(rec.get("detail", "")))
    return None


def signature(records: Sequence[tuple[Any, ...]], violated: Sequence[str]) -> str:
    """The signature of a failing run from its kernel records: cheap, no trace rendered.

    ``[violated, folded message, folded action that broke it]`` as JSON text.
    """
    message, action = "", ""
    for i, rec in enumerate(records):
        if rec[0] == "violation":
            message = fold(str(rec[4]))
            for earlier in reversed(records[:i]):
                told = _action_of_tuple(earlier)
                if told is not None:
                    action = told
                    break
            break
    return json.dumps([list(violated), message, action], separators=(",", ":"))


def parts(sig: str) -> tuple[tuple[str, ...], str, str]:
    """``(violated, message, action)`` of a signature."""
    violated, message, action = json.loads(sig)
    return tuple(str(v) for v in violated), str(message), str(action)


def shape(records: Iterable[dict[str, Any]], violated: Sequence[str]) -> str:
    """The shape of a (shrunk) story: the violated invariants and its folded actions in order."""
    actions = [a for a in (_action_of_dict(r) for r in records) if a is not None]
    return json.dumps([list(violated), actions], separators=(",", ":"))


# -- in the worker: which failures to render -------------------------------------------


@dataclass(frozen=True)
class KeepPolicy:
    """What the watching process still wants rendered, sent with every chunk.

    ``per_group``: traces kept per signature.  ``beat``: per signature that
    already keeps ``per_group`` traces, the ``(steps, seed)`` of the longest one
    kept; only a failure that sorts before it can displace it.  ``bounded``: how
    many more traces of runs cut at the step bound are wanted.
    """

    per_group: int
    beat: dict[str, tuple[int, int]] = field(default_factory=dict)
    bounded: int = BOUNDED_KEPT
    #: With ``--max-failures``: how many failures the run still takes.  The chunk
    #: holding the last of them is cut after it, so the shortest of those, not of
    #: the whole chunk, are rendered too.
    first: int | None = None
    #: Once ``--max-groups`` groups are kept, no other can start: the signatures
    #: kept, and a failure of any other one is not rendered.  None: a failure of a
    #: new signature may still start a group.
    only: frozenset[str] | None = None


def to_render(failures: Iterable[tuple[int, int, str]], policy: KeepPolicy) -> set[int]:
    """The seeds of ``(seed, steps, signature)`` failures in one chunk worth a trace.

    Per signature, the ``per_group`` shortest (ties: the lower seed) that beat
    the policy's bar: a superset of what the watching process will keep, since
    it only ever tightens the bar (and, once ``policy.only`` is set, never keeps
    another group).  With ``policy.first``, also each failure
    that is among the ``per_group`` best of its own prefix of the chunk's first
    ``first`` failures: a run stopped early cuts the chunk after one of those.
    """
    n = policy.per_group
    by_sig: dict[str, list[tuple[int, int]]] = {}
    chosen: set[int] = set()
    for i, (seed, steps, sig) in enumerate(sorted(failures)):
        if policy.only is not None and sig not in policy.only:
            continue  # a group --max-groups does not keep: counted, never rendered
        bar = policy.beat.get(sig)
        if bar is not None and (steps, seed) >= bar:
            continue
        best = by_sig.setdefault(sig, [])
        best.append((steps, seed))
        best.sort()
        del best[n:]
        # Among the n best of every prefix the run may be cut after: rendered now.
        if policy.first is not None and i < policy.first and (steps, seed) in best:
            chosen.add(seed)
    for best in by_sig.values():
        chosen.update(seed for _, seed in best)
    return chosen


# -- in the watching process: the groups ----------------------------------------------


@dataclass
class Shrunk:
    """A group's shortest trace shrunk: where, how long, and from how long."""

    path: Path
    steps: int
    from_steps: int
    #: The seed whose trace was shrunk.
    seed: int
    shape: str


@dataclass
class Group:
    """One signature's failures: counts and the few traces kept, never one entry per seed."""

    id: int
    signature: str
    count: int = 0
    first_seed: int | None = None
    #: ``(steps, seed)`` of the shortest failing seed.
    shortest: tuple[int, int] | None = None
    #: ``(steps, seed, path)`` of the traces kept, shortest first.
    kept: list[tuple[int, int, Path]] = field(default_factory=list)
    shrunk: Shrunk | None = None
    #: Not yet written to the results database.
    new: bool = True

    @property
    def violated(self) -> tuple[str, ...]:
        return parts(self.signature)[0]

    @property
    def message(self) -> str:
        return parts(self.signature)[1]

    @property
    def action(self) -> str:
        return parts(self.signature)[2]

    def count_failure(self, seed: int, steps: int) -> None:
        self.count += 1
        if self.first_seed is None or seed < self.first_seed:
            self.first_seed = seed
        if self.shortest is None or (steps, seed) < self.shortest:
            self.shortest = (steps, seed)


class GroupBook:
    """Every group of a run, by signature; decides which groups and traces are kept.

    At most ``max_groups`` groups hold failures (None: no bound); a failure of
    another signature once they do is counted in ``not_kept`` (per invariant)
    and ``not_kept_failed``, and nothing else is kept of it.  ``per_group`` None
    keeps every failing trace of the groups kept (``--keep-traces all``): then,
    and only then, memory grows with each failure.
    """

    def __init__(self, per_group: int | None = 1, max_groups: int | None = MAX_GROUPS) -> None:
        self.per_group = per_group
        self.max_groups = max_groups
        self.groups: dict[str, Group] = {}
        self.last_id = 0
        #: Groups holding failures (``groups`` may also hold groups read back from the
        #: results database with none in the seeds of this run).
        self.live = 0
        #: Failing seeds in groups not kept, per invariant and in all.
        self.not_kept: dict[str, int] = {}
        self.not_kept_failed = 0

    def __len__(self) -> int:
        return len(self.groups)

    @property
    def full(self) -> bool:
        """No other group can start: ``max_groups`` groups hold failures."""
        return self.max_groups is not None and self.live >= self.max_groups

    def group(self, sig: str) -> Group:
        """The group of ``sig``, made if need be whatever the bound (see :meth:`count`)."""
        found = self.groups.get(sig)
        if found is None:
            self.last_id += 1
            found = Group(id=self.last_id, signature=sig)
            self.groups[sig] = found
        return found

    def kept_group(self, sig: str) -> Group | None:
        """The group of ``sig`` if it is kept (it holds failures), else None."""
        found = self.groups.get(sig)
        return found if found is not None and found.count else None

    def count(self, sig: str, seed: int, steps: int,
              violated: Iterable[str]) -> Group | None:
        """Count a failing seed in its group; None when that group is not kept.

        A signature without failures yet starts a group only while fewer than
        ``max_groups`` hold failures; past that, the failure is counted per
        invariant in ``not_kept`` and nothing else of it is kept.
        """
        found = self.groups.get(sig)
        if found is None or not found.count:
            if self.full:
                self.add_not_kept(violated, 1)
                return None
            found = found or self.group(sig)
            self.live += 1
        found.count_failure(seed, steps)
        return found

    def add_not_kept(self, violated: Iterable[str], n: int) -> None:
        """``n`` failing seeds, each violating ``violated``, in groups not kept."""
        self.not_kept_failed += n
        for name in violated:
            self.not_kept[name] = self.not_kept.get(name, 0) + n

    def add_loaded(self, group: Group) -> None:
        """A group read back from the results database (``--resume``)."""
        group.new = False
        self.groups[group.signature] = group
        self.last_id = max(self.last_id, group.id)

    def settle(self) -> None:
        """After groups were read back with their counts (``--resume``): count those
        holding failures, and past ``max_groups`` (a resumed run asking for fewer
        than an earlier one kept) count the latest found as not kept.  Their rows
        and traces stay where the earlier run recorded them, for a run that keeps more."""
        live = self.ordered()
        self.live = len(live)
        if self.max_groups is None or self.live <= self.max_groups:
            return
        for g in live[self.max_groups:]:
            self.add_not_kept(g.violated, g.count)
            del self.groups[g.signature]
        self.live = self.max_groups

    def wants(self, group: Group, seed: int, steps: int) -> bool:
        """Whether a trace of this failure would be kept now."""
        if self.per_group is None or len(group.kept) < self.per_group:
            return True
        return bool(group.kept) and (steps, seed) < group.kept[-1][:2]

    def keep(self, group: Group, seed: int, steps: int,
             path: Path) -> list[tuple[int, int, Path]]:
        """Keep this trace; return the kept traces it displaces (to delete)."""
        group.kept.append((steps, seed, path))
        group.kept.sort(key=lambda k: k[:2])
        if self.per_group is None or len(group.kept) <= self.per_group:
            return []
        displaced = group.kept[self.per_group:]
        del group.kept[self.per_group:]
        return displaced

    def policy(self, bounded: int) -> KeepPolicy | None:
        """What workers should render; None: every failing trace (``--keep-traces all``)."""
        if self.per_group is None:
            return None
        n = self.per_group
        beat = {sig: g.kept[-1][:2] for sig, g in self.groups.items()
                if g.kept and len(g.kept) >= n}
        only = (frozenset(sig for sig, g in self.groups.items() if g.count) if self.full
                else None)
        return KeepPolicy(n, beat, bounded, only=only)

    def ordered(self) -> list[Group]:
        """Groups by first seed (the order they were found in a run from seed 0)."""
        return sorted((g for g in self.groups.values() if g.count),
                      key=lambda g: (g.first_seed if g.first_seed is not None else 0, g.id))


@dataclass
class Report:
    """Groups told as one: the same signature, or shrunk to the same shape."""

    members: list[Group]

    @property
    def lead(self) -> Group:
        """The member whose shortest seed is shortest: its story is the one told."""
        return min(self.members, key=lambda g: g.shortest or (0, 0))

    @property
    def count(self) -> int:
        return sum(g.count for g in self.members)

    @property
    def first_seed(self) -> int:
        return min(g.first_seed for g in self.members if g.first_seed is not None)

    @property
    def shortest(self) -> tuple[int, int]:
        return min(g.shortest for g in self.members if g.shortest is not None)

    @property
    def violated(self) -> tuple[str, ...]:
        return self.lead.violated

    @property
    def shrunk(self) -> Shrunk | None:
        done = [g.shrunk for g in self.members if g.shrunk is not None and not swapped(g)]
        return min(done, key=lambda s: (s.steps, s.seed)) if done else None

    @property
    def kept(self) -> list[tuple[int, int, Path]]:
        return sorted((k for g in self.members for k in g.kept), key=lambda k: k[:2])


def swapped(g: Group) -> bool:
    """Whether ``g``'s shrunk story broke the invariant by another fault of the same
    kind and target than the one that broke it in ``g``'s seeds (a reply lost, where
    the seeds had it late).

    The shrinker may do that: it keeps the shortest story of the same violation,
    whatever the fault.  That story is still worth having (``dst shrink`` tells it),
    but it is the story of another group: the seeds of this one found code that does
    not survive *their* fault.
    """
    if g.shrunk is None:
        return False
    action = g.action
    if not action.startswith("world: "):
        return False
    kind = action.partition(": ")[2].partition(": ")[0]
    story_actions = json.loads(g.shrunk.shape)[1]
    alike = [a for a in story_actions if a.startswith(f"world: {kind}")]
    return bool(alike) and action not in alike


def reports(book: GroupBook) -> list[Report]:
    """The groups as reported: those shrunk to the same shape merged, by first seed.

    A group whose shrunk story swapped its decisive fault (:func:`swapped`) is not
    merged: it would hide, under the other fault's story, the seeds that fail
    by this one."""
    merged: dict[str, Report] = {}
    out: list[Report] = []
    for g in book.ordered():
        key = g.shrunk.shape if g.shrunk is not None and not swapped(g) else None
        if key is not None and key in merged:
            merged[key].members.append(g)
            continue
        report = Report([g])
        out.append(report)
        if key is not None:
            merged[key] = report
    return out
