"""``Follow``: replay recorded choices where they still apply, and go the calm way elsewhere.

``Replay`` is strict: the first step whose enabled options differ from the
recorded ones is a divergence, and the run stops.  That is right for checking
that a trace reproduces, and useless for asking "what if this one choice had been
different?": every later step would diverge.  ``Follow`` answers that question.
At step *n* it looks at the label recorded at position *n*; if that option is
enabled now it takes it, and otherwise it takes a deterministic default.  The
shrinker mutates the recorded sequence (deletes a stretch, lowers a choice,
drops a fault) and runs it under ``Follow``; a regression mode can run an old
trace against changed code the same way.

Labels carry names that history hands out: a message's id (``m3`` is the third
message sent), a timer's deadline, and the numbers a runtime gives the tasks it
starts (``turn-3`` is the third turn).  A run without an early duplicate numbers
every later message and turn one lower, and a recording that says
``deliver:m3(conn-2->agent)`` still means "deliver the message on conn-2->agent".
So when the exact label is not enabled, an option that differs from it only in a
message id or a deadline is taken (the same kind of message option on the same
route, or the next timer), and failing that one that differs from it only in its
numbers; the first such option if several are.

The default is the *calm* option, because a stretch of the story the recording
no longer covers should not invent trouble of its own: not a fault (``crash:``,
``drop:``, ``dup:``, ``partition:``, a service call's ``!fail``, ``!lose_reply``,
``!delay``, ``!repeat`` variant, a timer's ``!slow``), not a timer while something else
can run, and
among the rest the heaviest option (the kernel weighs the held task trio queued
first above the ones that would preempt it, so the default spends
no preemption), the first one on a tie.  Options are listed in a stable order by
the kernel, so the default is a function of the labels and weights alone.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

#: Prefixes of the kernel's fault options (process and message faults, partitions).
FAULT_PREFIXES = ("crash:", "drop:", "dup:", "partition:")
#: A service call's fault variants: ``P/task@call:svc.op!kind``; a timer firing while
#: other work could run: ``timer@T!slow``.
_CALL_FAULT = re.compile(r"@call:[^!]*!(fail|lose_reply|delay|repeat)$|^timer@[^!]*!slow$")

#: What one recorded decision may be given as: its chosen label, ``None`` (take
#: the default there), or ``(enabled, chosen)`` as ``Trace.decisions`` lists it.
Recorded = str | None | tuple[Sequence[str], int]


#: Names history hands out in a label: message ids (``deliver:m3(``) and timer deadlines.
_NAMED = re.compile(
    r"(?:(?<=^deliver:)|(?<=^drop:)|(?<=^dup:))m\d+(?=\()|(?<=^timer@)[0-9.]+(?=(?:!slow)?$)")
_NUMBER = re.compile(r"\d+")


def shape(label: str) -> str:
    """``label`` without its message id or timer deadline."""
    return _NAMED.sub("#", label)


def numbers(label: str) -> str:
    """``label`` without any of its numbers (``agent/turn-#@run``)."""
    return _NUMBER.sub("#", label)


def is_fault(label: str) -> bool:
    """Whether choosing ``label`` injects a fault."""
    return label.startswith(FAULT_PREFIXES) or _CALL_FAULT.search(label) is not None


def is_timer(label: str) -> bool:
    """Whether choosing ``label`` moves virtual time to the next deadline."""
    return label.startswith("timer@")


def without_fault(label: str, enabled: Sequence[str]) -> str | None:
    """The option ``label`` is a fault variant of, when it is enabled beside it: the
    delivery of a message dropped or duplicated, the plain service call; else None."""
    plain: str | None = None
    if label.startswith(("drop:", "dup:")):
        plain = "deliver:" + label.partition(":")[2]
    elif _CALL_FAULT.search(label) is not None:
        plain = label.rpartition("!")[0]
    return plain if plain is not None and plain in enabled else None


def default_index(labels: Sequence[str], weights: Sequence[float] | None) -> int:
    """The calm option: the heaviest that is neither a fault nor a timer (first on a tie);
    else the first timer; else the first option."""
    best = -1
    for i, label in enumerate(labels):
        if is_fault(label) or is_timer(label):
            continue
        if best < 0 or (weights is not None and weights[i] > weights[best]):
            best = i
    if best >= 0:
        return best
    for i, label in enumerate(labels):
        if is_timer(label):
            return i
    return 0


def chosen_labels(decisions: Sequence[Recorded]) -> list[str | None]:
    """The label chosen at each recorded position (``None`` where the default is asked)."""
    out: list[str | None] = []
    for d in decisions:
        if d is None or isinstance(d, str):
            out.append(d)
        else:
            enabled, chosen = d
            out.append(enabled[chosen])
    return out


class Follow:
    """Takes the label recorded at each step's position when it is enabled (or one that
    differs from it only in the names history hands out), else the calm default.

    ``followed`` and ``defaulted`` count the steps of each kind, so that a caller
    can tell how much of the recording still applied.  Never raises: a run under
    ``Follow`` always goes to its end.
    """

    def __init__(self, decisions: Sequence[Recorded], *, name: str = "follow") -> None:
        self.name = name
        self._labels = chosen_labels(decisions)
        self.followed = 0
        self.defaulted = 0

    def choose(
        self, step: int, labels: Sequence[str], weights: Sequence[float] | None
    ) -> int:
        i = step - 1
        if i < len(self._labels):
            want = self._labels[i]
            if want is not None:
                for j, label in enumerate(labels):
                    if label == want:
                        self.followed += 1
                        return j
                for fuzz in (shape, numbers):
                    like = fuzz(want)
                    if like != want:
                        for j, label in enumerate(labels):
                            if fuzz(label) == like:
                                self.followed += 1
                                return j
        self.defaulted += 1
        return default_index(labels, weights)
