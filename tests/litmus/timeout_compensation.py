"""timeout_compensation: a timeout around a payment is taken for "not charged".

A shopping agent charges the customer through a payment service, under its own
10-second timeout, and cancels the order (releasing the goods and telling the
customer) when the charge does not come back.  But a call that got no reply
may still have taken effect: the reply was lost after the charge, or it came
back after the agent stopped waiting.  The agent then cancels an order it was
paid for.  Only the payment service's faults show it: a charge that goes
through, or fails before its effect, never does.

With ``fixed=true`` (the default) the agent asks the service whether the order
was charged before it cancels, with an idempotent status query that it retries
until it gets an answer.
"""

from __future__ import annotations

from typing import Any

import structlog
import trio

from dst import Env, FaultPlan, Scenario, ServiceFaults, ServiceUnavailable, Sim

log = structlog.get_logger()

ORDER = "order-17"

scenario = Scenario(
    "timeout_compensation", doc="a lost or late payment reply taken for 'not charged'",
    faults=FaultPlan(services={"payments": ServiceFaults(fail=1, lose_reply=1, delay=1,
                                                         delay_seconds=30.0)}),
)
scenario.switch("fixed", True, doc="ask whether the charge went through before cancelling")
scenario.planted_bug({"fixed": False}, breaks=["NoChargeForCancelledOrder"],
                     doc="no reply is taken for 'not charged'")


async def was_charged(env: Env) -> bool:
    """The status query is idempotent, so asking again after no answer is safe."""
    while True:
        try:
            reply = await env.services.call("payments", "status", {"order": ORDER})
            return bool(reply["charged"])
        except ServiceUnavailable:
            log.info("status unknown, asking again")
            await env.clock.sleep(5)


async def agent(env: Env, fixed: bool) -> None:
    await env.store.put(f"order/{ORDER}", "placed")
    charged = False
    try:
        with trio.move_on_after(10):
            await env.services.call("payments", "charge", {"order": ORDER, "amount": 30})
            charged = True
    except ServiceUnavailable:
        log.info("charge got no reply")
    if not charged and fixed:
        charged = await was_charged(env)
    if charged:
        await env.store.put(f"order/{ORDER}", "paid")
        log.info("order paid")
    else:
        await env.store.put(f"order/{ORDER}", "cancelled")  # release the goods, tell the customer
        log.info("order cancelled")


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> Any:
    charges: dict[str, int] = {}

    def payments(op: str, request: Any) -> Any:
        if op == "charge":  # keyed by order: charging an order twice charges it once
            charges[request["order"]] = request["amount"]
            return {"ok": True}
        return {"charged": request["order"] in charges}

    sim.service("payments", payments)
    db = sim.store("db")
    sim.process("agent", lambda env: agent(env, config["fixed"]), stores=["db"])
    return db, charges


@scenario.at_end("NoChargeForCancelledOrder")
def no_charge_for_cancelled_order(world: Any) -> bool | str:
    db, charges = world
    if db.peek(f"order/{ORDER}") == "cancelled" and ORDER in charges:
        return f"{ORDER} was cancelled, yet the customer was charged {charges[ORDER]}"
    return True
