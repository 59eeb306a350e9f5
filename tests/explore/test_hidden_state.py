"""The explorer's reduction and state caching see the Python state tasks share.

Each scenario of :mod:`tests.explore.hidden` hides one shared value where the
tasks' frames alone do not show it.  A reduced search (sleep sets, and state
caching where the fingerprint is exact) must reach the verdicts and shortest
violations of plain depth-first search, which runs every interleaving.
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from dst.explore.exhaustive import Bounds, explore
from dst.explore.memory import opaque, write

from .hidden import KINDS, Hidden, build

BOUNDS = Bounds(max_steps=40)


def shortest(result: Any) -> dict[str, int]:
    return {name: v.steps for name, v in result.violations.items()}


@pytest.mark.parametrize("kind", KINDS)
def test_reduced_search_agrees_with_plain_search_on_hidden_shared_state(kind: str) -> None:
    scenario = build(kind)
    config = scenario.default_config()
    reduced = explore(scenario, config, BOUNDS)
    plain = explore(scenario, config, BOUNDS, por=False, prune_states=False)
    assert plain.proof and "ReaderSawNoWrite" in plain.violations
    assert reduced.proof and shortest(reduced) == shortest(plain)
    if kind == "generator":
        # Where a generator stands in a for loop is on the interpreter's stack, which
        # nothing can read: no step is taken as independent, and the summary says why.
        assert "for loop" in (reduced.no_reduction or "")
    else:
        assert reduced.no_reduction is None and reduced.no_pruning is None


@pytest.mark.parametrize("kind", ["getstate", "loggingbox", "global", "class_attr"])
def test_state_caching_alone_agrees_with_plain_search(kind: str) -> None:
    scenario = build(kind)
    config = scenario.default_config()
    cached = explore(scenario, config, BOUNDS, por=False, prune_states=True)
    plain = explore(scenario, config, BOUNDS, por=False, prune_states=False)
    assert cached.proof and shortest(cached) == shortest(plain) != {}


def test_a_field_left_out_of_getstate_is_still_part_of_the_state() -> None:
    a, b = Hidden(), Hidden()
    b.count = 1
    assert pickle.dumps(a) == pickle.dumps(b)  # what pickle alone sees
    label = str
    assert write(a, label) != write(b, label)


def test_only_a_dot_boundary_makes_a_module_opaque() -> None:
    assert opaque("logging") and opaque("logging.handlers") and opaque("structlog.stdlib")
    assert opaque("dst.sim.kernel")
    assert not opaque("loggingbox") and not opaque("structlogger") and not opaque("dst.simple")
