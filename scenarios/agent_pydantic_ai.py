"""agent_pydantic_ai: a pydantic-ai agent places two orders at once; each is charged once.

Nothing here is written for dst: the agent is a plain ``pydantic_ai.Agent`` with
one tool, ``place_order``, which charges through the ``payments`` service
(``env.services``), and its model is pydantic-ai's own ``FunctionModel``: a
shopping model that answers the user's basket with two tool calls in one
response (pydantic-ai runs them as two concurrent asyncio tasks), then reports.
The agent runs as an asyncio process (``runtime="asyncio"``), unmodified.

A charge whose reply is lost (the service charged, the agent never heard) makes
the tool raise ``ModelRetry``; pydantic-ai hands the retry prompt back to the
model, and the model asks for that order again.  With ``idempotent=true`` (the
default) the tool sends a key made from the basket and the item, and the service
answers a repeated key with the first charge; with ``idempotent=false`` the retry
charges the customer a second time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import structlog
from pydantic_ai import Agent, ModelRetry, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from dst import Env, FaultPlan, Scenario, ServiceFaults, ServiceUnavailable, Sim

log = structlog.get_logger()

#: The customer's basket: item -> quantity; the shop's prices in cents.
BASKET = {"A-1": 1, "B-2": 2}
PRICES = {"A-1": 1200, "B-2": 450}
ORDER = "order-7"


def _faults(config: dict[str, Any]) -> FaultPlan:
    return FaultPlan(max_crashes=0, preemptions=config["preemptions"],
                     services={"payments": ServiceFaults(fail=1, lose_reply=1)})


scenario = Scenario(
    "agent_pydantic_ai",
    doc="a pydantic-ai agent's two parallel tool calls each charge once, retries included",
    faults=_faults,
)
scenario.switch("idempotent", True,
                doc="charge with an idempotency key per order and item (false: a retried "
                    "call charges again)")
scenario.switch("preemptions", 1, choices=[0, 1, 2], doc="preemptions at checkpoints")
scenario.planted_bug({"idempotent": False}, breaks=["ChargedOnce"],
                     doc="a tool call retried after a lost reply charges twice")


# -- the model: pydantic-ai's FunctionModel ------------------------------------------------


def shop_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Orders every item of the basket in one response (two tool calls), asks again for
    an item whose call came back with a retry prompt, and reports when all are placed."""
    last = messages[-1]
    assert isinstance(last, ModelRequest)
    if len(messages) == 1:
        return ModelResponse(parts=[
            ToolCallPart("place_order", {"item": item, "quantity": qty}, tool_call_id=f"c-{item}")
            for item, qty in BASKET.items()])
    calls: dict[str, ToolCallPart] = {
        part.tool_call_id: part for m in messages if isinstance(m, ModelResponse)
        for part in m.parts if type(part) is ToolCallPart}
    again = [calls[retried] for retried in map(_retried, last.parts) if retried in calls]
    if again:
        turn = len(messages)
        return ModelResponse(parts=[
            ToolCallPart(call.tool_name, call.args, tool_call_id=f"{call.tool_call_id}-{turn}")
            for call in again])
    placed = sorted(str(part.content) for m in messages if isinstance(m, ModelRequest)
                    for part in m.parts
                    if isinstance(part, ToolReturnPart) and _retried(part) is None)
    return ModelResponse(parts=[TextPart("; ".join(placed))])


def _retried(part: object) -> str | None:
    """The id of a tool call that raised ``ModelRetry`` (a ``ToolReturnPart`` with
    outcome ``retried`` in pydantic-ai 2, a ``RetryPromptPart`` before); else None."""
    if isinstance(part, RetryPromptPart) or (
            isinstance(part, ToolReturnPart) and getattr(part, "outcome", None) == "retried"):
        return part.tool_call_id
    return None


# -- the agent -------------------------------------------------------------------------------


@dataclass
class Shop:
    env: Env
    order: str
    idempotent: bool


shop = Agent(FunctionModel(shop_model), deps_type=Shop, retries=3,
             instructions="Place the customer's order, one call per item.")


@shop.tool
async def place_order(ctx: RunContext[Shop], item: str, quantity: int) -> str:
    """Charge the customer for ``quantity`` of ``item``."""
    request: dict[str, Any] = {"order": ctx.deps.order, "item": item, "quantity": quantity}
    if ctx.deps.idempotent:
        request["key"] = f"{ctx.deps.order}/{item}"
    try:
        reply = await ctx.deps.env.services.call("payments", "charge", request)
    except ServiceUnavailable as exc:
        log.info("charge unanswered", item=item)
        raise ModelRetry(f"the payment service did not answer for {item}; try again") from exc
    amount = reply.get("amount") if isinstance(reply, dict) else reply
    return f"{item}: charged {amount}"


async def customer(env: Env, idempotent: bool) -> None:
    result = await shop.run(f"Buy {BASKET}", deps=Shop(env, ORDER, idempotent))
    log.info("agent answered", output=result.output)
    await env.store.put(f"answer/{ORDER}", result.output)


# -- the payments service ------------------------------------------------------------------


@dataclass
class Payments:
    """Charges by order and item; a repeated idempotency key gets the first reply."""

    charges: dict[str, int] = field(default_factory=dict)
    replies: dict[str, Any] = field(default_factory=dict)

    def handle(self, op: str, request: Any) -> Any:
        key = request.get("key")
        if key is not None and key in self.replies:
            return self.replies[key]
        item = str(request["item"])
        what = f"{request['order']}/{item}"
        self.charges[what] = self.charges.get(what, 0) + 1
        reply = {"amount": PRICES[item] * int(request["quantity"])}
        if key is not None:
            self.replies[key] = reply
        return reply


@dataclass
class World:
    payments: Payments
    answers: Any


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> World:
    payments = Payments()
    sim.service("payments", payments.handle, suffers=("fail", "lose_reply"))
    world = World(payments, sim.store("answers"))
    idempotent = bool(config["idempotent"])

    async def main(env: Env) -> None:
        await customer(env, idempotent)

    sim.process("customer", main, stores=["answers"], runtime="asyncio")
    return world


@scenario.invariant("ChargedOnce")
def charged_once(world: World) -> bool | str:
    for what, n in sorted(world.payments.charges.items()):
        if n > 1:
            return f"{what} was charged {n} times"
    return True


@scenario.at_end("OrderAnswered")
def order_answered(world: World) -> bool | str:
    answer = world.answers.peek(f"answer/{ORDER}")
    return answer is not None or f"{ORDER} was never answered"
