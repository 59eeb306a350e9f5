"""A spec counterexample replayed on the real code: the scheduler steered through its steps.

:class:`Steer` turns a spec story (:mod:`dst.specs.stories`) into a run of the
real code.  It is a scheduler strategy, like :class:`dst.explore.follow.Follow`,
but it follows *actions*, not labels.  At each decision it looks at the story's
next step not yet taken:

* when the map says which options take that step (``choices``), and one of
  them is enabled for the step's actor, it takes it.  One option may take
  several steps (a call to the supplier is the request leaving, the supplier
  taking it, and its reply, or with the ``!lose_reply`` fault, the reply lost
  and the step timing out), so among the options that take the step it takes
  the one whose steps go furthest along the actor's next steps in the story,
  the calm one (no fault) on a tie.  A fault is injected only where the story
  asks for a step only the fault takes;
* otherwise it runs the task of the step's actor, or, while that actor has no
  task yet or its task waits, the plumbing that brings it on (a user's send, a
  delivery, a timer, even one fired early as a slow fault, another task that is
  no actor), never another actor's
  task, a fault, or an option that would take a step the story does not ask
  for now.

A step the code takes on its own (a turn whose restore and check need only one
choice point does both in one step) counts as taken; a step the code cannot
take (the actor's task is blocked, by a gate the spec does not have) is a
*departure*, and from there the strategy takes the calm default, as ``Follow``
does.  The run is an ordinary one: its trace replays with ``dst replay``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dst.explore.follow import default_index, is_fault, is_timer
from dst.runner.single import RunResult
from dst.scenario import Scenario
from dst.sim.faults import FaultPlan
from dst.sim.kernel import Sim
from dst.sim.run import run_sims

from .mapping import Conformance
from .stories import (
    CRASH,
    Step,
    code_steps,
    code_story,
    label_actor,
    option_actions,
    spec_story,
    task_actor,
    tell,
)

__all__ = ["CRASH", "Followed", "Steer", "Step", "code_story", "follow", "label_actor",
           "spec_story", "task_actor", "tell"]


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
            for step in code_steps(self.conf, rec):
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

    def _upcoming(self, target: int) -> list[str]:
        """The actions of the target's actor still to come, the target's first."""
        actor = self.story[target].actor
        return [s.action for i, s in enumerate(self.story)
                if i >= target and not self.done[i] and s.actor == actor]

    def _option(self, target: int, labels: Sequence[str]) -> int | None:
        """The enabled option that takes the target step and goes furthest along its
        actor's story (the calm one on a tie), if the map names options for it."""
        want = self.story[target]
        upcoming = self._upcoming(target)
        best: tuple[int, bool] | None = None
        chosen = None
        for j, label in enumerate(labels):
            actions = option_actions(self.conf, label)
            if not actions or actions[0] != want.action:
                continue
            if want.action != CRASH and label_actor(label) != want.actor:
                continue
            along = 0
            for took, asked in zip(actions, upcoming, strict=False):
                if took != asked:
                    break
                along += 1
            score = (along, not is_fault(label))
            if best is None or score > best:
                best, chosen = score, j
        return chosen

    def _quiet(self, label: str) -> bool:
        """An option the steer may take on the way: no fault, and no step of a story.

        A timer that fires while other work could run (``timer@T!slow``) counts as
        plumbing, not as a fault: a spec has no time, and its stories interleave
        actors whatever their work would take (a second turn restoring while the
        first is still running needs the user's next message to come in early).
        """
        return (not is_fault(label) or is_timer(label)) and not option_actions(self.conf, label)

    def choose(self, step: int, labels: Sequence[str], weights: Sequence[float] | None) -> int:
        self._catch_up()
        target = self._target()
        if target is None:
            return default_index(labels, weights)
        want = self.story[target]
        chosen = self._option(target, labels)
        if chosen is not None:
            return chosen
        if want.actor is not None:
            own = [j for j, label in enumerate(labels)
                   if label_actor(label) == want.actor and self._quiet(label)]
            if own:
                return own[0]
        actors = set(self.conf.actors.values())
        plumbing = [j for j, label in enumerate(labels)
                    if label_actor(label) not in actors and self._quiet(label)]
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

    def unfinished(self) -> str | None:
        """Why the story's steps were not all taken, when they were not."""
        departed = self.departure()
        if departed is not None:
            return departed
        index = self.steer._target()
        if index is None:
            return None
        at = f"spec step {index + 1} ({self.steer.story[index]})"
        if self.result.violated:
            return f"the run stopped at {', '.join(self.result.violated)} before {at}"
        return f"the run ended ({self.result.ended}) before {at}"


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
