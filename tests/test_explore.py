"""Bounded exhaustive exploration (`dst explore`): proofs within bounds, shortest traces."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import trio
from click.testing import CliRunner

from dst import Env, FaultPlan, Scenario, Sim
from dst.cli import main
from dst.errors import DivergenceError
from dst.explore.exhaustive import Bounds, Exploration, explore, record
from dst.explore.footprint import FOREIGN, Footprint
from dst.explore.independence import Independence
from dst.registry import load
from dst.runner.single import replay_trace
from dst.verdict_table import only, protocol_actions

NO_PREEMPTION = FaultPlan(preemptions=0)


def counter(**switches: str) -> tuple[Scenario, dict[str, Any]]:
    scenario = load("counter")
    return scenario, scenario.config({"workers": "2", "increments": "2", **switches})


def summary(result: Exploration) -> tuple[Any, ...]:
    return (result.schedules, dict(result.ended), result.pruned_branches, result.max_depth,
            result.states, {n: (v.decisions, v.schedules) for n, v in result.violations.items()})


# -- a two-process bug that needs one interleaving ------------------------------------------


@dataclass
class Flags:
    db: Any
    #: What the reader saw: (flag, data) once it read both.
    seen: list[tuple[Any, Any]] = field(default_factory=list)
    #: Where each process is, for the fingerprint: steps taken so far.
    steps: dict[str, dict[str, int]] = field(default_factory=dict)


flags = Scenario("flags", doc="a writer raises a flag before its data is written",
                 faults=NO_PREEMPTION)
flags.switch("ordered", False, doc="write the data before the flag")


@flags.setup
def _flags_setup(sim: Sim, config: dict[str, Any]) -> Flags:
    # Each process is handed only what is its own (its step count; the reader what it
    # saw): steps of different processes then change no memory the other reaches.
    world = Flags(sim.store("db"), steps={"aux": {}, "writer": {}, "reader": {}})
    aux_steps, writer_steps, reader_steps = (world.steps[n] for n in ("aux", "writer", "reader"))
    seen = world.seen
    keys = ["data", "flag"] if config["ordered"] else ["flag", "data"]

    async def aux(env: Env) -> None:  # busy elsewhere: first in label order, never involved
        for i in range(2):
            await env.store.put(f"aux/{i}", i)
            aux_steps["n"] = i + 1

    async def writer(env: Env) -> None:
        for n, key in enumerate(keys):
            await env.store.put(key, 42 if key == "data" else 1)
            writer_steps["n"] = n + 1

    async def reader(env: Env) -> None:
        flag = await env.store.get("flag")
        reader_steps["n"] = 1
        if flag:
            data = await env.store.get("data")
            seen.append((flag, data))
        reader_steps["n"] = 2

    sim.process("aux", aux, stores=["db"])
    sim.process("writer", writer, stores=["db"])
    sim.process("reader", reader, stores=["db"])
    return world


@flags.invariant("NoTornRead")
def _no_torn_read(world: Flags) -> bool | str:
    for _flag, data in world.seen:
        if data != 42:
            return f"the reader saw the flag up and the data {data}"
    return True


@flags.fingerprint
def _flags_state(world: Flags) -> Any:
    return [sorted((k, sorted(v.items())) for k, v in world.steps.items()), world.seen]


def test_a_bug_that_needs_one_interleaving_is_found_with_its_shortest_trace() -> None:
    result = explore(flags, flags.config(), Bounds(max_steps=50))
    assert result.exhausted
    v = result.violations["NoTornRead"]
    # The flag, then the reader's two reads: the helper process takes no part.
    assert [labels[i] for labels, i in v.decisions] == [
        "writer@db.put(flag)", "reader@db.get(flag)", "reader@db.get(data)"]
    assert v.message == "the reader saw the flag up and the data None"


def test_the_shortest_trace_replays_identically() -> None:
    result = explore(flags, flags.config(), Bounds(max_steps=50))
    run = record(flags, result, result.violations["NoTornRead"])
    trace = run.trace()
    assert trace.violated == ["NoTornRead"] and len(trace.decisions) == 3
    assert replay_trace(flags, trace).divergence is None


def test_a_trace_found_with_faults_off_replays_under_a_scenario_with_faults() -> None:
    crashing = dataclasses.replace(flags, faults=FaultPlan(max_crashes=1, max_drops=1))
    result = explore(crashing, crashing.config(), Bounds(max_steps=50))
    trace = record(crashing, result, result.violations["NoTornRead"]).trace()
    assert trace.header["faults"]["max_crashes"] == 0
    assert replay_trace(crashing, trace).divergence is None


def test_the_correct_order_is_proven_within_the_bounds() -> None:
    result = explore(flags, flags.config({"ordered": "true"}), Bounds(max_steps=50))
    assert result.proof and not result.violations
    assert result.verdict("NoTornRead") == ("holds", True)
    assert "proven within these bounds" in result.statement()


def test_reduction_runs_fewer_schedules_with_the_same_verdicts() -> None:
    for ordered in ("false", "true"):
        config = flags.config({"ordered": ordered})
        reduced = explore(flags, config, Bounds(max_steps=50))
        plain = explore(flags, config, Bounds(max_steps=50), por=False)
        assert reduced.schedules < plain.schedules
        assert {n: v.steps for n, v in reduced.violations.items()} == {
            n: v.steps for n, v in plain.violations.items()}


def test_states_are_counted_and_pruning_them_keeps_the_verdict() -> None:
    config = flags.config({"ordered": "true"})
    for por in (False, True):
        full = explore(flags, config, Bounds(max_steps=50), por=por)
        pruned = explore(flags, config, Bounds(max_steps=50), por=por, prune_states=True)
        # Pruning keys states by every task's memory too: finer than the fingerprint.
        assert full.states is not None and pruned.states is not None
        assert pruned.states >= full.states
        assert pruned.proof and not pruned.violations
        assert pruned.schedules <= full.schedules
    # Without reduction, reorderings of independent steps meet again in one state.
    assert pruned.ended["state"] >= 0
    plain = explore(flags, config, Bounds(max_steps=50), por=False, prune_states=True)
    assert plain.ended["state"] > 0
    assert plain.schedules <= explore(flags, config, Bounds(max_steps=50), por=False).schedules
    bug = explore(flags, flags.config(), Bounds(max_steps=50), prune_states=True)
    assert bug.violations["NoTornRead"].steps == 3


def test_exploration_is_deterministic() -> None:
    scenario, config = counter(cas="false")
    first = explore(scenario, config, Bounds(max_steps=40))
    again = explore(scenario, config, Bounds(max_steps=40))
    assert summary(first) == summary(again)
    bug = explore(flags, flags.config(), Bounds(max_steps=50), prune_states=True)
    assert summary(bug) == summary(
        explore(flags, flags.config(), Bounds(max_steps=50), prune_states=True))


# -- counter: the acceptance shape, small -----------------------------------------------------


def test_counter_with_cas_is_proven_and_reduction_saves_schedules() -> None:
    scenario, config = counter(increments="1")
    reduced = explore(scenario, config, Bounds(max_steps=40))
    plain = explore(scenario, config, Bounds(max_steps=40), por=False)
    assert reduced.proof and plain.proof
    assert reduced.verdict("NoLostIncrement") == ("holds", True)
    assert reduced.schedules < plain.schedules
    assert reduced.pruned_branches > 0 and plain.pruned_branches == 0


def test_counter_with_a_blind_put_is_found_with_the_shortest_lost_update() -> None:
    scenario, config = counter(cas="false")
    result = explore(scenario, config, Bounds(max_steps=40))
    v = result.violations["NoLostIncrement"]
    # Both read 0, then two puts of 1: the second acknowledges a lost increment.
    assert [labels[i].partition("@")[2] for labels, i in v.decisions] == [
        "db.get(n)", "db.get(n)", "db.put(n)", "db.put(n)"]
    assert result.verdict("NoLostIncrement") == ("violated", True)


# -- approval: the model checker's verdicts, on the real code ------------------------------


def approval_row(mode: str, fresh: str, serialize: str,
                 *checks: str) -> tuple[Scenario, dict[str, Any]]:
    scenario = load("approval")
    if checks:
        scenario = only(scenario, checks)
    return scenario, scenario.config({"spend_mode": mode, "fresh_view": fresh,
                                      "serialize": serialize, "llm": "happy"})


SPEC_INVARIANTS = ("AtMostOnce", "NoResurrection")


@pytest.mark.parametrize(("row", "checks", "actions"), [
    # Spend after the effect: run twice in 6 protocol actions, resurrected in 3.
    (("after", "false", "false"), SPEC_INVARIANTS, {"AtMostOnce": 6, "NoResurrection": 3}),
    # A separate spend write: the lost update in 8.
    (("before", "true", "false"), ("AtMostOnce",), {"AtMostOnce": 8}),
    # Serialised turns, compare-and-set: both hold.
    (("before", "true", "true"), SPEC_INVARIANTS, {}),
    (("cas", "true", "true"), SPEC_INVARIANTS, {}),
])
def test_approval_rows_get_the_model_checkers_verdicts_and_shortest_counterexamples(
        row: tuple[str, str, str], checks: tuple[str, ...], actions: dict[str, int]) -> None:
    scenario, config = approval_row(*row, *checks)
    # One slow timer: the typed "go ahead" comes in while the click's turn still runs.
    result = explore(scenario, config, Bounds(max_steps=scenario.max_steps, slow=1))
    assert result.proof and result.prune_states
    found = {n: protocol_actions(record(scenario, result, v))
             for n, v in result.violations.items()}
    assert found == actions
    for name in checks:
        assert result.verdict(name) == ("violated" if name in actions else "holds", True)


def test_approval_under_a_step_bound_shows_what_plain_search_shows() -> None:
    """Footprints, sleep sets and cached states against every interleaving: the same
    verdicts, the same shortest violations, the same states checked."""
    seen: dict[bool, set[Any]] = {True: set(), False: set()}
    results = {}
    for reduced in (True, False):
        scenario, config = approval_row("after", "true", "true")

        def record_state(w: Any, box: set[Any] = seen[reduced]) -> bool:
            box.add(json.dumps([w.db.snapshot(), len(w.backend.effects), sorted(w.screens.shown),
                                w.screens.answers, w.probe.stale], sort_keys=True))
            return True

        checked = dataclasses.replace(
            scenario, invariants={**scenario.invariants, "Seen": record_state})
        results[reduced] = explore(checked, config, Bounds(max_steps=8, slow=1), por=reduced,
                                   prune_states=None if reduced else False)
    r, p = results[True], results[False]
    assert r.schedules * 5 < p.schedules and r.ended["state"] > 0
    assert {n: v.steps for n, v in r.violations.items()} == {
        n: v.steps for n, v in p.violations.items()} == {"NoResurrection": 6}
    assert seen[True] == seen[False]
    assert r.cut > 0 and p.cut > 0


@pytest.mark.soak
@pytest.mark.skipif(not os.environ.get("DST_SOAK"), reason="soak: set DST_SOAK=1")
@pytest.mark.parametrize("row", [(m, f, z) for m in ("after", "before", "cas")
                                 for f in ("false", "true") for z in ("false", "true")])
def test_every_approval_row_under_a_step_bound_agrees_with_plain_search(
        row: tuple[str, str, str]) -> None:
    scenario, config = approval_row(*row)
    bounds = Bounds(max_steps=11, max_schedules=None)
    reduced = explore(scenario, config, bounds)
    plain = explore(scenario, config, bounds, por=False, prune_states=False)
    assert reduced.exhausted and plain.exhausted
    assert {n: v.steps for n, v in reduced.violations.items()} == {
        n: v.steps for n, v in plain.violations.items()}
    assert (reduced.cut > 0) == (plain.cut > 0)


# -- bounds -------------------------------------------------------------------------------


def test_a_run_cut_at_the_step_bound_is_reported_as_no_proof() -> None:
    scenario, config = counter()
    result = explore(scenario, config, Bounds(max_steps=5))
    assert result.exhausted and result.cut > 0 and not result.proof
    assert result.verdict("NoLostIncrement") == ("not violated", False)
    assert "cut at 5 steps" in result.caveat("NoLostIncrement")
    assert "not for the unbounded system" in result.statement()


def test_a_search_stopped_by_its_schedule_budget_is_no_proof() -> None:
    scenario, config = counter()
    result = explore(scenario, config, Bounds(max_steps=40, max_schedules=10))
    assert result.schedules == 10 and not result.exhausted and result.stopped == "max_schedules"
    assert result.verdict("NoLostIncrement") == ("not violated", False)
    assert result.statement().startswith("not a proof")


def test_each_invariant_gets_its_own_verdict_past_another_ones_violation() -> None:
    """A run goes on past one invariant's violation: the next is seen, and one that
    never breaks is proven."""
    scenario = Scenario("two", doc="x, then y; z never", faults=NO_PREEMPTION)

    @scenario.setup
    def setup(sim: Sim, config: dict[str, Any]) -> Any:
        db = sim.store("db")

        async def p(env: Env) -> None:
            await env.store.put("x", 1)
            await env.store.put("y", 1)

        sim.process("p", p, stores=["db"])
        return db

    scenario.invariant("NoX")(lambda db: db.peek("x") is None)
    scenario.invariant("NoY")(lambda db: db.peek("y") is None)
    scenario.invariant("NoZ")(lambda db: db.peek("z") is None)
    result = explore(scenario, scenario.config(), Bounds(max_steps=10))
    assert result.verdict("NoX") == ("violated", True)
    assert result.verdict("NoY") == ("violated", True)
    assert result.violations["NoY"].steps == 2
    assert result.verdict("NoZ") == ("holds", True)


def test_a_check_masked_by_a_built_in_finding_is_not_proven() -> None:
    scenario = Scenario("masked", doc="a process raises before y is written",
                        faults=NO_PREEMPTION)

    @scenario.setup
    def setup(sim: Sim, config: dict[str, Any]) -> Any:
        db = sim.store("db")

        async def p(env: Env) -> None:
            await env.store.put("x", 1)
            raise ValueError("gave up")

        sim.process("p", p, stores=["db"])
        return db

    scenario.invariant("NoY")(lambda db: db.peek("y") is None)
    result = explore(scenario, scenario.config(), Bounds(max_steps=10))
    assert result.verdict("NoUncaughtError") == ("violated", True)
    assert result.verdict("NoY") == ("not violated", False)
    assert "stopped at another finding first (NoUncaughtError)" in result.caveat("NoY")


# -- what the reduction must never lose ----------------------------------------------------


def test_a_state_only_the_second_order_passes_through_is_checked() -> None:
    """Two independent writes: the invariant breaks only between them, in one order.

    Persistent-set reductions keep one order of independent steps and would never
    pass through that state; sleep sets visit every reachable state.
    """
    scenario = Scenario("order", doc="y must never be set before x", faults=NO_PREEMPTION)

    @scenario.setup
    def setup(sim: Sim, config: dict[str, Any]) -> Any:
        db = sim.store("db")
        for name, key in (("a", "x"), ("b", "y")):
            async def main(env: Env, key: str = key) -> None:
                await env.store.put(key, 1)

            sim.process(name, main, stores=["db"])
        return db

    scenario.invariant("XBeforeY")(
        lambda db: not (db.peek("y") is not None and db.peek("x") is None))
    result = explore(scenario, scenario.config(), Bounds(max_steps=10))
    assert [labels[i] for labels, i in result.violations["XBeforeY"].decisions] == ["b@db.put(y)"]


def test_an_eventually_property_is_checked_without_reduction_only() -> None:
    """Met the first time it holds: in one order of two independent writes it holds in
    between, in the other order never, so reordering them is not harmless."""
    scenario = Scenario("between", doc="x alone must show at some point",
                        faults=NO_PREEMPTION)

    @scenario.setup
    def setup(sim: Sim, config: dict[str, Any]) -> Any:
        db = sim.store("db")
        for name, key in (("a", "x"), ("b", "y")):
            async def main(env: Env, key: str = key) -> None:
                await env.store.put(key, 1)

            sim.process(name, main, stores=["db"])
        return db

    scenario.eventually("XAlone", within=10)(
        lambda db: db.peek("x") is not None and db.peek("y") is None)
    reduced = explore(scenario, scenario.config(), Bounds(max_steps=10))
    # Reduction stays on for the safety checks, and never calls the property proven:
    # which of two orders of independent steps it runs is what the property depends on.
    assert reduced.por and reduced.proof
    if "XAlone" not in reduced.violations:
        assert reduced.verdict("XAlone") == ("not checked", False)
        assert "--no-por" in reduced.caveat("XAlone")
    result = explore(scenario, scenario.config(), Bounds(max_steps=10), por=False)
    assert result.verdict("XAlone") == ("violated", True)
    # The system is at rest after both writes: the violation comes there, not after a
    # wait for the deadline that nothing could change.
    assert [labels[i] for labels, i in result.violations["XAlone"].decisions] == [
        "b@db.put(y)", "a@db.put(x)"]


def mixed(seen: set[Any]) -> Scenario:
    """Store operations on shared and private keys, a scan, sends, deliveries: a checker
    that records every state it is shown, and never fails."""
    scenario = Scenario("mixed", doc="every kind of step the relation reasons about",
                        faults=NO_PREEMPTION)

    @scenario.setup
    def setup(sim: Sim, config: dict[str, Any]) -> Any:
        db = sim.store("db")
        progress: dict[str, Any] = {}

        async def a(env: Env) -> None:
            await env.store.put("x", 1)
            progress["a"] = await env.store.get("y")
            await env.net.send("c", "from a")

        async def b(env: Env) -> None:
            await env.store.put("y", 2)
            progress["b"] = [k for k, _ in await env.store.scan("")]
            await env.net.send("c", "from b")
            await env.store.put("b/done", 1)

        async def c(env: Env) -> None:
            got = []
            while True:
                got.append((await env.net.recv()).body)
                progress["c"] = list(got)
                await env.store.put(f"c/{len(got)}", got[-1])

        sim.process("a", a, stores=["db"])
        sim.process("b", b, stores=["db"])
        sim.process("c", c, stores=["db"], idle=True)
        return db, progress

    def record_state(world: Any) -> bool:
        db, progress = world
        seen.add(json.dumps([db.snapshot(), progress], sort_keys=True))
        return True

    scenario.invariant("Seen")(record_state)
    return scenario


@pytest.mark.parametrize("drops", [0, 1])
def test_reduction_visits_every_state_plain_search_visits(drops: int) -> None:
    reduced: set[Any] = set()
    plain: set[Any] = set()
    bounds = Bounds(max_steps=40, drops=drops)
    r = explore(mixed(reduced), {}, bounds)
    p = explore(mixed(plain), {}, bounds, por=False)
    assert r.proof and p.proof and r.schedules < p.schedules
    assert reduced == plain


def timed(seen: set[Any], *, reads_clock: bool) -> Scenario:
    """A sleeper wakes at 1.0 and writes; a worker writes two keys (reading the clock in
    between, if asked); a reader reads what both wrote.  The checker records every
    state it is shown, time included."""
    scenario = Scenario("timed", doc="a timer among store steps", faults=NO_PREEMPTION)

    @scenario.setup
    def setup(sim: Sim, config: dict[str, Any]) -> Any:
        db = sim.store("db")
        progress: dict[str, Any] = {}

        async def worker(env: Env) -> None:
            await env.store.put("x", 1)
            if reads_clock:
                progress["worker"] = env.clock.now()
            await env.store.put("y", 1)

        async def sleeper(env: Env) -> None:
            await env.clock.sleep(1.0)
            await env.store.put("z", 1)

        async def reader(env: Env) -> None:
            progress["x"] = await env.store.get("x")
            progress["z"] = await env.store.get("z")

        sim.process("worker", worker, stores=["db"])
        sim.process("sleeper", sleeper, stores=["db"])
        sim.process("reader", reader, stores=["db"])
        return db, progress, sim

    def record_state(world: Any) -> bool:
        db, progress, sim = world
        seen.add(json.dumps([db.snapshot(), progress, sim.now], sort_keys=True))
        return True

    scenario.invariant("Seen")(record_state)
    return scenario


@pytest.mark.parametrize("reads_clock", [False, True])
def test_a_timer_commutes_only_with_steps_that_read_no_time(reads_clock: bool) -> None:
    reduced: set[Any] = set()
    plain: set[Any] = set()
    # The timer fires before the store steps only as a slow fault: one allowed.
    r = explore(timed(reduced, reads_clock=reads_clock), {}, Bounds(max_steps=30, slow=1))
    p = explore(timed(plain, reads_clock=reads_clock), {}, Bounds(max_steps=30, slow=1),
                por=False)
    assert r.proof and p.proof and r.schedules < p.schedules
    assert reduced == plain


def turns(seen: set[Any]) -> Scenario:
    """Two tasks of one process (they share its memory) each read a counter, write it
    back plus their own step (1 or 10), and note in a dict they share that they are done.
    Only the tasks' locals tell some states apart (what each read), so caching states is
    sound only with the tasks' memory in the key."""
    scenario = Scenario("turns", doc="two tasks of one process", faults=NO_PREEMPTION)

    @scenario.setup
    def setup(sim: Sim, config: dict[str, Any]) -> Any:
        db = sim.store("db")
        done: dict[str, int] = {}

        async def main(env: Env) -> None:
            async def turn(name: str, by: int) -> None:
                value = await env.store.get("n")
                await env.store.put("n", (value or 0) + by)
                done[name] = by

            async with trio.open_nursery() as nursery:
                nursery.start_soon(turn, "t1", 1, name="t1")
                nursery.start_soon(turn, "t2", 10, name="t2")

        sim.process("p", main, stores=["db"])
        return db, done

    def record_state(world: Any) -> bool:
        db, done = world
        seen.add(json.dumps([db.snapshot(), done], sort_keys=True))
        return True

    scenario.invariant("Seen")(record_state)
    scenario.invariant("NoLostUpdate")(
        lambda world: (world[0].peek("n") or 0) >= sum(world[1].values())
        or "an increment was lost")
    scenario.fingerprint(exact=True)(lambda world: world[1])
    return scenario


def test_an_exact_fingerprint_caches_states_and_keeps_verdicts_and_shortest_violations() -> None:
    cached: set[Any] = set()
    plain: set[Any] = set()
    c = explore(turns(cached), {}, Bounds(max_steps=30))
    p = explore(turns(plain), {}, Bounds(max_steps=30), por=False, prune_states=False)
    assert c.prune_states and not p.prune_states
    assert c.schedules < p.schedules
    # Without reduction, caching alone stops the orders that meet again in one state.
    alone = explore(turns(set()), {}, Bounds(max_steps=30), por=False)
    assert alone.ended["state"] > 0 and alone.schedules < p.schedules
    assert cached == plain
    assert {n: v.steps for n, v in c.violations.items()} == {
        n: v.steps for n, v in p.violations.items()} == {"NoLostUpdate": 4}
    assert c.verdict("NoLostUpdate") == ("violated", True)
    trace = record(turns(set()), c, c.violations["NoLostUpdate"]).trace()
    assert trace.violated == ["NoLostUpdate"]


def test_a_state_that_cannot_be_read_turns_caching_off_not_the_search() -> None:
    import threading

    scenario = Scenario("locked", doc="a task holds a thread lock", faults=NO_PREEMPTION)

    @scenario.setup
    def setup(sim: Sim, config: dict[str, Any]) -> Any:
        db = sim.store("db")

        async def p(env: Env) -> None:
            guard = threading.Lock()
            await env.store.put("x", 1)
            await env.store.put("y", bool(guard))

        sim.process("p", p, stores=["db"])
        sim.process("q", p, stores=["db"])
        return db

    scenario.invariant("NoY")(lambda db: db.peek("y") is None)
    scenario.fingerprint(exact=True)(lambda db: None)
    result = explore(scenario, scenario.config(), Bounds(max_steps=20))
    assert not result.prune_states and "cannot be read" in (result.no_pruning or "")
    assert result.exhausted and result.violations["NoY"].steps == 2


def test_a_race_across_a_checkpoint_needs_a_preemption() -> None:
    scenario = Scenario("checkpoint", doc="check, yield, act", faults=NO_PREEMPTION)

    @scenario.setup
    def setup(sim: Sim, config: dict[str, Any]) -> Any:
        paid: list[str] = []

        async def bank(env: Env) -> None:
            balance = {"left": 100}

            async def withdraw(who: str) -> None:
                await env.store.get("balance")  # parked: resumed one at a time
                if balance["left"] >= 80:
                    await trio.sleep(0)
                    balance["left"] -= 80
                    paid.append(who)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(withdraw, "t1", name="t1")
                nursery.start_soon(withdraw, "t2", name="t2")

        sim.store("db")
        sim.process("bank", bank, stores=["db"])
        return paid

    scenario.invariant("NoOverdraft")(lambda paid: len(paid) <= 1 or "paid twice")
    calm = explore(scenario, scenario.config(), Bounds(max_steps=20))
    assert calm.proof and not calm.violations
    for por in (True, False):
        preempted = explore(scenario, scenario.config(), Bounds(max_steps=20, preemptions=1),
                            por=por)
        assert "NoOverdraft" in preempted.violations


def test_a_data_choice_is_explored() -> None:
    scenario = Scenario("choice", doc="a fake answers one of three ways", faults=NO_PREEMPTION)

    @scenario.setup
    def setup(sim: Sim, config: dict[str, Any]) -> Any:
        got: list[str] = []

        def oracle(op: str, request: Any) -> Any:
            return sim.choose("oracle", ["yes", "no", "maybe"])

        async def asker(env: Env) -> None:
            got.append(await env.services.call("oracle", "ask", {}))

        sim.service("oracle", oracle)
        sim.process("asker", asker)
        return got

    scenario.invariant("NoMaybe")(lambda got: "maybe" not in got)
    result = explore(scenario, scenario.config(), Bounds(max_steps=10))
    assert result.schedules == 3 and result.exhausted
    assert [labels[i] for labels, i in result.violations["NoMaybe"].decisions][-1] \
        == "oracle:maybe"


def test_crashes_are_explored_within_their_budget() -> None:
    config = flags.config({"ordered": "true"})
    calm = explore(flags, config, Bounds(max_steps=30))
    crashing = explore(flags, config, Bounds(max_steps=30, crashes=1))
    assert crashing.schedules > calm.schedules and crashing.proof
    assert crashing.plan.max_crashes == 1 and calm.plan.max_crashes == 0


def test_a_scenario_that_does_not_repeat_itself_is_reported_not_explored() -> None:
    scenario = Scenario("leaky", doc="remembers the runs before it", faults=NO_PREEMPTION)
    runs: list[int] = []

    @scenario.setup
    def setup(sim: Sim, config: dict[str, Any]) -> Any:
        runs.append(1)
        db = sim.store("db")

        async def p(env: Env) -> None:
            await env.store.get("a")
            await env.store.put(f"run/{len(runs)}", 1)  # another key every run

        sim.process("p", p, stores=["db"])
        sim.process("q", p, stores=["db"])
        return db

    with pytest.raises(DivergenceError, match="leaky does not repeat itself"):
        explore(scenario, scenario.config(), Bounds(max_steps=10))


# -- the independence relation -------------------------------------------------------------


def relation() -> Independence:
    return Independence(lambda: ["p", "q", "conn-1"], lambda: ["db", "log"])


@pytest.mark.parametrize(("a", "b", "independent"), [
    ("p@db.put(x)", "q@db.put(y)", True),            # different keys
    ("p@db.put(x)", "q@db.get(x)", False),           # a write and a read of one key
    ("p@db.get(x)", "q/t@db.get(x)", True),          # two reads
    ("p@db.cas(x)", "q@log.put(x)", True),           # different stores
    ("p@db.scan(a/)", "q@db.put(a/1)", False),       # a scan sees every key under its prefix
    ("p@db.scan(a/)", "q@db.put(b/1)", True),
    ("p/t1@db.put(x)", "p/t2@db.put(y)", False),     # tasks of one process share memory
    ("p@send(q)", "q@db.put(x)", True),
    ("p@send(conn-1)", "q@send(conn-1)", True),      # one destination: ids swap, nothing else
    ("p@send(conn-1)", "q@send(p)", True),
    ("deliver:m1(p->q)", "q@db.get(x)", False),      # a delivery runs the receiver
    ("deliver:m1(p->q)", "p@db.put(x)", True),
    ("deliver:m1(p->q)", "deliver:m2(p->conn-1)", True),
    ("deliver:m1(p->q)", "deliver:m2(conn-1->q)", False),
    ("drop:m1(p->q)", "deliver:m1(p->q)", False),    # one message
    ("drop:m1(p->q)", "dup:m2(p->q)", False),        # one budget
    ("drop:m1(p->q)", "q@db.put(x)", True),
    ("timer@1.000", "p@db.get(x)", False),           # dependent with everything
    ("crash:p", "q@db.get(x)", False),
    ("p@call:llm.decide", "q@db.get(x)", False),
    ("p/t@run", "q@db.get(x)", False),
    ("x@db.get(x)", "q@db.get(y)", False),           # unknown process: conservative
    ("p@other.put(x)", "q@db.put(x)", False),        # unknown store: conservative
])
def test_independence(a: str, b: str, independent: bool) -> None:
    rel = relation()
    if any(x.startswith("timer@") or "@call:" in x for x in (a, b)):
        # What a timer wakes, or a handler touches, is known only from footprints
        # (test_independence_with_footprints): without them, dependent.
        assert not independent and not rel.independent(a, b)
        return

    def quiet(label: str) -> Footprint:  # its own process's code ran, and changed only it
        proc = rel.access(label).proc
        procs = frozenset({proc}) if proc is not None else frozenset()
        return Footprint(procs, touched=procs)

    fa, fb = quiet(a), quiet(b)
    assert rel.independent(a, b, fa, fb) is independent
    assert rel.independent(b, a, fb, fa) is independent
    # Without knowing what the steps did, nothing is independent.
    assert not rel.independent(a, b) and not rel.independent(a, b, fa, replace(fb, touched=None))


QUIET_P = Footprint(frozenset({"p"}), touched=frozenset({"p"}))
QUIET_Q = Footprint(frozenset({"q"}), touched=frozenset({"q"}))
TIMED_Q = Footprint(frozenset({"q"}), clock=True, touched=frozenset({"q"}))
WOKE_Q = Footprint(frozenset({"q"}), touched=frozenset({"q"}))


@pytest.mark.parametrize(("touched", "why"), [
    (frozenset({"p", ""}), "p's step changed a module global, a class or function attribute"),
    (frozenset({"p", "q"}), "p's step changed an object q's tasks reach"),
    (None, "what p's step did to Python memory is unknown"),
])
def test_steps_that_change_shared_python_memory_commute_with_nothing(
        touched: frozenset[str] | None, why: str) -> None:
    rel = relation()
    fa = Footprint(frozenset({"p"}), touched=touched)
    assert not rel.independent("p@db.put(x)", "q@db.put(y)", fa, QUIET_Q), why
    assert not rel.independent("q@db.put(y)", "p@db.put(x)", QUIET_Q, fa), why
    assert rel.independent("p@db.put(x)", "q@db.put(y)", QUIET_P, QUIET_Q)


@pytest.mark.parametrize(("a", "fa", "b", "fb", "independent"), [
    ("timer@1.000", QUIET_P, "q@db.get(x)", QUIET_Q, True),    # q never read the time
    ("timer@1.000", QUIET_P, "q@db.get(x)", TIMED_Q, False),   # q read it
    ("timer@1.000", WOKE_Q, "q@db.get(x)", QUIET_Q, False),    # the timer woke q itself
    ("timer@1.000", QUIET_P, "q@call:llm.decide", QUIET_Q, False),  # a handler may read sim.now
    ("p@call:llm.decide", QUIET_P, "q@db.put(x)", QUIET_Q, True),
    ("p@call:llm.decide", QUIET_P, "q@call:tickets.create", QUIET_Q, False),  # shared handlers
    ("p@db.put(x)", QUIET_P, "q@db.put(y)", FOREIGN, False),   # not one atomic step
    ("p@db.put(x)", QUIET_P, "q@db.put(y)", Footprint(frozenset({"p", "q"})), False),
    ("timer@1.000", None, "q@db.get(x)", QUIET_Q, False),      # unknown: dependent
])
def test_independence_with_footprints(a: str, fa: Footprint | None, b: str,
                                      fb: Footprint | None, independent: bool) -> None:
    rel = relation()
    assert rel.independent(a, b, fa, fb) is independent
    assert rel.independent(b, a, fb, fa) is independent


# -- the command ---------------------------------------------------------------------------


def invoke(*args: str) -> Any:
    return CliRunner().invoke(main, ["explore", *args])


def test_explore_command_proves_and_exits_0(tmp_path: Path) -> None:
    result = invoke("counter", "-c", "increments=1", "--max-steps", "40", "--compare-dfs",
                    "--preemptions", "0", "--out", str(tmp_path), "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["proof"] is True and doc["exhausted"] is True
    assert doc["checks"]["NoLostIncrement"] == {"verdict": "holds", "proof": True,
                                                "caveat": None}
    assert doc["plain_dfs"]["schedules"] > doc["schedules"]
    assert doc["bounds"]["max_steps"] == 40 and doc["bounds"]["preemptions"] == 0
    # The bound set below the scenario's plan is named where the proof is stated.
    assert "0 preemptions (the plan allows 2)" in doc["limits"]
    assert "0 preemptions (the plan allows 2)" in doc["statement"]
    assert "seed 0 only" in doc["statement"]


def test_explore_bounds_default_to_the_scenario_fault_plan(tmp_path: Path) -> None:
    plan = load("counter").fault_plan(load("counter").config({"increments": "1"}))
    result = invoke("counter", "-c", "increments=1", "--max-steps", "12",
                    "--out", str(tmp_path), "--json")
    doc = json.loads(result.stdout)
    assert doc["bounds"]["preemptions"] == plan.preemptions > 0
    assert doc["bounds"]["crashes"] == plan.max_crashes
    assert doc["bounds"]["partitions"] == plan.max_partitions
    assert not any("the plan allows" in limit for limit in doc["limits"])


def test_explore_command_writes_a_trace_dst_replay_reproduces(tmp_path: Path) -> None:
    result = invoke("counter", "-c", "increments=2", "-c", "cas=false", "--out", str(tmp_path))
    assert result.exit_code == 1, result.output
    assert "NoLostIncrement: VIOLATED, shortest 4 steps" in result.output
    trace = tmp_path / "counter-explore-NoLostIncrement.jsonl"
    assert f"replay: dst replay {trace}" in result.output
    replayed = CliRunner().invoke(main, ["replay", str(trace)])
    assert replayed.exit_code == 1 and replayed.output.startswith("identical")


def test_explore_command_says_a_cut_search_is_no_proof(tmp_path: Path) -> None:
    result = invoke("counter", "-c", "increments=2", "--max-steps", "5", "--out",
                    str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "NoLostIncrement: not violated" in result.output
    assert "not for the unbounded system" in result.output


TWO_CHECKS = """
from dst import Env, FaultPlan, Scenario

scenario = Scenario("two_checks", doc="x, then y", faults=FaultPlan(preemptions=0))


@scenario.setup
def setup(sim, config):
    db = sim.store("db")

    async def p(env: Env) -> None:
        await env.store.put("x", 1)
        await env.store.put("y", 1)

    sim.process("p", p, stores=["db"])
    return db


scenario.invariant("NoX")(lambda db: db.peek("x") is None)
scenario.invariant("NoY")(lambda db: db.peek("y") is None)
"""


def test_explore_command_says_when_dst_replay_would_stop_at_another_check(
        tmp_path: Path) -> None:
    path = tmp_path / "two_checks.py"
    path.write_text(TWO_CHECKS)
    out = str(tmp_path / "out")
    every = invoke(str(path), "--out", out)
    assert every.exit_code == 1, every.output
    assert f"replay: dst replay {out}/two_checks-explore-NoX.jsonl --scenario {path}" \
        in every.output
    # The run goes on past NoX: NoY has its own shortest violation, which `dst replay`
    # (checking every invariant) stops short of, at NoX.
    assert "NoY: VIOLATED, shortest 2 steps" in every.output
    assert "replay: `dst replay` does not reproduce it (it checks every invariant, and " \
        "another one breaks first on this schedule)" in every.output
    alone = invoke(str(path), "--invariant", "NoY", "--out", out)
    assert alone.exit_code == 1, alone.output
    assert "NoY: VIOLATED, shortest 2 steps" in alone.output
    assert "replay: `dst replay` does not reproduce it (it checks every invariant, and " \
        "another one breaks first on this schedule)" in alone.output


def test_a_replay_that_took_another_path_is_not_blamed_on_another_check() -> None:
    from dst.commands.explore import replay_cause

    other = ('diverged at step 8 (record 13): expected decision {"chosen":1}, got violation '
             '{"invariant":"NoResurrection","message":"m","step":7,"t":0.0}')
    assert "another one breaks first" in replay_cause("AtMostOnce", other)
    same = other.replace("NoResurrection", "AtMostOnce")  # its own check, earlier: stateful
    assert "the replay took another path: a check that keeps state" in \
        replay_cause("AtMostOnce", same)
    ended = 'diverged at step 4 (record 9): expected violation {"invariant":"X"}, got end'
    assert "the replay took another path" in replay_cause("X", ended)


@pytest.mark.parametrize(("args", "message"), [
    (["counter", "-c", "cass=false"], "counter has no switch 'cass'"),
    (["counter", "--budget", "soon"], "is not a duration"),
    (["counter", "--prune-states"], "declares no @scenario.fingerprint"),
    (["counter", "--invariant", "Nope"], "counter has no invariant 'Nope'"),
])
def test_explore_command_bad_input_is_one_line_and_exit_2(args: list[str], message: str,
                                                         tmp_path: Path) -> None:
    result = invoke(*args, "--out", str(tmp_path))
    assert result.exit_code == 2
    assert result.output.startswith("error: ") and message in result.output
    assert result.output.count("\n") == 1
