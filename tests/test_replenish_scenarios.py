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


#: Scenarios whose world cooperates in the end: the manager approves, the
#: supplier ships.  A run may still end without the goods (a schedule slow
#: enough that the agent stops waiting before the approval is routed to it is a
#: legitimate run), so this is a share, not an invariant.  It is what fails for
#: an agent that never manages to order: every check above would pass it.
COOPERATIVE = {"replenish_crash", "replenish_outage", "replenish_lost_reply",
               "replenish_concurrency", "replenish_unreachable", "replenish_price",
               "replenish_deploy"}
RECEIVED_AT_LEAST = 0.95


def _outcomes(result: RunResult) -> list[str]:
    db = result.sim.stores["agent-db"]
    metas = [db.peek(k) for k in sorted(db.data) if k.startswith("wfmeta/") and ".r" in k]
    return [str((m.get("result") or {}).get("outcome")) for m in metas if isinstance(m, dict)]


def _failures(name: str, seeds: range, outcomes: list[str] | None = None,
              ) -> list[tuple[int, list[str]]]:
    scenario = load(name)
    bad: list[tuple[int, list[str]]] = []

    def on_result(r: RunResult) -> None:
        if r.violated:
            bad.append((r.seed, r.violated))
        elif r.ended == "bound":  # its end-of-run checks never ran
            bad.append((r.seed, [f"hit the bound of {scenario.max_steps} steps"]))
        if outcomes is not None:
            outcomes.extend(_outcomes(r))

    run_seeds(scenario, scenario.default_config(), seeds, on_result)
    return bad


@pytest.mark.parametrize("name", SCENARIOS)
def test_each_default_passes(name: str) -> None:
    outcomes: list[str] = []
    seeds = range(DEFAULT_SEEDS.get(name, DEFAULT_SEEDS_OTHERS))
    assert _failures(name, seeds, outcomes) == []
    if name in COOPERATIVE:
        received = outcomes.count("received") / len(outcomes)
        assert received >= RECEIVED_AT_LEAST, (name, received, set(outcomes))


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
    # Version 2 orders up to 3x safety stock: the first logged step whose input
    # holds the quantity is where the replay must stop, naming both sides.
    for error in stopped:
        assert error.startswith("workflow agent-SKU-1.r1 step 1: the log holds "
                                'tool:get_quotes({"qty":16,"sku":"SKU-1"}) but the code asks '
                                'for tool:get_quotes({"qty":26,"sku":"SKU-1"})'), error


def test_a_crash_days_into_the_approval_wait_resumes_from_the_log() -> None:
    """Runs that crash on a later day than their approval wait began ask the manager once.

    Counted from the trace: the manager is asked at the choice point of its service
    call, so a replay that asked again would show a second such decision.
    """
    scenario = load("replenish_crash")
    during_wait: list[int] = []

    def on_result(r: RunResult) -> None:
        records = r.trace().records
        turns = [(rec["t"], rec["fields"]["tool"]) for rec in records
                 if rec["type"] == "event" and rec["event"] == "turn"]
        began = next((t for t, tool in turns if tool == "wait_for_approval"), None)
        if began is None:
            return
        ended = next((t for t, tool in turns if t > began), float("inf"))
        crashes = [rec["t"] for rec in records if rec["type"] == "fault"
                   and rec["fault"] == "crash"]
        if not any(began < t < ended for t in crashes):
            return
        asked = [rec for rec in records if rec["type"] == "decision"
                 and rec["enabled"][rec["chosen"]].endswith("@call:manager.request_approval")]
        assert len(asked) == 1, (r.seed, len(asked))
        assert not r.violated, (r.seed, r.violated)
        during_wait.append(r.seed)

    run_seeds(scenario, scenario.default_config(), range(300), on_result)
    assert during_wait, "no run crashed days into its approval wait in 300 seeds"


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


def test_a_manager_who_rejects_ends_the_replenishment_rejected_with_no_order() -> None:
    """The manager's "no" (chosen per request) is final: no order is placed for that PO."""
    from dst import Scenario, Sim
    from dst.agents.replenisher import Options
    from dst.fakes.replenisher import Kit, WorldConfig, build
    from dst.fakes.replenisher import kit as checks

    scenario = Scenario("replenish_rejects", doc="the manager may reject",
                        faults=checks.fault_plan(), max_steps=3000)
    checks.fault_switches(scenario)

    @scenario.setup
    def setup(sim: Sim, config: dict[str, Any]) -> Kit:
        return build(sim, Options(), WorldConfig(may_reject=True, approval_days=(1, 3)))

    scenario.invariant("OrderWithinApproval")(checks.order_within_approval)
    scenario.at_end("EveryReplenishmentEnds")(checks.every_replenishment_ends)
    outcomes: list[str] = []

    def on_result(r: RunResult) -> None:
        assert not r.violated, (r.seed, r.violated)
        ended = _outcomes(r)
        outcomes.extend(ended)
        if "rejected" in ended:
            ordered = [rec for rec in r.trace().records if rec["type"] == "decision"
                       and rec["enabled"][rec["chosen"]].endswith("@call:supplier.order")]
            assert ordered == [], r.seed

    run_seeds(scenario, scenario.default_config(), range(100), on_result)
    assert {"rejected", "received"} <= set(outcomes)


def test_an_entity_living_three_years_keeps_its_log_bounded_and_its_promise() -> None:
    """The longest horizon the scenario offers, with its faults on: still passes."""
    scenario = load("replenish_history")
    config = scenario.checked_config({"years": 3})
    results: list[RunResult] = []
    run_seeds(scenario, config, range(10), results.append)
    assert [(r.seed, r.violated) for r in results if r.violated] == []
    assert all(r.ended == "quiescent" for r in results)
    assert min(r.virtual_time for r in results) >= 3 * 364 * 86400 * 0.9
