"""half_update: a deadline cancels a rebalance between the two halves of a move.

An agent runtime shares one token allowance among its conversations.  Each
round it reads the usage figures, moves allowance from quiet conversations to
busy ones in memory, and saves a snapshot.  The rebalance runs under a deadline
(``move_on_after``) so that it never delays the next turn, and yields with
``trio.sleep(0)`` to stay responsive during a long rebalance.  In the buggy
order it yields between taking the allowance from one conversation and giving
it to the other: a deadline expiring there leaves the allowance taken and
never given, and the next snapshot saves the torn state.  No ``Env`` call lies
between the two halves.

With ``fixed=true`` (the default) the rebalance yields between two moves, never
inside one, so a deadline can cut a rebalance short but never tear a move.
"""

from __future__ import annotations

from typing import Any

import structlog
import trio

from dst import Env, FaultPlan, Scenario, Sim

log = structlog.get_logger()

START = {"chat-a": 400, "chat-b": 100, "chat-c": 500}
TOTAL = sum(START.values())
MOVES = (("chat-a", "chat-b", 150), ("chat-c", "chat-b", 100))
ROUNDS = 2

# The rebalance is runnable all through its window (a ``trio.sleep(0)``): the
# deadline expires there only if the rebalance is slow, one "slow" fault (see
# FaultPlan.max_slow).
scenario = Scenario("half_update", doc="a deadline tears an in-memory move in two",
                    faults=FaultPlan(max_slow=1))
scenario.switch("fixed", True, doc="yield between moves, never inside one")
scenario.planted_bug({"fixed": False}, breaks=["AllowanceConserved"],
                     doc="a cancellation point between the two halves of a move")


async def rebalance(allowance: dict[str, int], fixed: bool) -> None:
    for source, dest, amount in MOVES:
        allowance[source] -= amount
        if not fixed:
            await trio.sleep(0)  # the bug: a cancellation point inside the move
        allowance[dest] += amount
        if fixed:
            await trio.sleep(0)  # between two moves: the allowance is whole here


async def runtime(env: Env, fixed: bool) -> None:
    allowance = dict(START)
    for round_ in range(ROUNDS):
        await env.store.get("usage")  # the figures the moves are based on
        with trio.move_on_after(0.5) as deadline:
            await rebalance(allowance, fixed)
        if deadline.cancelled_caught:
            log.info("rebalance cut short", round=round_)
        await env.store.put("snapshot", allowance)
        log.info("snapshot saved", round=round_, allowance=allowance)


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> Any:
    db = sim.store("db")
    db.put("snapshot", START)
    sim.process("runtime", lambda env: runtime(env, config["fixed"]), stores=["db"])
    return db


@scenario.invariant("AllowanceConserved")
def allowance_conserved(db: Any) -> bool | str:
    total = sum(db.peek("snapshot").values())
    return total == TOTAL or f"the saved allowance adds up to {total}, not {TOTAL}"
