"""What a run records about the code under test, and who did it.

Events (structlog), faults and refusals land in the run's records stamped with
the step and the virtual time; the actor of each is the label of the task that
caused it.  Once a run has stopped at a violation nothing more is recorded but
another verdict: what its tasks do while they unwind (a ``finally`` that logs, a
refused call) is not part of its story, which ends with the violation.  Tasks
are labelled in the order they start (``p``, ``p/worker``, ``p/worker#2``):
stable and readable, never a memory address.
"""

from __future__ import annotations

import json
from typing import Any

import trio.lowlevel as ll

from .blocked import task_name
from .process import Incarnation, Process
from .state import SimState
from .trio_internals import RUN_CONTEXT as _RUN_CONTEXT


class Recording(SimState):
    """The part of :class:`~dst.sim.kernel.Sim` that records events and labels tasks."""

    def logged(self, method: str, fields: dict[str, Any]) -> None:
        """Record a structlog event: ``fields`` holds its ``event`` and context.

        ``event(actor(), ...)`` without their frames: the recording half of
        every log call of the code under test.
        """
        self.logged_text(method, str(fields.pop("event", "")), fields)

    def logged_text(self, method: str, text: str, fields: dict[str, Any]) -> None:
        """``logged`` for an event whose text is apart from its ``fields`` (which hold
        only its context): what a plain ``structlog.get_logger()`` call lands in."""
        if self._stopping and self.ended == "violation":
            return  # the run is over: the verdict is the last thing its story tells
        if method != "info" and method != "msg":
            fields["level"] = method
        try:  # trio's current task, if any (``ll.current_task()`` without its frame)
            task = _RUN_CONTEXT.task
        except AttributeError:
            task = None
        actor = "dst" if task is None else self._task_labels.get(task)
        if actor is None:
            inc = self._incarnation_of.get(task)
            actor = inc.name if inc is not None else "dst"
        for v in fields.values():
            if type(v) not in _IMMUTABLE:
                frozen: Any = canonical_fields(fields)
                break
        else:
            frozen = fields
        clock = self._clock
        self.records.append(("event", self.step, clock.now if clock is not None else 0.0,
                             actor, text, frozen))

    def event(self, actor: str, event: str, fields: dict[str, Any]) -> None:
        """Record a runtime event (the structlog processor lands here)."""
        if self._stopping and self.ended == "violation":
            return
        self.records.append(
            ("event", self.step, self.now, actor, event, canonical_fields(fields))
        )

    def fault(self, what: str, target: str, detail: str = "") -> None:
        if self._stopping and self.ended == "violation":
            return  # a refusal while the run's tasks unwind: not part of its story
        clock = self._clock  # ``now``, without the property's call
        self.records.append(("fault", self.step, clock.now if clock is not None else 0.0,
                             what, target, detail))

    def actor(self) -> str:
        """Who is running now: the current task's label, or its process's name."""
        try:
            task = ll.current_task()
        except RuntimeError:
            return "dst"
        label = self._task_labels.get(task)
        if label is not None:
            return label
        inc = self._incarnation_of.get(task)  # its owner, not its context's (task_spawned)
        return inc.name if inc is not None else "dst"

    def release_labels(self, proc: Process) -> None:
        """A restarted process's new tasks take the labels its dead ones had."""
        name = proc.name
        below = (name + "/", name + "#")
        owner = self._label_owner
        gone = []  # a loop, not a comprehension: cheaper for the few labels a run has
        for label in owner:
            if label == name or label.startswith(below):
                gone.append(label)
        for label in gone:
            self._task_labels.pop(owner.pop(label), None)

    def _label_task(self, task: ll.Task, inc: Incarnation) -> str:
        proc = inc.process
        if task is inc.main_task:
            base = proc.name
        else:
            base = f"{proc.name}/{task_name(task)}"
        label, n = base, 1
        while label in self._label_owner and self._label_owner[label] is not task:
            n += 1
            label = f"{base}#{n}"
        self._label_owner[label] = task
        self._task_labels[task] = label
        return label


_IMMUTABLE = frozenset((int, str, float, bool, type(None)))


def canonical_fields(fields: dict[str, Any]) -> Any:
    """Snapshot an event's fields now, so a later mutation cannot leak into the trace.

    Scalar-only fields (the common case) are kept as a dict, which is cheap;
    anything else is frozen as canonical JSON text.
    """
    for v in fields.values():
        if type(v) not in _IMMUTABLE:
            break
    else:
        return fields
    return json.dumps(
        fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr
    )
