"""Which option the exhaustive search tries first at a decision.

The search runs every option at every decision (less those its sleep sets
skip), so the order changes what it costs, never what it finds: in any order
every state is reached (up to the names history hands out: two messages sent
in the other order swap their ids), every check gets the same verdict, and a
violation's shortest schedule is as short.  What the order changes is how many
runs it takes.

With sleep sets, an option taken first and then put to sleep in its siblings'
branches stays asleep down every path of steps independent of it, and each
such path ends in one run; an option taken last is an alternative at every
state of its siblings' branches, and each alternative is a run of its own.  So
a step that finishes something (a reply delivered to a user who then waits, a
last write) is best taken first, and a step that opens a long stretch of work
(a message that starts a turn) last: a short chain explored first is asleep
along the long one, while the long one explored first leaves the short one to
be interleaved at each of its steps.

What an option opens is learnt as the search goes: for each kind of step (its
label with every number taken out: ``deliver:m3(agent->conn-1)`` and
``deliver:m7(agent->conn-1)`` are one kind), the mean number of options its
step added to the enabled ones.  Options are tried by that mean, least first;
a kind not seen yet counts as adding none; ties keep the kernel's order.  The
order is a function of the search's own history, so a search is as
deterministic as before.
"""

from __future__ import annotations

from collections.abc import Sequence

from .follow import numbers


class Ordering:
    """What each kind of step opened so far in one search, and the order it implies."""

    def __init__(self) -> None:
        #: Kind of step -> [options its steps added, steps seen].
        self._opened: dict[str, list[int]] = {}
        #: Label -> its kind.
        self._kinds: dict[str, str] = {}

    def _kind(self, label: str) -> str:
        kind = self._kinds.get(label)
        if kind is None:
            kind = self._kinds[label] = numbers(label)
        return kind

    def learn(self, taken: str, before: Sequence[str], after: Sequence[str]) -> None:
        """``taken`` led from a decision among ``before`` to one among ``after``."""
        had = set(before)
        added = sum(1 for label in after if label not in had)
        seen = self._opened.setdefault(self._kind(taken), [0, 0])
        seen[0] += added
        seen[1] += 1

    def order(self, labels: Sequence[str]) -> tuple[int, ...]:
        """The indices of ``labels`` in the order to try them."""
        if len(labels) < 2:
            return tuple(range(len(labels)))
        opened = self._opened
        kind = self._kind

        def cost(i: int) -> tuple[float, int]:
            seen = opened.get(kind(labels[i]))
            return (seen[0] / seen[1] if seen else 0.0, i)

        return tuple(sorted(range(len(labels)), key=cost))
