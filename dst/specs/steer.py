"""Stories in one vocabulary, and a spec counterexample replayed on the real code.

A TLC counterexample is a list of states with the name of the action that led
to each; the code's shortest failing run is a list of scheduler decisions with
log events in between.  To put the two side by side both become *stories*:
"turn-1 restore, turn-1 check, turn-1 effect, ...", in the code's words (the
map file names the code's action for each spec action and the code's actor for
each spec actor).  A spec step's actor is the key whose entry changed in the
map's actor variables (``pc[t]`` for the approval turns); a code step is an
event the code logged with that ``action`` field (or whose message, followed by
its fields as ``key=value``, matches one of the map's ``events`` patterns), by
the task that logged it.

:class:`Steer` turns a spec story into a run of the real code.  It is a
scheduler strategy, like :class:`dst.explore.follow.Follow`, but it follows
*actions*, not labels: at each decision it runs the task of the actor whose
spec step is next, or, while that actor has no task yet, the plumbing that
brings one (a user's send, a delivery, a timer), never another actor's task.
A step the code takes on its own (a turn whose restore and check need only one
choice point does both in one step) counts as taken; a step the code cannot
take (the actor's task is blocked, by a gate the spec does not have) is a
*departure*, and from there the strategy takes the calm default, as ``Follow``
does.  The run is an ordinary one: its trace replays with ``dst replay``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dst.explore.follow import default_index, is_fault
from dst.runner.single import RunResult
from dst.scenario import Scenario
from dst.sim.faults import FaultPlan
from dst.sim.kernel import Sim
from dst.sim.run import run_sims

from .mapping import Conformance
from .tla_values import changed_keys
from .tlc import Outcome

#: The code's name of an agent crash (a ``crash:`` fault option).
CRASH = "crash"


@dataclass(frozen=True)
class Step:
    """One step of a story: who did what, in the code's words."""

    actor: str | None
    action: str

    def __str__(self) -> str:
        return f"{self.actor} {self.action}" if self.actor else self.action


def tell(steps: Iterable[Step]) -> str:
    return ", ".join(str(s) for s in steps) or "(no protocol action)"


def spec_story(conf: Conformance, outcome: Outcome) -> list[Step]:
    """The counterexample's steps after ``Init``, in the code's vocabulary."""
    story = []
    states = outcome.states_seen
    for i, action in enumerate(outcome.actions[1:], start=1):
        keys: set[Any] = set()
        if i < len(states):
            for var in conf.actor_variables:
                keys |= changed_keys(states[i - 1].get(var), states[i].get(var))
        actor = None
        if len(keys) == 1:
            key = str(next(iter(keys)))
            actor = conf.actors.get(key, key)
        story.append(Step(actor, conf.actions.get(action, action)))
    return story


def _fields(rec: Sequence[Any]) -> dict[str, Any]:
    fields = rec[5] if len(rec) > 5 else {}
    if isinstance(fields, str):
        try:
            fields = json.loads(fields)
        except ValueError:
            return {}
    return fields if isinstance(fields, dict) else {}


def task_actor(task: str) -> str:
    """``agent/turn-2`` -> ``turn-2``: the task's own name, without its process."""
    return task.rsplit("/", 1)[-1]


def code_step(conf: Conformance, rec: Sequence[Any]) -> Step | None:
    """The story step a kernel record is, if it is one."""
    kind = rec[0]
    if kind == "fault" and rec[3] == "crash":
        return Step(None, CRASH)
    if kind != "event":
        return None
    vocabulary = set(conf.actions.values())
    fields = _fields(rec)
    action = fields.get("action")
    if action not in vocabulary:
        text = " ".join([str(rec[4]), *(f"{k}={v}" for k, v in sorted(fields.items()))])
        action = next((name for name, pattern in conf.events.items()
                       if re.search(pattern, text)), None)
    if action is None:
        return None
    actor = task_actor(str(rec[3]))
    return Step(actor if actor in conf.actors.values() else None, action)


def code_story(conf: Conformance, records: Iterable[Sequence[Any]]) -> list[Step]:
    return [s for s in (code_step(conf, r) for r in records) if s is not None]


def label_actor(label: str) -> str | None:
    """The task an option runs (``agent/turn-1@agent-db.get(...)`` -> ``turn-1``)."""
    head, at, _ = label.partition("@")
    if not at or "/" not in head or head.startswith(("deliver:", "timer")):
        return None
    return task_actor(head)


@dataclass
class Steer:
    """A strategy that makes the code take a spec story's steps in its order."""

    conf: Conformance
    story: list[Step]
    name: str = "spec"
    sim: Sim | None = None
    done: list[bool] = field(default_factory=list)
    #: Code steps the story did not ask for at that point, in order.
    extra: list[Step] = field(default_factory=list)
    #: (spec step index, decision) where the code could not take the story's next step.
    departures: list[tuple[int, int]] = field(default_factory=list)
    _seen: int = 0

    def __post_init__(self) -> None:
        self.done = [False] * len(self.story)

    @property
    def followed(self) -> int:
        return sum(self.done)

    def _catch_up(self) -> None:
        assert self.sim is not None
        records = self.sim.records
        for rec in records[self._seen:]:
            step = code_step(self.conf, rec)
            if step is not None:
                self._match(step)
        self._seen = len(records)

    def _match(self, step: Step) -> None:
        for i, want in enumerate(self.story):
            if not self.done[i] and want.actor == step.actor:
                if want.action == step.action:
                    self.done[i] = True
                    return
                break
        self.extra.append(step)

    def _target(self) -> int | None:
        return next((i for i, d in enumerate(self.done) if not d), None)

    def choose(self, step: int, labels: Sequence[str], weights: Sequence[float] | None) -> int:
        self._catch_up()
        target = self._target()
        if target is None:
            return default_index(labels, weights)
        want = self.story[target]
        if want.action == CRASH:
            crash = [j for j, label in enumerate(labels) if label.startswith("crash:")]
            if crash:
                return crash[0]
        else:
            own = [j for j, label in enumerate(labels)
                   if want.actor is not None and label_actor(label) == want.actor
                   and not is_fault(label)]
            if own:
                return own[0]
            actors = set(self.conf.actors.values())
            plumbing = [j for j, label in enumerate(labels)
                        if label_actor(label) not in actors and not is_fault(label)]
            if plumbing:
                sub = [labels[j] for j in plumbing]
                w = [weights[j] for j in plumbing] if weights is not None else None
                return plumbing[default_index(sub, w)]
        if not self.departures or self.departures[-1][0] != target:
            self.departures.append((target, step))
        return default_index(labels, weights)


@dataclass
class Followed:
    """A spec story run on the code."""

    result: RunResult
    steer: Steer

    @property
    def story(self) -> list[Step]:
        return code_story(self.steer.conf, self.result.sim.records)

    def departure(self) -> str | None:
        """The first spec step the code could not take when the story asked for it."""
        if not self.steer.departures:
            return None
        index, decision = self.steer.departures[0]
        return (f"at spec step {index + 1} ({self.steer.story[index]}) the code could not "
                f"take it (decision {decision})")


def follow(conf: Conformance, scenario: Scenario, config: dict[str, Any], plan: FaultPlan,
           story: list[Step], *, max_steps: int, seed: int = 0) -> Followed:
    """Run ``scenario`` once, steered through ``story``; every check of it runs."""
    steer = Steer(conf, story)
    sim = Sim(seed, steer, faults=plan, max_steps=max_steps)
    steer.sim = sim
    out: list[Sim] = []
    run_sims([(sim, lambda s: scenario.build(s, config))], out.append)
    steer._catch_up()  # the events of the last step, after which nothing was chosen
    result = RunResult(
        seed=seed, verdict=sim.verdict, violated=list(sim.violated), steps=sim.step,
        virtual_time=sim.now, ended=sim.ended or "quiescent", sim=sim,
        scenario=scenario.name, config=dict(config), strategy=steer.name,
        divergence=str(sim.divergence) if sim.divergence else None)
    return Followed(result, steer)
