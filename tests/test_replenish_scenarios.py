"""The replenish scenarios: every planted bug is found by running it, every default passes.

Nothing here asserts a bug into existence: each planted bug is searched for by
running its scenario over seeds (stopping at the first seed that breaks one of
the invariants the bug declares), exactly as ``dst run`` would.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from dst.registry import load
from dst.runner.single import RunResult, run_seeds

SCENARIOS = [
    "replenish_crash", "replenish_outage", "replenish_lost_reply", "replenish_concurrency",
    "replenish_unreachable", "replenish_price", "replenish_deploy", "replenish_untrusted",
    "replenish_history", "replenish_lost_goods",
]

#: Seeds a planted bug must be found within (the issue's bar).
FIND_WITHIN = 1000
#: Seeds each default must pass in the ordinary suite (history runs for a simulated year).
DEFAULT_SEEDS = {"replenish_history": 50}
DEFAULT_SEEDS_OTHERS = 200
SOAK_SEEDS = 100_000

soak = pytest.mark.skipif(not os.environ.get("DST_SOAK"), reason="set DST_SOAK=1 to soak")

PLANTED = [
    pytest.param(name, i, id=f"{name}-bug{i}")
    for name in SCENARIOS for i in range(len(load(name).planted_bugs))
]


def _first_failure(name: str, config: dict[str, Any], breaks: tuple[str, ...]) -> RunResult | None:
    found: list[RunResult] = []

    def seeds() -> Iterator[int]:
        for seed in range(FIND_WITHIN):
            if found:
                return
            yield seed

    def on_result(r: RunResult) -> None:
        if set(r.violated) & set(breaks):
            found.append(r)

    scenario = load(name)
    run_seeds(scenario, scenario.checked_config(config), seeds(), on_result)
    return found[0] if found else None


@pytest.mark.parametrize(("name", "index"), PLANTED)
def test_each_planted_bug_is_found_within_a_thousand_seeds(name: str, index: int) -> None:
    bug = load(name).planted_bugs[index]
    found = _first_failure(name, dict(bug.config), bug.breaks)
    assert found is not None, f"{name} {dict(bug.config)} not found in {FIND_WITHIN} seeds"


def _failures(name: str, seeds: range) -> list[tuple[int, list[str]]]:
    scenario = load(name)
    bad: list[tuple[int, list[str]]] = []
    run_seeds(scenario, scenario.default_config(), seeds,
              lambda r: bad.append((r.seed, r.violated)) if r.violated else None)
    return bad


@pytest.mark.parametrize("name", SCENARIOS)
def test_each_default_passes(name: str) -> None:
    assert _failures(name, range(DEFAULT_SEEDS.get(name, DEFAULT_SEEDS_OTHERS))) == []


@soak
@pytest.mark.soak
@pytest.mark.parametrize("name", SCENARIOS)
def test_each_default_passes_a_soak(name: str) -> None:
    assert _failures(name, range(SOAK_SEEDS)) == []


def test_new_code_without_a_version_branch_is_stopped_loudly_not_replayed_wrongly() -> None:
    """version_branch=false with input checks on: some runs stop with the error, none fail."""
    scenario = load("replenish_deploy")
    config = scenario.checked_config({"version_branch": False})
    stopped: list[str] = []
    violated: list[int] = []

    def on_result(r: RunResult) -> None:
        if r.violated:
            violated.append(r.seed)
        db = r.sim.stores["agent-db"]
        for key in sorted(db.data):
            meta = db.peek(key) if key.startswith("wfmeta/") else None
            if isinstance(meta, dict) and meta.get("status") == "stopped":
                stopped.append(str(meta.get("error")))

    run_seeds(scenario, config, range(120), on_result)
    assert violated == []
    assert stopped, "no run replayed an old log on new code in 120 seeds"
    assert all("the log holds tool:draft_purchase_order" in e or "step" in e for e in stopped)


def test_a_crash_during_the_approval_wait_resumes_from_the_log() -> None:
    """Some default run crashes while waiting for approval and still asks only once."""
    scenario = load("replenish_crash")
    resumed: list[int] = []

    def on_result(r: RunResult) -> None:
        events = [rec[4] for rec in r.sim.records if rec[0] == "event"]
        crashed = any(rec[0] == "fault" and rec[3] == "crash" for rec in r.sim.records)
        if crashed and "replaying" in events and not r.violated:
            resumed.append(r.seed)

    run_seeds(scenario, scenario.default_config(), range(60), on_result)
    assert resumed


def test_goods_that_never_come_end_given_up_after_exactly_the_allowed_chases() -> None:
    """The eager decider chases whenever allowed: the bound, not the model, stops it."""
    from dst.agents.replenisher import MAX_CHASES

    scenario = load("replenish_lost_goods")
    outcomes: list[str] = []

    def on_result(r: RunResult) -> None:
        assert r.verdict == "pass", (r.seed, r.violated)
        db = r.sim.stores["agent-db"]
        shipped = any(rec[0] == "decision" and rec[3] == "data"
                      and rec[4][rec[5]] == "supplier.ships:yes" for rec in r.sim.records)
        for key in sorted(db.data):
            meta = db.peek(key) if key.startswith("wfmeta/agent-SKU-1.r") else None
            if not isinstance(meta, dict):
                continue
            outcome = meta["result"]["outcome"]
            outcomes.append(outcome)
            wf = key[len("wfmeta/"):]
            chases = [k for k in db.data if k.startswith(f"wf/{wf}/")
                      and (db.peek(k) or {}).get("name") == "tool:chase_supplier"]
            if shipped:
                assert outcome == "received"
            else:
                assert outcome == "given_up"
                assert len(chases) == MAX_CHASES

    run_seeds(scenario, scenario.default_config(), range(40), on_result)
    assert {"received", "given_up"} <= set(outcomes)
