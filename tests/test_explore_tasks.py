"""Steps of two tasks of one process: when they commute, and the order options are tried in.

Each scenario's checker records every state it is shown; a search with reduction must be
shown exactly the states plain depth-first search is shown (every interleaving), and find
each violation as short.
"""

from __future__ import annotations

import json
from typing import Any

import trio

from dst import Env, FaultPlan, Scenario, Sim
from dst.explore.exhaustive import Bounds, Exploration, explore
from dst.explore.footprint import Footprint, Touch, conflict
from dst.explore.independence import Access, in_process_commute
from dst.explore.ordering import Ordering

NO_PREEMPTION = FaultPlan(preemptions=0)
BOUNDS = Bounds(max_steps=40)


def two_tasks(seen: set[Any], *, share: str) -> Scenario:
    """One process, two tasks t1 and t2, a store and an observer both tasks hold.

    ``share``: ``"nothing"`` (each writes its own keys, keeps its own locals),
    ``"object"`` (t1 appends to a list that t2 reads between two choice points,
    noting what it read where the checker sees it) or ``"store"`` (t2 reads a key t1
    writes straight from the store, without a choice point, as an observer handed
    the store would, and writes what it read the same way).  In the last two, the
    state where t2 read before t1's step is seen only if the two steps are taken
    in both orders.
    """
    scenario = Scenario(f"tasks_{share}", doc="two tasks of one process",
                        faults=NO_PREEMPTION)

    @scenario.setup
    def setup(sim: Sim, config: dict[str, Any]) -> Any:
        db = sim.store("db")
        shared: dict[str, Any] = {"log": []}

        async def t1(env: Env) -> None:
            await env.store.put("t1/a", 1)
            if share == "object":
                shared["log"].append("t1")
            await env.store.put("t1/b", 2)

        async def t2(env: Env) -> None:
            await env.store.get("t2/a")
            if share == "object":
                shared["t2"] = len(shared["log"])
            elif share == "store":
                db.put("t2/peeked", db.peek("t1/a") or 0)
            await env.store.put("t2/done", 1)

        async def main(env: Env) -> None:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(t1, env, name="t1")
                nursery.start_soon(t2, env, name="t2")

        sim.process("p", main, stores=["db"])
        return db, shared

    def record_state(world: Any) -> bool:
        db, shared = world
        seen.add(json.dumps([db.snapshot(), shared], sort_keys=True))
        return True

    scenario.invariant("Seen")(record_state)
    scenario.invariant("T2SawNothing")(
        lambda world: (world[1].get("t2") in (None, 0)
                       and world[0].peek("t2/peeked") in (None, 0)) or "t2 saw t1's step")
    scenario.fingerprint(exact=True)(lambda world: world[1])
    return scenario


def both(share: str) -> tuple[Exploration, Exploration, set[Any], set[Any]]:
    reduced: set[Any] = set()
    plain: set[Any] = set()
    r = explore(two_tasks(reduced, share=share), {}, BOUNDS)
    p = explore(two_tasks(plain, share=share), {}, BOUNDS, por=False, prune_states=False)
    assert r.proof and p.proof and r.prune_states
    return r, p, reduced, plain


def shortest(result: Exploration) -> dict[str, int]:
    return {n: v.steps for n, v in result.violations.items()}


def test_steps_of_two_tasks_on_their_own_keys_commute() -> None:
    r, p, reduced, plain = both("nothing")
    # Only one process: every reordering the search skipped, it skipped by the tasks' views.
    assert r.pruned_branches > 0 and r.schedules < p.schedules
    assert reduced == plain
    assert shortest(r) == shortest(p) == {}


def test_without_state_caching_two_tasks_still_commute_on_what_they_reach() -> None:
    # What each task reaches is read whenever reduction is on, not only to cache states.
    seen: set[Any] = set()
    r = explore(two_tasks(seen, share="nothing"), {}, BOUNDS, prune_states=False)
    plain: set[Any] = set()
    p = explore(two_tasks(plain, share="nothing"), {}, BOUNDS, por=False, prune_states=False)
    assert r.proof and r.pruned_branches > 0 and seen == plain and p.schedules > r.schedules


def test_tasks_sharing_an_object_are_explored_in_both_orders() -> None:
    r, p, reduced, plain = both("object")
    assert reduced == plain
    assert shortest(r) == shortest(p) and "T2SawNothing" in shortest(r)


def test_a_store_read_without_a_choice_point_orders_two_tasks() -> None:
    r, p, reduced, plain = both("store")
    assert reduced == plain
    assert shortest(r) == shortest(p) and "T2SawNothing" in shortest(r)


# -- the relation, on labels and footprints --------------------------------------------------


def task_option(task: str, kind: str = "store", key: str = "k", *, write: bool = True,
                dest: str = "") -> Access:
    return Access(kind, proc="p", store="db" if kind == "store" else "svc", key=key,
                  write=write, dest=dest, task=task)


def ran(task: str, *touched: Touch, spawned: bool = False,
        memory: frozenset[str] | None = frozenset({"p"})) -> Footprint:
    return Footprint(frozenset({"p"}), tasks=frozenset({task}), spawned=spawned,
                     stores=frozenset(touched), touched=memory)


def test_two_tasks_options_commute_only_on_what_their_steps_did() -> None:
    a, b = task_option("p/t1", key="x"), task_option("p/t2", key="y")
    fa, fb = ran("p/t1", Touch("db", "x", True)), ran("p/t2", Touch("db", "y", True))
    assert in_process_commute(a, b, fa, fb)
    # The same key, one writing.
    assert not in_process_commute(a, task_option("p/t2", key="x", write=False), fa,
                                  ran("p/t2", Touch("db", "x", False)))
    # A read of x straight from the store, after t2's own operation on y.
    assert not in_process_commute(a, b, fa, ran("p/t2", Touch("db", "y", True),
                                                Touch("db", "x", False)))
    # A scan of a prefix reads every key under it.
    assert not in_process_commute(a, b, fa, ran("p/t2", Touch("db", "", False, prefix=True)))
    # Another task ran too (woken by t2's step), or a task was started.
    assert not in_process_commute(
        a, b, fa, Footprint(frozenset({"p"}), tasks=frozenset({"p/t2", "p/t3"})))
    assert not in_process_commute(a, b, fa, ran("p/t2", spawned=True))
    # One task's two options, two service calls, two sends on one route.
    assert not in_process_commute(a, task_option("p/t1", key="y"), fa, fa)
    calls = task_option("p/t1", "call"), task_option("p/t2", "call")
    assert not in_process_commute(*calls, ran("p/t1"), ran("p/t2"))
    assert in_process_commute(calls[0], b, ran("p/t1"), fb)
    sends = task_option("p/t1", "send", dest="q"), task_option("p/t2", "send", dest="q")
    assert not in_process_commute(*sends, ran("p/t1"), ran("p/t2"))
    assert in_process_commute(sends[0], task_option("p/t2", "send", dest="r"),
                              ran("p/t1"), ran("p/t2"))
    # A step that changed a module global (or class or function attribute), or
    # whose effect on them is unknown, commutes with no other task's.
    for memory in (frozenset({"p", ""}), None):
        assert not in_process_commute(a, b, ran("p/t1", Touch("db", "x", True), memory=memory),
                                      fb)


def test_store_touches_conflict_on_a_written_key_or_prefix() -> None:
    assert conflict([Touch("db", "a/1", True)], [Touch("db", "a/", False, prefix=True)])
    assert not conflict([Touch("db", "a/1", True)], [Touch("db", "b/", False, prefix=True)])
    assert not conflict([Touch("db", "x", False)], [Touch("db", "x", False)])
    assert not conflict([Touch("db", "x", True)], [Touch("log", "x", True)])


# -- the order options are tried in ---------------------------------------------------------


def test_options_of_a_kind_that_opened_fewer_options_are_tried_first() -> None:
    ordering = Ordering()
    request, reply = "deliver:m1(conn->agent)", "deliver:m2(agent->conn)"
    assert ordering.order((request, reply)) == (0, 1)  # nothing learnt: the kernel's order
    # A request starts a turn (two new options); a reply ends the exchange (none).
    ordering.learn(request, (request, reply), (reply, "agent/t@db.get(k)", "agent/t@send(x)"))
    ordering.learn(reply, (reply, "other"), ("other",))
    # Kinds, not labels: the numbers history hands out do not count.
    assert ordering.order(("deliver:m7(conn->agent)", "deliver:m9(agent->conn)")) == (1, 0)
    assert ordering.order(("timer@1.0", "deliver:m7(conn->agent)")) == (0, 1)
