"""The strategies ``dst run --strategy`` offers: pct and swarm next to the random walk.

Each is a pure function of the seed, replays exactly (through the command line
too), and keeps its runs apart from the others' in the results database.  PCT
finds what its depth promises where a random walk essentially never looks;
swarm gives every seed its own fault mix, recorded in the trace header.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from dst import Env, Scenario, Sim
from dst.cli import main
from dst.explore.pct import PCT, actor_of, is_data
from dst.explore.strategies import estimate, explore, parse
from dst.explore.swarm import swarm_plan
from dst.registry import load
from dst.runner.single import RunResult, plan_from_dict, replay_trace, run_seeds
from dst.sim.faults import FaultPlan, ServiceFaults


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def runs(scenario: Scenario, spec: str, seeds: range,
         config: dict[str, Any] | None = None) -> list[RunResult]:
    cfg = config if config is not None else scenario.config()
    how = explore(spec, scenario, cfg)
    out: list[RunResult] = []
    run_seeds(scenario, cfg, seeds, out.append, strategy=how.strategy, plan=how.plan)
    return out


# -- naming ----------------------------------------------------------------------


def test_a_strategy_spec_is_checked_and_normalised() -> None:
    assert parse("random") == "random"
    assert parse("swarm") == "swarm"
    assert parse("pct") == "pct:d=5"
    assert parse("pct", depth=2, steps=50) == "pct:d=2,k=50"
    assert parse("pct:k=9,d=4") == "pct:d=4,k=9"
    assert parse("pct:world=actor") == "pct:d=5,world=actor"
    assert parse("pct:n=10,k=14") == "pct:d=5,k=14,n=10"
    assert parse("pct:actors=task") == "pct:d=5,actors=task"
    assert parse("pct:actors=process") == "pct:d=5"


@pytest.mark.parametrize("spec", ["bogus", "pct:d=x", "pct:depth=3", "pct:d=0", "pct:world=x",
                                  "pct:n=0", "pct:actors=message"])
def test_an_unknown_strategy_is_refused(spec: str) -> None:
    from dst.errors import UsageError

    with pytest.raises(UsageError):
        parse(spec)


def test_an_unknown_strategy_on_the_command_line_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = invoke("run", "counter", "--strategy", "bogus", "--out", str(tmp_path))
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: unknown strategy 'bogus'")
    assert "random, pct, swarm" in lines[0]


def test_pct_options_without_pct_are_refused(tmp_path: Path) -> None:
    result = invoke("run", "counter", "--pct-depth", "2", "--out", str(tmp_path))
    assert result.exit_code == 2
    assert "--strategy pct" in result.stderr


# -- pct ---------------------------------------------------------------------------


def test_pct_reads_the_actor_off_each_label() -> None:
    # By default the actors are processes; a delivery is its receiver's step.
    assert actor_of("worker-1@db.get(n)") == "worker-1"
    assert actor_of("agent/turn-1@run") == "agent"
    assert actor_of("agent/turn-1@call:tickets.create") == "agent"
    assert actor_of("deliver:m3(conn-1->agent)") == "agent"
    assert actor_of("timer@12.000") == "timer"
    # actors=task: every task its own actor; still never a message.
    assert actor_of("agent/turn-1@run", "task") == "agent/turn-1"
    assert actor_of("deliver:m3(conn-1->agent)", "task") == "agent"
    for fault in ("crash:server", "restart:server", "drop:m3(a->b)", "dup:m3(a->b)",
                  "partition:server", "agent/turn-1@call:tickets.create!lose_reply"):
        assert actor_of(fault) == "faults"
    assert is_data(["llm:approve a-m0", "llm:reply"])
    assert not is_data(["deliver:m1(a->b)", "deliver:m2(a->b)"])
    assert not is_data(["worker-1@db.get(n)", "worker-2@db.get(n)"])


def test_pct_runs_the_highest_priority_actor_until_a_change_point() -> None:
    # With no change point the order of two actors never changes within a run.
    strategy = PCT(seed=7, depth=1, steps=10)
    labels = ["a@db.get(x)", "b@db.get(x)"]
    first = strategy.choose(1, labels, None)
    assert all(strategy.choose(step, labels, None) == first for step in range(2, 30))


def test_pct_is_deterministic_per_seed() -> None:
    scenario = load("ping")
    a = runs(scenario, "pct", range(30))
    b = runs(scenario, "pct", range(30))
    assert [r.trace().record_lines() for r in a] == [r.trace().record_lines() for r in b]
    assert len({tuple(r.trace().record_lines()) for r in a}) > 10
    assert {r.strategy for r in a} == {a[0].strategy}
    assert a[0].strategy.startswith("pct:d=5,k=")


def test_pct_finds_the_counter_lost_update() -> None:
    scenario = load("counter")
    found = runs(scenario, "pct", range(20), scenario.config({"cas": "false"}))
    assert any("NoLostIncrement" in r.violated for r in found)


def _check_then_act() -> Scenario:
    """A depth-2 bug: ``b`` must run its whole errand inside ``a``'s one-step window.

    Each process takes a lock by reading it and, when free, writing its name.
    ``a`` does so at once; ``b`` first does twelve other writes.  Both hold the
    lock only if one's read falls between the other's read and write, which a
    random walk gets about once in 2**13 runs, and PCT with one change point at
    the right step (about one run in 2k).
    """
    scenario = Scenario("check_then_act", doc="a lock taken by read-then-write")

    @scenario.setup
    def setup(sim: Sim, config: dict[str, Any]) -> dict[str, bool]:
        held: dict[str, bool] = {}

        def taker(name: str, errands: int) -> Any:
            async def main(env: Env) -> None:
                for i in range(errands):
                    await env.store.put(f"{name}/{i}", i)
                if await env.store.get("lock") is None:
                    await env.store.put("lock", name)
                    held[name] = True
            return main

        sim.process("a", taker("a", 0), stores=["db"])
        sim.process("b", taker("b", 12), stores=["db"])
        return held

    @scenario.invariant("OneHolder")
    def one_holder(held: dict[str, bool]) -> bool | str:
        return len(held) < 2 or "a and b both hold the lock"

    return scenario


def test_pct_finds_a_depth_2_bug_that_the_random_walk_misses() -> None:
    scenario = _check_then_act()
    pct = [r.seed for r in runs(scenario, "pct:d=2", range(200)) if r.violated]
    walk = [r.seed for r in runs(scenario, "random", range(200)) if r.violated]
    assert len(pct) >= 5
    assert walk == []
    # Two processes that contend: PCT proper, and the name records the estimate.
    _, n = estimate(scenario, scenario.config())
    assert n == 2
    assert explore("pct:d=2", scenario, scenario.config()).fallback is None


def test_pct_on_short_runs_of_many_tasks_is_still_pct() -> None:
    """The approval races are short runs of many tasks and messages; PCT orders the three
    processes there, and its schedules are its own, not the random walk's."""
    scenario = load("approval")
    config = scenario.config({"spend_mode": "before"})
    k, n = estimate(scenario, config)
    assert n == 3  # the agent and two connections; no message is an actor
    assert explore("pct", scenario, config).fallback is None
    pct = runs(scenario, "pct", range(15), config)
    walk = runs(scenario, "random", range(15), config)
    assert pct[0].strategy == f"pct:d=5,k={k},n={n}"
    assert [r.trace().decisions for r in pct] != [r.trace().decisions for r in walk]


# -- swarm -------------------------------------------------------------------------


def test_swarm_draws_each_seed_its_own_plan_within_the_scenarios() -> None:
    base = FaultPlan(max_crashes=2, max_drops=1, max_dups=3, preemptions=2,
                     services={"pay": ServiceFaults(fail=1, lose_reply=2)})
    plans = [swarm_plan(seed, base) for seed in range(200)]
    assert swarm_plan(5, base) == plans[5]
    assert len({json.dumps(p.as_dict(), sort_keys=True) for p in plans}) > 100
    for p in plans:
        assert 0 <= p.max_crashes <= 2 and 0 <= p.max_dups <= 3 and 0 <= p.preemptions <= 2
        assert 0 <= p.services["pay"].lose_reply <= 2 and p.services["pay"].delay == 0
        assert base.crash_weight / 4 <= p.crash_weight <= base.crash_weight * 4
    assert any(p.max_crashes == 0 for p in plans) and any(p.max_crashes == 2 for p in plans)
    assert any(p.preemptions == 0 for p in plans)


def test_swarm_seeds_differ_in_their_recorded_fault_plans() -> None:
    scenario = load("ping")
    results = runs(scenario, "swarm", range(40))
    headers = [r.trace().header for r in results]
    assert {h["strategy"] for h in headers} == {"swarm"}
    plans = {json.dumps(h["faults"], sort_keys=True) for h in headers}
    assert len(plans) > 10
    base = scenario.fault_plan(scenario.config())
    for r, h in zip(results, headers, strict=True):
        assert h["faults"] == swarm_plan(r.seed, base).as_dict()
    again = runs(scenario, "swarm", range(40))
    assert [r.trace().record_lines() for r in again] == [r.trace().record_lines()
                                                         for r in results]


def test_a_recorded_plan_reads_back_as_the_plan() -> None:
    plan = FaultPlan(max_crashes=1, crash_only=("a",), crash_at=("put",), link_drops={"a->b": 1},
                     services={"pay": ServiceFaults(lose_reply=1, weight=0.3)},
                     max_partitions=1, partition_of=("b",), faults_until=30.0)
    assert plan_from_dict(json.loads(json.dumps(plan.as_dict()))) == plan


def test_replay_runs_under_the_plan_the_header_records() -> None:
    scenario = load("ping")
    config = scenario.config({"dedup": "false"})
    base = scenario.fault_plan(config)
    swarmed = [r for r in runs(scenario, "swarm", range(40), config)
               if r.trace().header["faults"] != base.as_dict()]
    assert swarmed
    for r in swarmed[:10]:
        replayed = replay_trace(scenario, r.trace())
        assert replayed.divergence is None
        assert replayed.trace().record_lines() == r.trace().record_lines()


# -- the command line ----------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["pct", "swarm"])
def test_a_failing_trace_of_each_strategy_replays_identically(strategy: str,
                                                              tmp_path: Path) -> None:
    result = invoke("run", "ping", "-c", "dedup=false", "--seeds", "20", "--strategy", strategy,
                    "--out", str(tmp_path), "--json")
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert doc["strategy"] == parse(strategy)
    assert doc["failures"]
    for failure in doc["failures"][:3]:
        header = json.loads(Path(failure["trace"]).read_text().splitlines()[0])
        assert header["strategy"].startswith(strategy)
        replayed = invoke("replay", failure["trace"])
        assert replayed.exit_code == 1, replayed.output
        assert replayed.stdout.startswith("identical:")


def test_the_results_database_keeps_strategies_apart(tmp_path: Path) -> None:
    out = str(tmp_path)
    first = invoke("run", "counter", "--seeds", "30", "--out", out, "--json")
    assert first.exit_code == 0, first.output
    other = invoke("run", "counter", "--seeds", "30", "--strategy", "swarm", "--resume",
                   "--out", out, "--json")
    assert json.loads(other.stdout)["resumed"] == 0
    same = invoke("run", "counter", "--seeds", "30", "--strategy", "swarm", "--resume",
                  "--out", out, "--json")
    assert json.loads(same.stdout)["resumed"] == 30


def test_the_summary_names_a_strategy_other_than_random(tmp_path: Path) -> None:
    result = invoke("run", "counter", "--seeds", "10", "--strategy", "pct", "--pct-depth", "2",
                    "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "counter [cas=true workers=2 increments=7] under pct:d=2: 10 runs, 0 failed" \
        in result.stdout
