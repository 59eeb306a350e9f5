"""The strategies ``dst run --strategy`` knows, by name: ``random``, ``pct``, ``swarm``.

A strategy travels to the worker processes as its *spec*, a short string
(``random``, ``swarm``, ``pct:d=5``, ``pct:d=2,k=150``), because a spec is what
a results database can key runs by and what a worker can rebuild without
pickling code.  :func:`explore` turns a spec into an :class:`Exploration`: the
strategy for each seed, and, for strategies that vary the world as well as the
schedule (``swarm``), the fault plan for each seed.

A run is a pure function of the scenario, its config, the seed and the spec:
``pct`` without ``k`` estimates it, and the number ``n`` of actors that
contend, from runs of the scenario that are themselves fixed by the scenario
and config, and records what it used in every trace header
(``pct:d=5,k=41,n=9``).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from ..scenario import Scenario
from ..sim.faults import FaultPlan
from ..sim.strategy import RandomWalk, Strategy
from .pct import DEFAULT_DEPTH as DEFAULT_DEPTH
from .pct import DEFAULT_WORLD, PCT, WORLDS
from .swarm import SwarmWalk, swarm_plan

#: The strategy names, in the order help texts list them.
NAMES = ("random", "pct", "swarm")

#: Seeds whose runs estimate a run's length for ``pct`` without ``k``.
ESTIMATE_RUNS = 5
#: The smallest ``k`` an estimate gives: a scenario whose runs hardly contest
#: still leaves PCT some steps to place its change points in.
MIN_STEPS = 10
#: Upper bounds that keep a mistyped spec from meaning something absurd.
MAX_DEPTH = 20
MAX_STEPS = 1_000_000


@dataclass(frozen=True)
class Exploration:
    """How the seeds of one run are explored."""

    #: The spec, as the run key records it.
    spec: str
    strategy: Callable[[int], Strategy]
    #: The fault plan of each seed from the scenario's (None: the scenario's own).
    plan: Callable[[int, FaultPlan], FaultPlan] | None = None


_PCT = re.compile(r"pct(?::(?P<params>.*))?")


def parse(spec: str, *, depth: int | None = None, steps: int | None = None) -> str:
    """``spec`` checked and in its normal form; ``depth``/``steps`` fill in PCT's.

    ``pct`` becomes ``pct:d=5`` (``k`` and ``n`` estimated per scenario and
    config), and ``--pct-depth``/``--pct-steps`` land in the spec, so that the
    results database keeps runs with other parameters apart.  ``n=`` (the
    actors that contend) is what lets PCT defer to the random walk on short
    runs; a spec that gives ``k`` without it is PCT throughout.
    ``pct:...,world=actor`` schedules timers and faults as priority actors too
    (``dst.explore.pct``).  Raises ``UsageError`` with the names known.
    """
    text = spec.strip()
    m = _PCT.fullmatch(text)
    if m is None:
        if depth is not None or steps is not None:
            raise UsageError("--pct-depth and --pct-steps go with --strategy pct")
        if text in NAMES:
            return text
        close = difflib.get_close_matches(text, NAMES, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise UsageError(f"unknown strategy {spec!r}; {hint}strategies: {', '.join(NAMES)}")
    params = _params(m.group("params") or "", spec)
    d = depth if depth is not None else int(params.get("d", DEFAULT_DEPTH))
    k = steps if steps is not None else params.get("k")
    if not 1 <= d <= MAX_DEPTH:
        raise UsageError(f"PCT depth {d} is out of range; give 1..{MAX_DEPTH} (e.g. 3)")
    if k is not None and not 1 <= int(k) <= MAX_STEPS:
        raise UsageError(f"PCT steps {k} is out of range; give 1..{MAX_STEPS:,} (or leave it "
                         "out to estimate it)")
    n = params.get("n")
    if n is not None and not 1 <= int(n) <= MAX_STEPS:
        raise UsageError(f"PCT actors {n} is out of range; give 1..{MAX_STEPS:,} (or leave it "
                         "out to estimate it)")
    world = params.get("world", DEFAULT_WORLD)
    return (f"pct:d={d}" + (f",k={k}" if k is not None else "")
            + (f",n={n}" if n is not None else "")
            + (f",world={world}" if world != DEFAULT_WORLD else ""))


def _params(text: str, spec: str) -> dict[str, int | str]:
    out: dict[str, int | str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, _, value = (x.strip() for x in part.partition("="))
        if key in ("d", "k", "n") and value.isdigit():
            out[key] = int(value)
        elif key == "world" and value in WORLDS:
            out[key] = value
        else:
            raise UsageError(f"strategy {spec!r}: PCT takes d=DEPTH, k=STEPS, n=ACTORS and "
                             f"world={'|'.join(WORLDS)} (e.g. pct:d=3,k=200)")
    return out


def explore(spec: str, scenario: Scenario, config: Mapping[str, Any]) -> Exploration:
    """The strategy (and fault plan) of each seed for ``spec`` on this scenario and config."""
    spec = parse(spec)
    if spec == "random":
        return Exploration(spec, RandomWalk)
    if spec == "swarm":
        return Exploration(spec, SwarmWalk, swarm_plan)
    params = _params(spec.partition(":")[2], spec)
    depth = int(params["d"])
    world = str(params.get("world", DEFAULT_WORLD))
    given = params.get("n")
    actors: int | None = int(given) if given is not None else None
    if params.get("k"):
        steps = int(params["k"])
    else:
        steps, counted = estimate(scenario, config, world)
        actors = actors if actors is not None else counted
    return Exploration(spec, lambda seed: PCT(seed, depth, steps, world, actors))


#: Estimates made in this process: (scenario name, its id, config, world) ->
#: (scenario, k, n).  The scenario is kept with its estimate so that its id cannot
#: be reused by another.
_ESTIMATES: dict[tuple[str, int, str, str], tuple[Scenario, int, int]] = {}


def estimate_steps(scenario: Scenario, config: Mapping[str, Any],
                   world: str = DEFAULT_WORLD) -> int:
    """PCT's ``k`` for this scenario and config (see :func:`estimate`)."""
    return estimate(scenario, config, world)[0]


def estimate(scenario: Scenario, config: Mapping[str, Any],
             world: str = DEFAULT_WORLD) -> tuple[int, int]:
    """PCT's ``k`` and ``n`` for this scenario and config: the most contested steps of
    a few runs, and the most actors that contended in one of them.

    The runs are PCT's own with no change point (``d=1``: priorities alone), so
    they count what ``k`` counts, steps where two actors or more compete, on the
    kind of schedule PCT makes.  Their seeds are ``0..ESTIMATE_RUNS-1``, so every
    worker process gets the same estimate without being told; the longest run
    counts, because a change point past a run's end is wasted but one past the
    estimate can never be drawn.
    """
    from ..runner.single import run_seeds  # the runner imports this module

    key = (scenario.name, id(scenario), json.dumps(dict(config), sort_keys=True, default=str),
           world)
    known = _ESTIMATES.get(key)
    if known is not None:
        return known[1], known[2]
    made: list[PCT] = []

    def make(seed: int) -> PCT:
        made.append(PCT(seed, 1, 1, world))
        return made[-1]

    run_seeds(scenario, config, range(ESTIMATE_RUNS), lambda _result: None, strategy=make)
    k = max([MIN_STEPS, *(p.contested for p in made)])
    n = max([1, *(len(p.contenders) for p in made)])
    _ESTIMATES[key] = (scenario, k, n)
    return k, n
