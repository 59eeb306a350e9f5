"""A timer fires before runnable work only as a budgeted "slow" fault.

With no budget (the default) a timeout never fires before work that takes no virtual
time; with one, the early timer is an option labelled ``timer@T!slow``, spends the
budget, is recorded as a ``slow`` fault, and every tool that reads labels counts it as a
fault.  A plan recorded before the budget existed (no ``max_slow`` in its header) still
means unbudgeted timers, so old traces replay as they were.
"""

from __future__ import annotations

from typing import Any

import trio

from dst import Env, FaultPlan, Sim
from dst.explore.exhaustive import Bounds, explore
from dst.explore.follow import default_index, is_fault, is_timer, shape
from dst.explore.pct import FAULTS, actor_of
from dst.runner.single import plan_from_dict

from .simkit import events, inline, many


def _asks_with_a_timeout(sim: Sim, _: dict[str, Any]) -> Any:
    """A client waits 60 s for a server's answer, which takes no virtual time."""

    async def client(env: Env) -> None:
        for i in range(3):
            await env.net.send("server", i)
            with trio.move_on_after(60.0) as scope:
                await env.net.recv()
            await env.store.put(f"answer/{i}", not scope.cancelled_caught)

    async def server(env: Env) -> None:
        while True:
            msg = await env.net.recv()
            await env.store.put(f"seen/{msg.body}", True)
            await env.net.send(msg.source, "ok")

    sim.process("client", client, stores=["db"])
    sim.process("server", server, stores=["db"], idle=True)
    return sim.store("db")


def _timed_out(db: Any) -> int:
    return sum(1 for _, answered in db.scan("answer/") if not answered)


def test_a_fault_free_plan_never_times_out_before_a_reply_that_takes_no_time() -> None:
    counts: list[int] = []
    scenario = inline(_asks_with_a_timeout,
                      invariants={"Count": lambda db: counts.append(_timed_out(db)) or True})
    runs = many(scenario, range(300))
    assert all(r.verdict == "pass" for r in runs)
    assert max(counts) == 0
    assert not any(label.startswith("timer@") and "!slow" in label
                   for r in runs for enabled, _ in r.trace().decisions for label in enabled)


def test_a_slow_budget_lets_the_timeout_win_at_most_that_often_and_records_each() -> None:
    runs = many(inline(_asks_with_a_timeout, faults=FaultPlan(max_slow=2, slow_weight=0.5)),
                range(300))
    early = 0
    for r in runs:
        chosen = [e[c] for e, c in r.trace().decisions]
        slow = [c for c in chosen if c.endswith("!slow")]
        faults = [f for f in r.trace().records if f["type"] == "fault" and f["fault"] == "slow"]
        assert len(slow) == len(faults) <= 2
        assert [f["target"] for f in faults] == [c.removesuffix("!slow") for c in slow]
        early += bool(slow)
    assert 30 < early < 300  # the race is explored, and not in every run


def test_without_budget_left_the_timer_waits_for_rest_and_then_goes_as_usual() -> None:
    """A timer nothing races (the server never answers) still fires, as an ordinary
    option, once nothing else can run."""

    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def client(env: Env) -> None:
            await env.net.send("server", "hello")
            with trio.move_on_after(60.0):
                await env.net.recv()
            await env.store.put("gave_up_at", env.clock.now())

        async def server(env: Env) -> None:
            await env.net.recv()  # and never answers

        sim.process("client", client, stores=["db"])
        sim.process("server", server)
        return sim.store("db")

    (run,) = many(inline(setup), range(1))
    assert run.verdict == "pass"
    assert run.sim.stores["db"].peek("gave_up_at") == 60.0
    assert "timer@60.000" in [e[c] for e, c in run.trace().decisions]


def test_the_header_always_states_the_budget_and_its_absence_means_unbudgeted() -> None:
    assert FaultPlan().as_dict()["max_slow"] == 0
    assert FaultPlan(max_slow=3).as_dict()["max_slow"] == 3
    assert "max_slow" not in FaultPlan(max_slow=None).as_dict()
    for plan in (FaultPlan(), FaultPlan(max_slow=2, slow_weight=0.5), FaultPlan(max_slow=None)):
        assert plan_from_dict(plan.as_dict()) == plan
    # What a header written before the budget existed holds: timers raced work unbudgeted.
    old = {k: v for k, v in FaultPlan().as_dict().items() if k != "max_slow"}
    assert plan_from_dict(old).max_slow is None


def test_an_unbudgeted_plan_offers_the_timer_beside_work_as_before() -> None:
    runs = many(inline(_asks_with_a_timeout, faults=FaultPlan(max_slow=None)), range(100))
    beside = [e for r in runs for e, _ in r.trace().decisions
              if "timer@60.000" in e and len(e) > 1]
    assert beside  # the old label, beside work
    assert not any("!slow" in label for e in beside for label in e)
    assert not any(f["fault"] == "slow" for r in runs for f in r.trace().records
                   if f["type"] == "fault")


def test_tools_that_read_labels_count_a_slow_timer_as_a_fault() -> None:
    label = "timer@60.000!slow"
    assert is_fault(label) and is_timer(label)
    assert shape(label) == shape("timer@12.500!slow") != shape("timer@60.000")
    assert default_index([label, "client@db.put(answer/0)"], [0.2, 1.0]) == 1
    assert actor_of(label) == FAULTS


def test_explore_counts_the_slow_budget() -> None:
    scenario = inline(_asks_with_a_timeout,
                      invariants={"NeverTimedOut": lambda db: _timed_out(db) == 0})
    calm = explore(scenario, {}, Bounds(max_steps=60))
    assert calm.proof and not calm.violations
    slow = explore(scenario, {}, Bounds(max_steps=60, slow=1))
    assert "NeverTimedOut" in slow.violations
    assert any(labels[i].endswith("!slow") for labels, i in slow.violations["NeverTimedOut"]
               .decisions)
    declared = explore(inline(_asks_with_a_timeout, faults=FaultPlan(max_slow=1)), {},
                       Bounds(max_steps=60))
    assert "0 slow timers (the plan allows 1)" in declared.limits()
    assert "0 slow timers" in calm.bounds.describe()


def test_a_timeout_race_replays_exactly() -> None:
    from dst.runner.single import replay_trace

    scenario = inline(_asks_with_a_timeout, faults=FaultPlan(max_slow=2, slow_weight=0.5))
    raced = next(r for r in many(scenario, range(50))
                 if any(e[c].endswith("!slow") for e, c in r.trace().decisions))
    again = replay_trace(scenario, raced.trace())
    assert again.divergence is None
    assert again.trace().record_lines() == raced.trace().record_lines()
    assert events(again) == events(raced)
