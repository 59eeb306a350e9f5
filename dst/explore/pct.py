"""PCT: probabilistic concurrency testing with bug depth ``d``.

After Burckhardt, Kothari, Musuvathi and Nagarakatte, "A Randomized Scheduler
with Probabilistic Guarantees of Finding Bugs" (ASPLOS 2010).  A random walk
spreads its chances over every interleaving, and the interleavings a deep bug
needs (a second task running *entirely* inside the window between a first
task's read and its write) get an exponentially small share.  Most bugs need
only a few orderings between actors, the bug's *depth* ``d``.  PCT makes the
schedule nearly deterministic instead: every actor gets a random priority, the
highest-priority enabled actor always runs, and at ``d - 1`` steps drawn
uniformly from the first ``k`` the actor that runs is lowered below every
other.  Each bug of depth ``d`` then shows with probability at least
``1 / (n * k ** (d - 1))`` per run (``n`` actors, ``k`` steps), however long the
windows it needs.

Actors.  dst's options are labels (``dst.sim.kernel``); the actor an option
belongs to is read off its label (:func:`actor_of`).  By default the actors are
the simulated *processes*:

- ``P/task@store.op(key)``, ``P@send(Q)``, ``P/task@run``: the process ``P``
  (all its tasks share its priority, whether parked at an ``Env`` call or held
  at a trio checkpoint; among them the random walk's weighted draw decides);
- ``deliver:m3(a->b)``: the receiving process ``b`` (taking a message in is
  the receiver's step, as an actor's dequeue is in actor-model PCT);
- ``timer@T``: the ``timer`` actor;
- every fault (``crash:``, ``restart:``, ``drop:``, ``dup:``, ``partition:``,
  a call's ``!fail``, ``!lose_reply``, ``!delay``, ``!repeat`` variant, a timer
  firing early, ``timer@T!slow``): the ``faults`` actor.

With ``actors="task"`` (spec ``pct:actors=task``) every task is an actor of
its own (``P/task``; a delivery belongs to ``b``'s main task ``b``), which
lets one task of a process run a long way inside another's window.

Messages are never actors of their own.  Each message its own actor made the
contending actors many (a dozen on the shipped ``approval`` runs for three
processes) and each one's contested steps few, and PCT's priorities then
serialise what the bugs there need interleaved: the two turns of one process
that race for one approval.  With processes as actors those turns are ordered
by the random walk inside their process, and PCT orders the processes.

The *world* (``timer`` and ``faults``) is not ordered by priority by default:
at each step it goes with the probability the random walk would give it (its
options' weights against the rest), and PCT orders the processes otherwise.
As priority actors (``world="actor"``) a top-priority ``faults`` spends every
fault budget in the first steps (a crash before anything happened) and a
top-priority ``timer`` fires every timeout before any reply can arrive;
measured over the shipped planted bugs that wasted most runs
(``benchmarks/README.md``).  Either way it is the seed that decides.

``k`` counts only *contested* steps, where two priority actors or more are
enabled: a change point anywhere else could not change the order of anything.
It should be about the number of such steps in a run (points past the end are
wasted); ``dst.explore.strategies`` estimates it unless it is given, with the
number ``n`` of actors that contended, and the strategy's name records both
(``pct:d=5,k=41,n=2``).

Data choices (a fake's ``sim.choose(label, options)``: every label is
``label:option`` for one ``label`` that is not the kernel's) are drawn
uniformly from the seed: PCT's guarantee is about orderings, and a fake's
answers are not actors.

**PCT is PCT, or says it is not.**  A PCT run draws from its own streams
(``dst-pct/SEED``), never the random walk's, so its schedules differ from
``random``'s for the same seeds.  Where PCT has nothing to order (the estimate
saw no step at which two actors could both go: one process, or processes that
never overlap), ``dst.explore.strategies`` runs the random walk instead and
says so in one line (``pct fell back to random: ...``), which ``dst run``
prints and puts in its ``--json`` document; nothing falls back silently.
Measured seeds to the first failure against the random walk on every shipped
planted bug: ``benchmarks/README.md`` ("bench_pct.py").
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

#: The default bug depth: four change points.  Depth 2 is enough for an
#: atomicity violation between two actors, but on the shipped planted bugs
#: (``benchmarks/README.md``, "Strategies") depth 5 found the shallow races
#: between short, similar tasks about 1.5 times as often as depth 3 did (in
#: 1.2-1.4 times as many runs as a random walk, against 2), and the deep ones
#: only about 10% less often (still 3 to 7 times as often as a random walk).
#: Measured again with processes as actors (``benchmarks/bench_pct.py``, 60 ranges
#: of 500 seeds): depth 5 found 15 of the 20 bugs at least as often as depth 3.
DEFAULT_DEPTH = 5

#: How the world (timers and faults) is scheduled (see the module docstring).
WORLDS = ("weighted", "actor")
DEFAULT_WORLD = "weighted"

#: Label prefixes of the kernel's own options (never a fake's data label).
_KERNEL_HEADS = frozenset({"deliver", "drop", "dup", "crash", "restart", "partition"})
_FAULT_PREFIXES = ("drop:", "dup:", "crash:", "restart:", "partition:")
_CALL_FAULT = re.compile(r"!(fail|lose_reply|delay|repeat|slow)$")
_TIMER = re.compile(r"timer@[0-9]")

#: What an actor is (see the module docstring); ``process`` is the default.
ACTORS = ("process", "task")
DEFAULT_ACTORS = "process"

FAULTS = "faults"
TIMER = "timer"
_WORLD = (FAULTS, TIMER)


def actor_of(label: str, actors: str = DEFAULT_ACTORS) -> str:
    """The actor a scheduling option belongs to: its process, or with ``actors="task"``
    its task (see the module docstring)."""
    if label.startswith(_FAULT_PREFIXES) or _CALL_FAULT.search(label):
        return FAULTS
    if label.startswith("deliver:"):
        # deliver:m3(a->b): the receiver b, whose main task is named b too.
        inside = label.partition("(")[2]
        return inside[:-1].rpartition("->")[2] if inside.endswith(")") else label
    if _TIMER.match(label):
        return TIMER
    head, at, _ = label.partition("@")
    task = head if at else label
    return task if actors == "task" else task.partition("/")[0]


def is_data(labels: Sequence[str]) -> bool:
    """Whether ``labels`` are a fake's data choice (``sim.choose``), not a scheduling one.

    A data choice lists ``label:option`` for one ``label``; no scheduling label
    has that shape (task labels hold ``@`` before any ``:``, and the kernel's
    ``deliver:``, ``crash:`` ... heads are its own).
    """
    head = None
    for text in labels:
        h, colon, _ = text.partition(":")
        if not colon or "@" in h or h in _KERNEL_HEADS or (head is not None and h != head):
            return False
        head = h
    return True


class PCT:
    """The PCT scheduler for one seed; ``name`` records its parameters."""

    def __init__(self, seed: int, depth: int = DEFAULT_DEPTH, steps: int = 200,
                 world: str = DEFAULT_WORLD, count: int | None = None,
                 actors: str = DEFAULT_ACTORS) -> None:
        if (depth < 1 or steps < 1 or world not in WORLDS or actors not in ACTORS
                or (count is not None and count < 1)):
            raise ValueError(f"PCT needs depth >= 1, steps >= 1, n >= 1, a world of {WORLDS} "
                             f"and actors of {ACTORS}, not d={depth}, k={steps}, n={count}, "
                             f"world={world!r}, actors={actors!r}")
        #: ``n`` (``count``) is the actors the estimate saw contend: recorded, not used.
        self.name = (f"pct:d={depth},k={steps}" + ("" if count is None else f",n={count}")
                     + ("" if world == DEFAULT_WORLD else f",{world=!s}")
                     + ("" if actors == DEFAULT_ACTORS else f",{actors=!s}"))
        self._actors = actors
        self._weigh_world = world == "weighted"
        # Separate streams: a data choice or the world's draw never shifts the
        # priorities and change points, and the priorities never shift those.
        self._rng = random.Random(f"dst-pct/{seed}")
        self._pick = random.Random(f"dst-pct-pick/{seed}")
        points = self._rng.sample(range(1, steps + 1), min(depth - 1, steps))
        #: Contested step -> the low priority the actor that runs then gets.
        #: Change point i gets priority i - depth (all below the initial ones,
        #: which lie in [0, 1)), in the random order they were drawn.
        self._changes = {step: float(i - depth) for i, step in enumerate(points)}
        self._priority: dict[str, float] = {}
        #: Contested steps so far, and the actors that contended in them (what ``k``
        #: and ``n`` count; read by their estimate).
        self.contested = 0
        self.contenders: set[str] = set()

    def _of(self, actor: str) -> float:
        p = self._priority.get(actor)
        if p is None:
            # An actor seen for the first time takes a random place among the
            # others, as if every priority had been drawn at the start.
            p = self._priority[actor] = self._rng.random()
        return p

    def choose(
        self, step: int, labels: Sequence[str], weights: Sequence[float] | None
    ) -> int:
        n = len(labels)
        if n == 1:
            self._of(actor_of(labels[0], self._actors))
            return 0
        if is_data(labels):
            return int(self._pick.random() * n)
        actors = [actor_of(label, self._actors) for label in labels]
        if self._weigh_world:
            world = [i for i, a in enumerate(actors) if a in _WORLD]
            if world:
                w = list(weights) if weights is not None else [1.0] * n
                share = sum(w[i] for i in world)
                if len(world) == n or self._pick.random() * sum(w) < share:
                    return world[self._weighted([w[i] for i in world])]
                for i in world:
                    actors[i] = ""
        best: list[int] = []
        best_actor = ""
        top = -float("inf")
        distinct = 0
        for i, actor in enumerate(actors):
            if not actor:
                continue
            p = self._of(actor)
            if p > top or (p == top and actor < best_actor):
                top, best_actor, best = p, actor, [i]
                distinct += 1
            elif actor == best_actor:
                best.append(i)
            else:
                distinct += 1
        if distinct > 1:
            self.contested += 1
            self.contenders.update(a for a in actors if a)
            low = self._changes.get(self.contested)
            if low is not None:
                self._priority[best_actor] = low
        if len(best) == 1:
            return best[0]
        return best[self._weighted([weights[i] for i in best] if weights else None, len(best))]

    def _weighted(self, weights: Sequence[float] | None, n: int = 0) -> int:
        if weights is None:
            return int(self._pick.random() * n)
        x = self._pick.random() * sum(weights)
        for i, w in enumerate(weights):
            x -= w
            if x < 0:
                return i
        return len(weights) - 1
