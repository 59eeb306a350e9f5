"""Targeted and outside-world faults: each does what the plan says, where and as often."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import trio

from dst import Env, FaultPlan, Scenario, ServiceFaults, ServiceUnavailable, Sim
from dst.registry import load
from dst.runner.single import RunResult

from .simkit import inline, many


def _chosen(result: RunResult) -> list[str]:
    return [r["enabled"][r["chosen"]] for r in result.trace().records if r["type"] == "decision"]


def _faults(result: RunResult, kind: str) -> list[dict[str, Any]]:
    return [r for r in result.trace().records if r["type"] == "fault" and r["fault"] == kind]


# -- service faults ---------------------------------------------------------------


def _payments(faults: ServiceFaults, *, timeout: float = float("inf"),
              suffers: tuple[str, ...] | None = None) -> Scenario:
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        charges: list[int] = []
        outcome: dict[str, Any] = {}

        def handle(op: str, request: Any) -> Any:
            charges.append(request["amount"])
            return {"ok": True}

        async def agent(env: Env) -> None:
            outcome["reply"] = "timeout"
            try:
                with trio.move_on_after(timeout):
                    outcome["reply"] = await env.services.call("payments", "charge",
                                                               {"amount": 5})
            except ServiceUnavailable as exc:
                outcome["reply"] = f"unavailable: {exc}"
            outcome["at"] = env.clock.now()

        if suffers is None:
            sim.service("payments", handle)
        else:
            sim.service("payments", handle, suffers=suffers)
        sim.process("agent", agent)
        return charges, outcome

    scenario = inline(setup, faults=FaultPlan(services={"payments": faults}))
    return scenario


def _outcomes(scenario: Scenario, seeds: int = 200) -> dict[str, list[tuple[Any, Any]]]:
    seen: dict[str, list[tuple[Any, Any]]] = {}
    worlds: list[Any] = []
    original = scenario._setup
    assert original is not None

    def capture(sim: Sim, config: dict[str, Any]) -> Any:
        worlds.append(original(sim, config))
        return worlds[-1]

    scenario.setup(capture)
    for result, (charges, outcome) in zip(many(scenario, range(seeds)), worlds, strict=True):
        kinds = [o.rsplit("!", 1)[1] for o in _chosen(result) if "!" in o]
        key = kinds[0] if kinds else "ok"
        seen.setdefault(key, []).append((list(charges), dict(outcome)))
    return seen


def test_each_service_fault_does_what_it_says() -> None:
    seen = _outcomes(_payments(ServiceFaults(fail=1, lose_reply=1, delay=1, repeat=1,
                                             delay_seconds=30.0, weight=1.0)))
    assert set(seen) == {"ok", "fail", "lose_reply", "delay", "repeat"}
    for charges, outcome in seen["ok"]:
        assert charges == [5] and outcome["reply"] == {"ok": True}
    for charges, outcome in seen["fail"]:  # before the effect
        assert charges == [] and outcome["reply"].startswith("unavailable")
    for charges, outcome in seen["lose_reply"]:  # after the effect
        assert charges == [5] and outcome["reply"].startswith("unavailable")
    for charges, outcome in seen["delay"]:  # the effect now, the reply 30 s later
        assert charges == [5] and outcome["reply"] == {"ok": True} and outcome["at"] == 30.0
    for charges, outcome in seen["repeat"]:  # executed twice
        assert charges == [5, 5] and outcome["reply"] == {"ok": True}


def test_a_late_reply_races_the_callers_timeout() -> None:
    seen = _outcomes(_payments(ServiceFaults(delay=1, delay_seconds=30.0, weight=1.0),
                               timeout=10.0))
    for charges, outcome in seen["delay"]:
        assert charges == [5] and outcome == {"reply": "timeout", "at": 10.0}


def test_a_service_suffers_only_what_it_declares() -> None:
    seen = _outcomes(_payments(ServiceFaults(fail=1, lose_reply=1, weight=1.0),
                               suffers=("fail",)))
    assert set(seen) == {"ok", "fail"}
    with pytest.raises(ValueError, match="cannot suffer explode"):
        Sim(0, None).service("x", lambda op, r: None, suffers=("explode",))  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "config"), [
    ("approval_disclosure", {"disclose_on_error": False}),
    ("replenish_lost_reply", {"stable_key": False}),
])
def test_a_planted_bug_is_found_only_through_service_faults(
        name: str, config: dict[str, Any]) -> None:
    scenario = load(name)
    cfg = scenario.checked_config(config)
    with_faults = many(scenario, range(150), cfg)
    assert any(r.violated for r in with_faults)
    quiet = Scenario(scenario.name, doc=scenario.doc, max_steps=scenario.max_steps,
                     faults=lambda c: replace(scenario.fault_plan(c), services={}))
    quiet.switches, quiet.invariants = scenario.switches, scenario.invariants
    quiet.end_checks, quiet._setup = scenario.end_checks, scenario._setup
    assert not any(r.violated for r in many(quiet, range(150), cfg))


# -- crashes where and as often as the plan says ------------------------------------


def _two_writers(plan: FaultPlan) -> Scenario:
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def writer(env: Env) -> None:
            for i in range(4):
                await env.store.get(f"k{i}")
                await env.store.put(f"k{i}", i)
                await env.net.send("a" if env.name == "b" else "b", i)

        sim.process("a", writer, stores=["db"])
        sim.process("b", writer, stores=["db"])

    return inline(setup, faults=plan)


def test_crashes_happen_only_at_the_named_operation() -> None:
    results = many(_two_writers(FaultPlan(max_crashes=1, crash_weight=1.0,
                                          crash_at=("put",))), range(100))
    crashed = 0
    for result in results:
        decisions = [r for r in result.trace().records if r["type"] == "decision"]
        for d in decisions:
            chosen = d["enabled"][d["chosen"]]
            if chosen.startswith("crash:"):
                crashed += 1
                proc = chosen.split(":", 1)[1]
                parked = [e for e in d["enabled"] if e.startswith(proc + "@")]
                assert any(".put(" in e for e in parked), d["enabled"]
    assert crashed > 30


def test_only_the_named_process_crashes_and_no_more_than_its_budget() -> None:
    plan = FaultPlan(max_crashes=3, crash_weight=1.0, crash_only=("b",), process_crashes={"b": 1})
    for result in many(_two_writers(plan), range(100)):
        crashes = _faults(result, "crash")
        assert all(c["target"] == "b" for c in crashes)
        assert len(crashes) <= 1


def test_only_the_named_link_loses_messages() -> None:
    plan = FaultPlan(max_drops=3, drop_weight=1.0, link_drops={"a->b": 2}, links_only=True)
    drops = [d for r in many(_two_writers(plan), range(100)) for d in _faults(r, "drop")]
    assert drops and all(d["detail"] == "a->b" for d in drops)
    per_run = [len(_faults(r, "drop")) for r in many(_two_writers(plan), range(100))]
    assert max(per_run) <= 2


def test_no_fault_is_injected_after_faults_until() -> None:
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def ticker(env: Env) -> None:
            for i in range(20):
                await env.store.put("t", i)
                await env.clock.sleep(1)

        sim.process("p", ticker, stores=["db"])

    plan = FaultPlan(max_crashes=5, crash_weight=0.5, faults_until=5.0)
    late = [c for r in many(inline(setup, faults=plan), range(100)) for c in _faults(r, "crash")]
    assert late and all(c["t"] < 5.0 for c in late)


# -- partitions -------------------------------------------------------------------


def test_a_partition_loses_the_messages_across_it_and_heals() -> None:
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        got: list[tuple[float, Any]] = []

        async def sender(env: Env) -> None:
            for i in range(8):
                await env.net.send("receiver", i)
                await env.clock.sleep(10)

        async def receiver(env: Env) -> None:
            while True:
                msg = await env.net.recv()
                got.append((env.clock.now(), msg.body))

        sim.process("sender", sender, crashable=False)
        sim.process("receiver", receiver, crashable=False)
        return got

    plan = FaultPlan(max_partitions=1, partition_seconds=25.0, partition_weight=1.0,
                     partition_of=("receiver",))
    partitioned = 0
    for result in many(inline(setup, faults=plan), range(80)):
        cuts = _faults(result, "partition")
        if not cuts:
            continue
        partitioned += 1
        start = cuts[0]["t"]
        heals = _faults(result, "heal")
        assert heals and heals[0]["t"] == start + 25.0
        lost = _faults(result, "partitioned")
        assert all(start <= f["t"] < start + 25.0 for f in lost)
        deliveries = [r["t"] for r in result.trace().records if r["type"] == "decision"
                      and r["enabled"][r["chosen"]].startswith("deliver:")]
        assert not any(start < t < start + 25.0 for t in deliveries)
    assert partitioned > 20


# -- preemption at checkpoints ------------------------------------------------------


def _racy(preemptions: int) -> Scenario:
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def main(env: Env) -> None:
            async def step() -> None:
                for _ in range(3):
                    await trio.sleep(0)
                await env.store.put("x", 1)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(step)
                nursery.start_soon(step)

        sim.process("p", main, stores=["db"])

    return inline(setup, faults=FaultPlan(preemptions=preemptions, preempt_weight=1.0))


def test_checkpoints_are_choices_only_while_preemptions_are_left() -> None:
    off = many(_racy(0), range(50))
    assert not any(c.endswith("@run") for r in off for c in _chosen(r))
    on = many(_racy(2), range(50))
    assert any(c.endswith("@run") for r in on for c in _chosen(r))
    for result in on:
        preempted = 0
        for r in result.trace().records:
            if r["type"] != "decision":
                continue
            held = [e for e in r["enabled"] if e.endswith("@run")]
            if held and r["enabled"][r["chosen"]] not in held:
                preempted += 1
        assert preempted <= 2 + 2  # two preemptions, and choices that preempt nothing


# -- eventually -------------------------------------------------------------------


def _relay(forwarding: bool) -> Scenario:
    """A relay that polls for ever: it never comes to rest."""
    scenario = Scenario("relay", doc="polls its inbox for ever",
                        faults=FaultPlan(max_crashes=1, crash_weight=0.3))

    @scenario.setup
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def relay(env: Env) -> None:
            while True:
                for key, value in await env.store.scan("in/"):
                    if forwarding:
                        await env.store.put("out/" + key[3:], value)
                await env.clock.sleep(1)

        async def producer(env: Env) -> None:
            for i in range(3):
                await env.store.put(f"in/{i}", i)

        db = sim.store("db")
        sim.process("relay", relay, stores=["db"])
        sim.process("producer", producer, stores=["db"], crashable=False)
        return db

    @scenario.eventually("AllForwarded", within=30)
    def all_forwarded(db: Any) -> bool | str:
        n = len(db.scan("out/"))
        return n == 3 or f"{n} of 3 forwarded"

    return scenario


def test_eventually_holds_in_a_system_that_never_rests() -> None:
    results = many(_relay(forwarding=True), range(100))
    assert all(r.verdict == "pass" for r in results), [r.violated for r in results]
    assert {r.ended for r in results} == {"held"}
    assert max(r.steps for r in results) < 200  # ended when it held, not at the bound


def test_eventually_fails_with_the_time_it_waited() -> None:
    results = many(_relay(forwarding=False), range(20))
    assert all(r.violated == ["AllForwarded"] for r in results)
    message = results[0].trace().records[-1]["message"]
    assert "did not hold within 30s after the faults stopped" in message


def test_a_liveness_deadline_never_fires_while_a_woken_task_is_held() -> None:
    scenario = Scenario("wake", doc="a waiter woken after a store call")
    done: dict[str, bool] = {}

    @scenario.setup
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        done.clear()

        async def main(env: Env) -> None:
            woken = trio.Event()

            async def waiter() -> None:
                await woken.wait()
                done["yes"] = True

            async with trio.open_nursery() as nursery:
                nursery.start_soon(waiter)
                await env.store.put("x", 1)
                woken.set()

        sim.process("p", main, stores=["db"])

    @scenario.eventually("Done", within=10)
    def finished(_: Any) -> bool:
        return done.get("yes", False)

    assert all(r.verdict == "pass" for r in many(scenario, range(200)))
