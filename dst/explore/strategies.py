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
(``pct:d=5,k=41,n=2``).  Where that estimate leaves PCT nothing to order (no
two actors ever contended) the seeds run as ``random`` runs them, and the
exploration says so (:attr:`Exploration.fallback`), for ``dst run`` to print.
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
from .pct import ACTORS, DEFAULT_ACTORS, DEFAULT_WORLD, PCT, WORLDS
from .pct import DEFAULT_DEPTH as DEFAULT_DEPTH
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
    #: Why the seeds run as another strategy than the spec names, in one line
    #: (``pct fell back to random: ...``); None when they run as named.
    fallback: str | None = None


_PCT = re.compile(r"pct(?::(?P<params>.*))?")


def parse(spec: str, *, depth: int | None = None, steps: int | None = None) -> str:
    """``spec`` checked and in its normal form; ``depth``/``steps`` fill in PCT's.

    ``pct`` becomes ``pct:d=5`` (``k`` and ``n`` estimated per scenario and
    config), and ``--pct-depth``/``--pct-steps`` land in the spec, so that the
    results database keeps runs with other parameters apart.  ``n=`` (the
    actors that contend) stands in for the estimate's: ``n=1`` runs the random
    walk, and says so (:func:`explore`).  A spec that gives ``k`` and no ``n``
    runs no estimate and is PCT throughout.  ``pct:...,world=actor`` schedules
    timers and faults as priority actors too, ``pct:...,actors=task`` makes
    each task an actor instead of each process (``dst.explore.pct``).  Raises
    ``UsageError`` with the names known.
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
    actors = params.get("actors", DEFAULT_ACTORS)
    return (f"pct:d={d}" + (f",k={k}" if k is not None else "")
            + (f",n={n}" if n is not None else "")
            + (f",world={world}" if world != DEFAULT_WORLD else "")
            + (f",actors={actors}" if actors != DEFAULT_ACTORS else ""))


def _params(text: str, spec: str) -> dict[str, int | str]:
    out: dict[str, int | str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, _, value = (x.strip() for x in part.partition("="))
        if key in ("d", "k", "n") and value.isdigit():
            out[key] = int(value)
        elif (key == "world" and value in WORLDS) or (key == "actors" and value in ACTORS):
            out[key] = value
        else:
            raise UsageError(f"strategy {spec!r}: PCT takes d=DEPTH, k=STEPS, n=ACTORS, "
                             f"world={'|'.join(WORLDS)} and actors={'|'.join(ACTORS)} "
                             "(e.g. pct:d=3,k=200)")
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
    actors = str(params.get("actors", DEFAULT_ACTORS))
    given = params.get("n")
    count: int | None = int(given) if given is not None else None
    if params.get("k"):
        steps = int(params["k"])
    else:
        steps, counted = estimate(scenario, config, world, actors)
        count = count if count is not None else counted
    if count is not None and count < 2:
        return Exploration(spec, RandomWalk, fallback=fallback_line(count, actors))
    return Exploration(spec, lambda seed: PCT(seed, depth, steps, world, count, actors))


def fallback_line(count: int, actors: str = DEFAULT_ACTORS) -> str:
    """The one line that says PCT ran as the random walk, and why."""
    unit = "processes" if actors == "process" else "tasks"
    why = (f"the spec gives n={count}" if count else
           f"in {ESTIMATE_RUNS} runs no two {unit} were ever ready at once")
    hint = " (pct:actors=task orders one process's tasks)" if actors == "process" else ""
    return f"pct fell back to random: {why}, so PCT's priorities would order nothing{hint}"


def fallback(spec: str, scenario: Scenario, config: Mapping[str, Any]) -> str | None:
    """:attr:`Exploration.fallback` for ``spec``: None for any spec but an estimated ``pct``,
    which runs its estimate here (five runs, kept for this process)."""
    return explore(spec, scenario, config).fallback if parse(spec).startswith("pct") else None


#: Estimates made in this process: (scenario name, its id, config, world, actors) ->
#: (scenario, k, n).  The scenario is kept with its estimate so that its id cannot
#: be reused by another.
_ESTIMATES: dict[tuple[str, int, str, str, str], tuple[Scenario, int, int]] = {}


def estimate_steps(scenario: Scenario, config: Mapping[str, Any],
                   world: str = DEFAULT_WORLD, actors: str = DEFAULT_ACTORS) -> int:
    """PCT's ``k`` for this scenario and config (see :func:`estimate`)."""
    return estimate(scenario, config, world, actors)[0]


def estimate(scenario: Scenario, config: Mapping[str, Any],
             world: str = DEFAULT_WORLD, actors: str = DEFAULT_ACTORS) -> tuple[int, int]:
    """PCT's ``k`` and ``n`` for this scenario and config: the most contested steps of
    a few runs (at least ``MIN_STEPS``), and the most actors that contended in one of
    them (0: none ever did).

    The runs are PCT's own with no change point (``d=1``: priorities alone), so
    they count what ``k`` counts, steps where two actors or more compete, on the
    kind of schedule PCT makes.  Their seeds are ``0..ESTIMATE_RUNS-1``, so every
    worker process gets the same estimate without being told; the longest run
    counts, because a change point past a run's end is wasted but one past the
    estimate can never be drawn.
    """
    from ..runner.single import run_seeds  # the runner imports this module

    key = (scenario.name, id(scenario), json.dumps(dict(config), sort_keys=True, default=str),
           world, actors)
    known = _ESTIMATES.get(key)
    if known is not None:
        return known[1], known[2]
    made: list[PCT] = []

    def make(seed: int) -> PCT:
        made.append(PCT(seed, 1, 1, world, actors=actors))
        return made[-1]

    run_seeds(scenario, config, range(ESTIMATE_RUNS), lambda _result: None, strategy=make)
    k = max([MIN_STEPS, *(p.contested for p in made)])
    n = max(len(p.contenders) for p in made)
    _ESTIMATES[key] = (scenario, k, n)
    return k, n
