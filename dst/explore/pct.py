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
belongs to is read off its label (:func:`actor_of`):

- ``P/task@store.op(key)``, ``P@send(Q)``, ``P/task@run``: the task ``P/task``
  (a task keeps its priority whether it is parked at an ``Env`` call or held
  at a trio checkpoint);
- ``deliver:m3(a->b)``: the message ``m3``, an actor of its own, so deliveries
  are ordered like tasks;
- ``timer@T``: the ``timer`` actor;
- every fault (``crash:``, ``restart:``, ``drop:``, ``dup:``, ``partition:``,
  a call's ``!fail``, ``!lose_reply``, ``!delay``, ``!repeat`` variant): the
  ``faults`` actor.

The *world* (``timer`` and ``faults``) is not ordered by priority by default:
at each step it goes with the probability the random walk would give it (its
options' weights against the rest), and PCT orders the tasks and messages
otherwise.  As priority actors (``world="actor"``) a top-priority ``faults``
spends every fault budget in the first steps (a crash before anything
happened) and a top-priority ``timer`` fires every timeout before any reply
can arrive; measured over the shipped planted bugs that wasted most runs
(``benchmarks/README.md``).  Either way it is the seed that decides.

``k`` counts only *contested* steps, where two priority actors or more are
enabled: a change point anywhere else could not change the order of anything.
It should be about the number of such steps in a run (points past the end are
wasted); ``dst.explore.strategies`` estimates it unless it is given, and the
strategy's name records it (``pct:d=5,k=41``).

Data choices (a fake's ``sim.choose(label, options)``: every label is
``label:option`` for one ``label`` that is not the kernel's) are drawn
uniformly from the seed: PCT's guarantee is about orderings, and a fake's
answers are not actors.

**When PCT defers to the random walk.**  PCT pays off when a bug needs one
actor to run a long way inside another's window: its priorities keep the
window open however many steps that takes, where a random walk closes it with
probability about one half per step.  When the runs give each contending actor
only a few contested steps (``k < 5 n``, ``n`` the actors that contend), there
is little such way to run, and what bugs need there is fine interleaving,
which a random walk gives and PCT's priorities take away.  Measured on the
shipped planted bugs (``benchmarks/README.md``), every variant tried on the
short ``approval`` races (depths 3 to 8, a random step mixed into every
contested step or into the steps before a write, the world's options as
actors, newly created actors first, runs in bursts) found them less often than
the random walk, and the variants that came closest lost the long-window bugs;
on the replenisher's runs (``k`` from 4 to 5 times ``n``) PCT and the random
walk find most bugs at the same rate, in the first seed or two.  So with ``n``
known (estimated with ``k``), a run of fewer than ``5 n`` contested steps is
scheduled exactly as ``random`` schedules the same seed, and pct is never
worse than the random walk; the strategy's name records ``n``
(``pct:d=5,k=14,n=10``).  Long windows (a check-then-act lock taken after
twelve writes, ``k = 7 n``; an entity's year of checks, ``k = 6.6 n``) stay
PCT's, where it finds in one run what the random walk needs hundreds for.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from ..sim.strategy import RandomWalk

#: The default bug depth: four change points.  Depth 2 is enough for an
#: atomicity violation between two actors, but on the shipped planted bugs
#: (``benchmarks/README.md``, "Strategies") depth 5 found the shallow races
#: between short, similar tasks about 1.5 times as often as depth 3 did (in
#: 1.2-1.4 times as many runs as a random walk, against 2), and the deep ones
#: only about 10% less often (still 3 to 7 times as often as a random walk).
DEFAULT_DEPTH = 5

#: How the world (timers and faults) is scheduled (see the module docstring).
WORLDS = ("weighted", "actor")
DEFAULT_WORLD = "weighted"

#: Label prefixes of the kernel's own options (never a fake's data label).
_KERNEL_HEADS = frozenset({"deliver", "drop", "dup", "crash", "restart", "partition"})
_FAULT_PREFIXES = ("drop:", "dup:", "crash:", "restart:", "partition:")
_CALL_FAULT = re.compile(r"!(fail|lose_reply|delay|repeat)$")
_TIMER = re.compile(r"timer@[0-9]")

#: Contested steps per contending actor below which PCT defers to the random walk.
WALK_BELOW = 5

FAULTS = "faults"
TIMER = "timer"
_WORLD = (FAULTS, TIMER)


def actor_of(label: str) -> str:
    """The actor a scheduling option belongs to (see the module docstring)."""
    if label.startswith(_FAULT_PREFIXES) or _CALL_FAULT.search(label):
        return FAULTS
    if label.startswith("deliver:"):
        return "message " + label[8:].partition("(")[0]
    if _TIMER.match(label):
        return TIMER
    head, at, _ = label.partition("@")
    return head if at else label


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
                 world: str = DEFAULT_WORLD, actors: int | None = None) -> None:
        if depth < 1 or steps < 1 or world not in WORLDS or (actors is not None and actors < 1):
            raise ValueError(f"PCT needs depth >= 1, steps >= 1, actors >= 1 and a world of "
                             f"{WORLDS}, not d={depth}, k={steps}, n={actors}, world={world!r}")
        self.name = (f"pct:d={depth},k={steps}" + ("" if actors is None else f",n={actors}")
                     + ("" if world == DEFAULT_WORLD else f",{world=!s}"))
        #: Short runs of many actors: the random walk of the same seed (module docstring).
        self._walk = (RandomWalk(seed) if actors is not None and steps < WALK_BELOW * actors
                      else None)
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

    @property
    def walks(self) -> bool:
        """Whether this run is the random walk's (see the module docstring)."""
        return self._walk is not None

    def choose(
        self, step: int, labels: Sequence[str], weights: Sequence[float] | None
    ) -> int:
        if self._walk is not None:
            return self._walk.choose(step, labels, weights)
        n = len(labels)
        if n == 1:
            self._of(actor_of(labels[0]))
            return 0
        if is_data(labels):
            return int(self._pick.random() * n)
        actors = [actor_of(label) for label in labels]
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
