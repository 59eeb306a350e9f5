"""Stories in one vocabulary: a TLC counterexample and a run of the code, in the code's words.

A TLC counterexample is a list of states with the name of the action that led
to each; a run of the code is a list of scheduler decisions with log events in
between.  To put the two side by side both become *stories*: "turn-1 restore,
turn-1 check, turn-1 effect, ...", in the code's words (the map file names the
code's action for each spec action and the code's actor for each spec actor).

A spec step's actor is the key whose entry changed in the map's actor
variables: ``pc[t]`` for the approval turns, or, for a variable that is a set,
the member that came or went (``active``), or, written ``net.po``, the ``po``
field of the record that came or went.  A crash is of the whole process and is
told without an actor.  A spec action the map tells as null is left out:
the code takes it within another step (a call's reply comes back within the
call), not as one of its own.

A code step is one of:

* an event the code logged with that ``action`` field, or whose message,
  followed by its fields as ``key=value``, matches one of the map's ``events``
  patterns; its actor is the task that logged it, or the pattern's named group
  ``actor`` when it has one (the entity logs "workflow started ... wf=...r2"
  for replenishment ``r2``);
* a scheduler option the code took whose label matches one of the map's
  ``choices`` patterns (``replenisher/r1@call:supplier.order!lose_reply``);
  one option may take several steps (a call is the request leaving, the
  supplier taking it, and its reply or its loss), told in the order the map
  lists them; its actor is the task the option runs.  A crash (a ``crash:``
  option) is one without a pattern.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .tla_values import changed_keys
from .tlc import Outcome

if TYPE_CHECKING:
    from .mapping import Conformance

#: The code's name of an agent crash.
CRASH = "crash"
#: The options that crash a process, when the map does not say otherwise.
CRASH_OPTION = "^crash:"


@dataclass(frozen=True)
class Step:
    """One step of a story: who did what, in the code's words."""

    actor: str | None
    action: str

    def __str__(self) -> str:
        return f"{self.actor} {self.action}" if self.actor else self.action


def tell(steps: Iterable[Step]) -> str:
    return ", ".join(str(s) for s in steps) or "(no protocol action)"


# -- the spec's side -----------------------------------------------------------------------


def _members(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (frozenset, tuple, list)) else []


def changed_actors(entry: str, before: Mapping[str, Any], after: Mapping[str, Any]) -> set[Any]:
    """The actors whose part of one actor variable changed between two states.

    ``entry`` is a variable name, or ``name.field`` for a set of records: the
    field of each record that came or went.  A variable that is a set gives its
    members that came or went; any other (a function, a sequence) the keys
    whose entries differ.
    """
    name, dot, fld = entry.partition(".")
    a, b = before.get(name), after.get(name)
    if dot or isinstance(a, frozenset) or isinstance(b, frozenset):
        ma, mb = _members(a), _members(b)
        moved = [m for m in ma if m not in mb] + [m for m in mb if m not in ma]
        if not dot:
            return set(moved)
        return {m[fld] for m in moved if isinstance(m, dict) and fld in m}
    return changed_keys(a, b)


def spec_story(conf: Conformance, outcome: Outcome) -> list[Step]:
    """The counterexample's steps after ``Init``, in the code's vocabulary."""
    story = []
    states = outcome.states_seen
    for i, action in enumerate(outcome.actions[1:], start=1):
        told = conf.actions.get(action, action)
        if told is None:
            continue  # the code takes it within another step
        keys: set[Any] = set()
        if i < len(states) and told != CRASH:
            for var in conf.actor_variables:
                keys |= changed_actors(var, states[i - 1], states[i])
        actor = None
        if len(keys) == 1:
            key = str(next(iter(keys)))
            actor = conf.actors.get(key, key)
        story.append(Step(actor, told))
    return story


# -- the code's side -----------------------------------------------------------------------


def task_actor(task: str) -> str:
    """``agent/turn-2`` -> ``turn-2``: the task's own name, without its process."""
    return task.rsplit("/", 1)[-1]


def label_actor(label: str) -> str | None:
    """The task an option runs (``agent/turn-1@agent-db.get(...)`` -> ``turn-1``)."""
    head, at, _ = label.partition("@")
    if not at or "/" not in head or head.startswith(("deliver:", "timer")):
        return None
    return task_actor(head)


def choices(conf: Conformance) -> Mapping[str, str]:
    """Code action -> the pattern of the options that take it: the map's ``choices``,
    and a crash as a ``crash:`` option unless the map tells a crash otherwise."""
    if CRASH in conf.choices or CRASH in conf.events:
        return conf.choices
    return {**conf.choices, CRASH: CRASH_OPTION}


def option_actions(conf: Conformance, label: str) -> list[str]:
    """The code actions taking option ``label`` is, in the order the map lists them."""
    return [action for action, pattern in choices(conf).items() if re.search(pattern, label)]


def _known(conf: Conformance, actor: str | None) -> str | None:
    return actor if actor in conf.actors.values() else None


def option_steps(conf: Conformance, label: str) -> list[Step]:
    """The story steps taking option ``label`` is (none for most options)."""
    actions = option_actions(conf, label)
    actor = _known(conf, label_actor(label))
    return [Step(None if a == CRASH else actor, a) for a in actions]


def _fields(rec: Sequence[Any]) -> dict[str, Any]:
    fields = rec[5] if len(rec) > 5 else {}
    if isinstance(fields, str):
        try:
            fields = json.loads(fields)
        except ValueError:
            return {}
    return fields if isinstance(fields, dict) else {}


def event_step(conf: Conformance, rec: Sequence[Any]) -> Step | None:
    """The story step a logged event is, if it is one."""
    fields = _fields(rec)
    action = fields.get("action")
    actor: str | None = task_actor(str(rec[3]))
    if action is None or action not in set(conf.actions.values()):
        action = None
        text = " ".join([str(rec[4]), *(f"{k}={v}" for k, v in sorted(fields.items()))])
        for name, pattern in conf.events.items():
            found = re.search(pattern, text)
            if found:
                action = name
                if "actor" in found.re.groupindex and found.group("actor"):
                    actor = found.group("actor")
                break
    if action is None:
        return None
    return Step(_known(conf, actor), action)


def code_steps(conf: Conformance, rec: Sequence[Any]) -> list[Step]:
    """The story steps a kernel record is (most records are none)."""
    kind = rec[0]
    if kind == "decision":
        if rec[3] != "schedule":
            return []  # a data choice of a fake (how many days a manager takes)
        labels, index = rec[4], rec[5]
        return option_steps(conf, str(labels[index]))
    if kind == "event":
        step = event_step(conf, rec)
        return [step] if step is not None else []
    return []


def code_story(conf: Conformance, records: Iterable[Sequence[Any]]) -> list[Step]:
    return [s for r in records for s in code_steps(conf, r)]
