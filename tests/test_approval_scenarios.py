"""The approval scenarios find every planted bug, and the correct design passes.

Nothing here asserts a bug into existence: each planted bug (declared by its
scenario, shown by ``dst list``) is found by running seeds until the
invariants it claims to break have each been violated.
"""

from __future__ import annotations

import os

import pytest

from dst.registry import load
from dst.runner.single import RunResult, run_one, run_seeds
from dst.scenario import PlantedBug, Scenario
from dst.sim.store import SimStore
from dst.trace.render import story
from scenarios.approval import _seeded, seed_card

SCENARIOS = ["approval", "approval_params", "approval_surface", "approval_disclosure"]
#: Seeds a planted bug gets before the test gives up (the claim: found within 1,000).
BUDGET = 1000
#: Seeds the correct design must pass in the default suite (the soak runs 100,000).
PASSING = 300


def _bugs() -> list[tuple[str, PlantedBug]]:
    return [(name, bug) for name in SCENARIOS for bug in load(name).planted_bugs]


def _first_violations(scenario: Scenario, config: dict, wanted: set[str]) -> dict[str, int]:
    """Seed at which each wanted invariant was first violated (chunks of 100 seeds)."""
    found: dict[str, int] = {}

    def note(r: RunResult) -> None:
        for name in r.violated:
            found.setdefault(name, r.seed)

    for start in range(0, BUDGET, 100):
        run_seeds(scenario, config, range(start, start + 100), note)
        if wanted <= set(found):
            break
    return found


@pytest.mark.parametrize(("name", "bug"), _bugs(),
                         ids=[f"{n}:{' '.join(f'{k}={v}' for k, v in b.config.items())}"
                              for n, b in _bugs()])
def test_every_planted_bug_is_found_within_1000_seeds(name: str, bug: PlantedBug) -> None:
    scenario = load(name)
    config = {**scenario.default_config(), **bug.config}
    found = _first_violations(scenario, config, set(bug.breaks))
    missing = set(bug.breaks) - set(found)
    assert not missing, f"{name} {dict(bug.config)}: {missing} not violated in {BUDGET} seeds"


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_correct_design_passes_with_crashes_drops_and_duplicates(name: str) -> None:
    scenario = load(name)
    plan = scenario.fault_plan(scenario.default_config())
    assert plan.max_crashes and plan.max_drops and plan.max_dups
    failures: list[str] = []
    run_seeds(scenario, scenario.default_config(), range(PASSING),
              lambda r: failures.extend(f"seed {r.seed}: {v}" for v in r.violated))
    assert failures == []


def test_the_lost_update_story_reads_as_the_race() -> None:
    """A failing run tells, in protocol words, two turns spending and executing one approval."""
    scenario = load("approval")
    config = {**scenario.default_config(), "spend_mode": "before"}
    found = _first_violations(scenario, config, {"AtMostOnce"})
    result = run_one(scenario, config, found["AtMostOnce"])
    text = "\n".join(line for _s, _t, _a, line in story(result.trace()))
    assert text.count("spent a-m0 (wrote spent)") == 2
    assert text.count("executed create_tickets x12") == 2
    assert "VIOLATED AtMostOnce: approval a-m0 ran 2 times" in text


def test_the_dropped_card_story_names_the_connection_it_was_routed_to() -> None:
    scenario = load("approval_surface")
    config = {**scenario.default_config(), "route_to_newest": True, "history_first_final": True}
    found = _first_violations(scenario, config, {"ShownEqualsRecorded"})
    result = run_one(scenario, config, found["ShownEqualsRecorded"])
    text = "\n".join(line for _s, _t, _a, line in story(result.trace()))
    assert "dropped: routed to conn-" in text


@pytest.mark.parametrize("fact", ["route_to_newest", "history_first_final"])
def test_each_routing_fact_alone_drops_no_card(fact: str) -> None:
    scenario = load("approval_surface")
    config = {**scenario.default_config(), fact: True}
    failures: list[int] = []
    run_seeds(scenario, config, range(PASSING), lambda r: failures.extend(
        [r.seed] if r.violated else []))
    assert failures == []


def test_the_simulated_store_counts_every_write_it_offers() -> None:
    """Checks skip work while the store's version is unchanged: no write may go uncounted."""
    public = {n for n in dir(SimStore) if not n.startswith("_") and callable(getattr(SimStore, n))}
    readers = {"get", "peek", "view", "scan", "snapshot", "copy_from"}
    assert public - readers == {"put", "cas", "delete"}
    db = SimStore("db")
    db.put("k", {"v": 1})
    assert db.version == 1
    assert not db.cas("k", {"v": 2}, {"v": 3}) and db.version == 1
    assert db.cas("k", {"v": 1}, {"v": 3}) and db.version == 2
    db.put("k", None)
    db.delete("k")
    assert db.version == 4


@pytest.mark.parametrize("history_first_final", [False, True])
def test_the_seeded_store_copied_per_seed_equals_the_seeding_writes(
        history_first_final: bool) -> None:
    config = {"history_first_final": history_first_final}
    fresh, copied = SimStore("agent-db"), SimStore("agent-db")
    seed_card(fresh, config)
    copied.copy_from(_seeded(history_first_final))
    assert copied.data == fresh.data and copied.snapshot() == fresh.snapshot()
    assert copied.version == 0
    copied.put("conv/c1/draft", {"op": "delete_tickets"})
    assert _seeded(history_first_final).peek("conv/c1/draft")["op"] == "create_tickets"


@pytest.mark.soak
@pytest.mark.skipif(not os.environ.get("DST_SOAK"), reason="soak: set DST_SOAK=1")
@pytest.mark.parametrize("name", SCENARIOS)
def test_soak_the_correct_design_passes_100000_seeds(name: str) -> None:
    scenario = load(name)
    failures: list[str] = []
    run_seeds(scenario, scenario.default_config(), range(100_000),
              lambda r: failures.extend(f"seed {r.seed}: {v}" for v in r.violated))
    assert failures == []
