"""langgraph_approval: a LangGraph approval step charges once, however it is resumed.

An ordinary LangGraph graph, written as anyone would: a ``StateGraph`` with an
``InMemorySaver`` checkpointer whose ``approve`` node charges the customer
through the ``payments`` service (``env.services``) and stops for a human's
answer with ``interrupt()``; the agent resumes the thread with
``Command(resume=...)``.  It runs unmodified as an asyncio process.

Two ways to charge twice, each a switch:

* ``effect=before``: the node charges *before* its ``interrupt()``.  LangGraph
  resumes an interrupted node by running it again from its first line, so the
  charge runs on the first invocation and again on the resume.  The correct node
  charges after the ``interrupt()`` (``effect=after``, the default), or sends an
  idempotency key (``idempotent=true``).
* ``resumers=2``: the approval arrives twice at once (a button click and a
  typed "yes"), and each resumes the thread.  Both load the same interrupted
  checkpoint before either writes the next, so both run the node past its
  ``interrupt()``.  One resume (``resumers=1``) is correct, as is the key.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, TypedDict

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from dst import Env, FaultPlan, Scenario, Sim

ORDER = "order-9"
AMOUNT = 4000

scenario = Scenario(
    "langgraph_approval",
    doc="a LangGraph node that charges and interrupts for approval charges once",
    faults=FaultPlan(max_crashes=0, preemptions=2),
)
scenario.switch("effect", "after", choices=["after", "before"],
                doc="charge after the interrupt (before: the resumed node charges again)")
scenario.switch("resumers", 1, choices=[1, 2], doc="approvals that resume the thread at once")
scenario.switch("idempotent", False, doc="charge with an idempotency key per order")
scenario.planted_bug({"effect": "before"}, breaks=["ChargedOnce"],
                     doc="a node resumed from its start repeats the charge before its interrupt")
scenario.planted_bug({"resumers": 2}, breaks=["ChargedOnce"],
                     doc="two resumes of one interrupt both run the node past it")


class Checkout(TypedDict, total=False):
    order: str
    amount: int
    status: str


def build_graph(env: Env, effect: str, idempotent: bool) -> Any:
    async def charge(state: Checkout) -> None:
        request: dict[str, Any] = {"order": state["order"], "amount": state["amount"]}
        if idempotent:
            request["key"] = f"charge/{state['order']}"
        await env.services.call("payments", "charge", request)

    async def approve(state: Checkout) -> Checkout:
        if effect == "before":
            await charge(state)
        answer = interrupt({"question": f"charge {state['amount']} for {state['order']}?"})
        if answer != "yes":
            return {"status": "declined"}
        if effect == "after":
            await charge(state)
        return {"status": "charged"}

    graph = StateGraph(Checkout)
    graph.add_node("approve", approve)
    graph.add_edge(START, "approve")
    graph.add_edge("approve", END)
    return graph.compile(checkpointer=InMemorySaver())


async def agent(env: Env, effect: str, resumers: int, idempotent: bool) -> None:
    graph = build_graph(env, effect, idempotent)
    thread = {"configurable": {"thread_id": ORDER}}
    first = await graph.ainvoke({"order": ORDER, "amount": AMOUNT}, thread)
    assert "__interrupt__" in first, first
    # The human says yes, through each channel it was asked on.
    results = await asyncio.gather(*(graph.ainvoke(Command(resume="yes"), thread)
                                     for _ in range(resumers)))
    await env.store.put(f"status/{ORDER}", results[0].get("status"))


@dataclass
class Payments:
    """Charges per order; a repeated idempotency key gets the first reply again."""

    charges: dict[str, int] = field(default_factory=dict)
    keys: set[str] = field(default_factory=set)

    def handle(self, op: str, request: Any) -> Any:
        key = request.get("key")
        if key is not None and key in self.keys:
            return {"ok": True, "repeated": True}
        if key is not None:
            self.keys.add(key)
        order = str(request["order"])
        self.charges[order] = self.charges.get(order, 0) + 1
        return {"ok": True}


@dataclass
class World:
    payments: Payments
    db: Any


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> World:
    payments = Payments()
    sim.service("payments", payments.handle)
    world = World(payments, sim.store("db"))
    effect, resumers, idempotent = config["effect"], config["resumers"], config["idempotent"]

    async def main(env: Env) -> None:
        await agent(env, effect, resumers, idempotent)

    sim.process("agent", main, stores=["db"], runtime="asyncio")
    return world


@scenario.invariant("ChargedOnce")
def charged_once(world: World) -> bool | str:
    n = world.payments.charges.get(ORDER, 0)
    return n <= 1 or f"{ORDER} was charged {n} times"


@scenario.at_end("ApprovedAndCharged")
def approved_and_charged(world: World) -> bool | str:
    status = world.db.peek(f"status/{ORDER}")
    if status != "charged":
        return f"{ORDER} ended {status!r}"
    n = world.payments.charges.get(ORDER, 0)
    return n == 1 or f"{ORDER} ended charged, and was charged {n} times"
