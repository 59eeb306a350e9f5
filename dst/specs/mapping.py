"""The ``conformance`` section of a spec's map: how a spec row meets the real code.

``dst specs check`` needs only which constant is which switch.  Comparing the
spec with the code row by row (``dst conformance``) needs more, and the map
file says it (``specs/README.md`` lists the fields):

* ``pairs``: each scenario the spec is compared with, the constants it shares
  (a constant of another scenario, or without a switch there, is held at one
  value), the switches it is run with, the spec invariants compared, and how
  the code is searched (``exploration``: the strategy, the step bound, the
  preemptions; fault budgets are the scenario's own switches, which the row
  sets, so both sides run under the same faults);
* ``actors``: the spec variables that are functions of the actor (a turn) and
  the code's name for each actor, so that a counterexample's step is told as
  "turn-2 check" rather than "Check";
* ``actions``: the code's name of each spec action (the ``action`` field the
  code logs, or a pattern in ``events`` for code that logs none, or a pattern
  in ``choices`` of the scheduler options that take it: a call, a call's fault
  variant, a crash), or null for a spec action the code takes within another
  step, not as one of its own (a call's reply comes back within the call);
* ``follow``: whether a spec counterexample can be replayed on the code by
  steering its scheduler (``dst.specs.steer``).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from dst.errors import UsageError
from dst.scenario import Scenario

from .catalog import Spec, Value, shown
from .tlc import SpecError

#: Strategies the code can be searched with: every schedule, or seeds of one strategy.
STRATEGIES = ("exhaustive", "random", "pct", "swarm")


@dataclass(frozen=True)
class Search:
    """How the code is searched for a pair (the map's ``exploration``)."""

    strategy: str = "exhaustive"
    #: Seeds for random, pct and swarm.
    seeds: int = 200
    #: Decisions per run for exhaustive search (None: the scenario's max_steps).
    max_steps: int | None = None
    preemptions: int = 0
    service_faults: bool = False
    #: Turns each side runs (said in the header; the actor map names that many).
    turns: int | None = None

    def describe(self) -> str:
        if self.strategy == "exhaustive":
            steps = f"at most {self.max_steps} steps, " if self.max_steps else ""
            return f"every schedule ({steps}{self.preemptions} preemptions)"
        return f"{self.strategy} search, {self.seeds} seeds (not a proof)"


@dataclass(frozen=True)
class Pair:
    """One scenario the spec is compared with."""

    scenario: str
    #: Constant -> the values compared (shared constants: all of them unless narrowed).
    values: Mapping[str, tuple[Value, ...]]
    #: Constants the scenario has a switch for (the others are held at one value).
    shared: tuple[str, ...]
    switches: Mapping[str, Any]
    invariants: tuple[str, ...]
    search: Search


@dataclass(frozen=True)
class Conformance:
    spec: Spec
    pairs: tuple[Pair, ...]
    actor_variables: tuple[str, ...]
    #: Spec actor (as TLC prints it) -> the code's name for it.
    actors: Mapping[str, str]
    #: Spec action -> the code's action name (None: no step of the code's own).
    actions: Mapping[str, str | None]
    #: Code action -> a pattern of the log message that means it (code with no ``action``).
    events: Mapping[str, str]
    follow: bool
    #: Code action -> a pattern of the scheduler options that take it (``dst.specs.stories``).
    choices: Mapping[str, str] = field(default_factory=dict)

    def rows(self, pair: Pair, fixed: Mapping[str, Value] | None = None
             ) -> list[dict[str, Value]]:
        """The rows compared for ``pair``: the cross product of its constants' values."""
        names = [c.name for c in self.spec.constants]
        want = fixed or {}
        out = []
        for combo in itertools.product(*(pair.values[n] for n in names)):
            row = dict(zip(names, combo, strict=True))
            if all(row.get(k) == v for k, v in want.items()):
                out.append(row)
        return out

    def config(self, pair: Pair, scenario: Scenario, row: Mapping[str, Value]) -> dict[str, Any]:
        """The scenario config a row stands for: fixed switches, the pair's, the row's."""
        typed: dict[str, Any] = {k: v for k, v in self.spec.fixed_switches.items()
                                 if k in scenario.switches}
        typed.update(pair.switches)
        for c in self.spec.constants:
            if c.name in pair.shared and c.switch is not None:
                typed[c.switch] = c.switch_values[c.values.index(row[c.name])]
        try:
            return scenario.checked_config(typed)
        except UsageError as err:
            raise SpecError(f"{self.spec.name}.map.json: {err}") from None


def _fail(spec: Spec, what: str) -> SpecError:
    return SpecError(f"{spec.name}.map.json: {what}; see specs/README.md (conformance)")


def read(spec: Spec, scenarios: Mapping[str, Scenario]) -> Conformance:
    """The conformance section of ``spec``'s map, checked against the scenarios it names.

    ``scenarios`` maps each scenario name the section uses to the loaded
    scenario (``load_scenarios`` gives them).
    """
    section = spec.doc.get("conformance")
    if not isinstance(section, dict):
        raise UsageError(f"spec {spec.name} has no conformance section in its map file; "
                         "add one (specs/README.md says what it holds)")
    try:
        actors = section.get("actors", {})
        conf = Conformance(
            spec, (), tuple(str(v) for v in actors.get("variables", ())),
            {str(k): str(v) for k, v in actors.get("names", {}).items()},
            {str(k): None if v is None else str(v)
             for k, v in section.get("actions", {}).items()},
            {str(k): str(v) for k, v in section.get("events", {}).items()},
            bool(section.get("follow", False)),
            {str(k): str(v) for k, v in section.get("choices", {}).items()})
        pairs = tuple(_pair(spec, conf, p, scenarios[p["scenario"]]) for p in section["pairs"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise _fail(spec, f"its conformance section is malformed ({type(exc).__name__}: "
                          f"{exc})") from None
    if not pairs:
        raise _fail(spec, "its conformance section names no pairs")
    _check_patterns(spec, conf)
    return replace(conf, pairs=pairs)


def _check_patterns(spec: Spec, conf: Conformance) -> None:
    """Every pattern compiles; every code action a pattern defines is one the spec's
    actions are told as (a typo would silently never match)."""
    told = {v for v in conf.actions.values() if v is not None}
    for section, patterns in (("events", conf.events), ("choices", conf.choices)):
        for action, pattern in patterns.items():
            try:
                re.compile(pattern)
            except re.error as exc:
                raise _fail(spec, f"{section} pattern of {action!r} is not a regular "
                                  f"expression ({exc})") from None
            if action not in told:
                raise _fail(spec, f"{section} names code action {action!r}, which no spec "
                                  f"action is told as (actions: {', '.join(sorted(told))})")
    for entry in conf.actor_variables:
        name, dot, fld = entry.partition(".")
        if not name or (dot and not fld) or "." in fld:
            raise _fail(spec, f"actor variable {entry!r} is neither NAME nor NAME.FIELD")


def scenario_names(spec: Spec) -> list[str]:
    section = spec.doc.get("conformance")
    if not isinstance(section, dict):
        return []
    return [str(p.get("scenario")) for p in section.get("pairs", ()) if isinstance(p, dict)]


def _pair(spec: Spec, conf: Conformance, doc: Mapping[str, Any], scenario: Scenario) -> Pair:
    const_docs = {c["name"]: c for c in spec.doc.get("constants", ())}
    narrowed = {str(k): tuple(v) for k, v in doc.get("constants", {}).items()}
    values: dict[str, tuple[Value, ...]] = {}
    shared = []
    for c in spec.constants:
        own = const_docs.get(c.name, {}).get("scenario")
        mine = c.switch is not None and c.switch in scenario.switches and own in (
            None, scenario.name)
        chosen = narrowed.get(c.name, c.values)
        bad = [v for v in chosen if v not in c.values]
        if bad or not chosen:
            raise _fail(spec, f"constant {c.name} takes {', '.join(shown(v) for v in c.values)}"
                              f", not {bad or 'no value'}")
        if not mine and len(chosen) != 1:
            raise _fail(spec, f"{scenario.name} has no switch for constant {c.name}: hold it "
                              "at one value in the pair's constants")
        if mine:
            shared.append(c.name)
        values[c.name] = tuple(chosen)
    invariants = tuple(doc.get("invariants") or spec.invariants)
    for name in invariants:
        mapped = spec.scenario_invariants.get(name)
        if name not in spec.invariants or mapped is None:
            raise _fail(spec, f"invariant {name!r} is not one the map pairs with a scenario "
                              "invariant")
        if mapped not in scenario.all_checks:
            raise _fail(spec, f"{scenario.name} has no invariant {mapped!r} (the map pairs "
                              f"{name} with it)")
    for key in doc.get("switches", {}):
        if key not in scenario.switches:
            raise _fail(spec, f"{scenario.name} has no switch {key!r}")
    ex = dict(doc.get("exploration", {}))
    search = Search(strategy=str(ex.get("strategy", "exhaustive")),
                    seeds=int(ex.get("seeds", 200)),
                    max_steps=int(ex["max_steps"]) if ex.get("max_steps") else None,
                    preemptions=int(ex.get("preemptions", 0)),
                    service_faults=bool(ex.get("service_faults", False)),
                    turns=int(ex["turns"]) if ex.get("turns") is not None else None)
    if search.strategy not in STRATEGIES:
        raise _fail(spec, f"exploration strategy {search.strategy!r} is none of "
                          f"{', '.join(STRATEGIES)}")
    if search.turns is not None and conf.actors and search.turns != len(conf.actors):
        raise _fail(spec, f"{search.turns} turns, but the actor map names "
                          f"{len(conf.actors)}")
    return Pair(scenario.name, values, tuple(shared), dict(doc.get("switches", {})),
                invariants, search)
