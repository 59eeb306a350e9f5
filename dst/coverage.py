"""Coverage: what the runs reached, not only what they broke.

A search that finds nothing is only worth the states it went through.  Two
measures say how far it went, both cheap enough to leave on:

- **Probes.** ``dst.sometimes(condition, name)``, called from the code under test
  or a fake, says "a run should sometimes get here with this true" (FoundationDB's
  code probes, Antithesis's *sometimes* assertions).  A probe is *declared* once
  ``sometimes`` is called with it in any run, or up front by the scenario
  (``scenario.sometimes(name)``: then a probe whose code no run executes is
  reported too), and *reached* once it is called with a true condition; a
  declared probe that no run reached is a part of the system the search never
  exercised, whatever its verdicts say.  The first time a
  probe holds in a run it is recorded in the trace as an ``event`` from actor
  ``probe`` (``sometimes NAME``), so replay checks it like any other record and
  ``dst show`` tells it; later calls in the run record nothing.  Outside a run
  ``sometimes`` does nothing and returns ``condition``, so it can stay in code
  that also runs for real.
- **Abstract states.** A scenario may declare ``@scenario.fingerprint``, a
  function of its world returning a small value that names the state the system
  is in (a JSON value, or a hashable of tuples, frozensets, strings and
  numbers).  It is taken at every step, when the invariants are checked, and
  the distinct values are counted across the runs.  A count that stops growing
  while seeds go on says the search is going round in states it has seen.

Both are kept per run beside the run (never in a module global that a later
run could see) and collected by the runner (``dst.runner.single``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .errors import ScenarioError
from .sim.findings import defined_at
from .sim.kernel import ACTIVE, Sim

#: The actor of the trace event a probe records the first time it holds in a run.
PROBE_ACTOR = "probe"

T = TypeVar("T")


@dataclass
class RunCoverage:
    """What one run reached: probes declared and reached, fingerprints seen."""

    declared: set[str] = field(default_factory=set)
    reached: set[str] = field(default_factory=set)
    #: Distinct fingerprints of the run, each (value or its canonical text) ->
    #: its 64-bit digest.
    states: dict[Hashable, int] = field(default_factory=dict)


_NOTHING = RunCoverage()


def of(sim: Sim) -> RunCoverage:
    """What ``sim``'s run reached (empty, and not to be changed, when it declared nothing)."""
    cov = sim._coverage
    return _NOTHING if cov is None else cov


def _own(sim: Sim) -> RunCoverage:
    # Kept on the run itself (a slot): freed with it, and cheaper to reach than
    # through a weak mapping, once per probe call and once per seed.
    cov = sim._coverage
    if cov is None:
        cov = sim._coverage = RunCoverage()
    return cov


def sometimes(condition: T, name: str) -> T:
    """Probe: record that ``condition`` held here at least once in this run.

    Returns ``condition``, so it can wrap a test in place
    (``if dst.sometimes(reply is None, "reply lost"): ...``).  Outside a run it
    only returns ``condition``.
    """
    if not ACTIVE:
        return condition
    sim = ACTIVE[-1]
    cov = _own(sim)
    if condition and name not in cov.reached:
        cov.reached.add(name)
        cov.declared.add(name)
        sim.event(PROBE_ACTOR, f"sometimes {name}", {})
    elif name not in cov.declared:
        cov.declared.add(name)
    return condition


def watch_states(sim: Sim, scenario: str, fingerprint: Callable[[], Any]) -> None:
    """Take ``fingerprint()`` at every step of ``sim``'s run (checked like an invariant).

    It rides on the invariant checks because they run exactly when a step's
    state is settled (before each decision, and once at the end); it always
    holds, so it changes no run.
    """
    seen = _own(sim).states

    def take() -> bool:
        value = fingerprint()
        try:
            if value in seen:
                return True
            key: Hashable = value
        except TypeError:  # unhashable (a list, a dict): a frozen copy is the key
            key = _freeze(value)
            if key in seen:
                return True
        seen[key] = _digest(value, scenario, fingerprint)
        return True

    sim.invariant("fingerprint", take)


def _freeze(value: Any) -> Hashable:
    """A hashable stand-in for a JSON value, to tell states apart within a run
    (the digest is taken once per distinct value; this runs at every step)."""
    if isinstance(value, dict):
        try:
            return ("{", tuple(sorted((k, _freeze(v)) for k, v in value.items())))
        except TypeError:  # keys that do not sort together: fall back to the text
            return ("=", json.dumps(value, sort_keys=True, default=repr))
    if isinstance(value, (list, tuple)):
        return ("[", tuple(_freeze(v) for v in value))
    if isinstance(value, (set, frozenset)):
        return frozenset(value)
    hashable: Hashable = value
    return hashable


def _encode(value: Any) -> Any:
    if isinstance(value, (set, frozenset)):
        return sorted(json.dumps(v, sort_keys=True, default=_encode) for v in value)
    raise TypeError(type(value).__name__)


def _canonical(value: Any, scenario: str, fingerprint: Callable[[], Any]) -> str:
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), default=_encode)
    except (TypeError, ValueError) as exc:
        raise ScenarioError(
            f"the fingerprint of {scenario}{defined_at(fingerprint)} returned a value with no "
            f"stable text ({type(value).__name__} holding {exc}); return JSON values, tuples, "
            "frozensets, strings and numbers") from None


def _digest(value: Any, scenario: str, fingerprint: Callable[[], Any]) -> int:
    """A 64-bit digest of the value's canonical text: the same in every process."""
    text = _canonical(value, scenario, fingerprint)
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")
