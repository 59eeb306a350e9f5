"""``Replenish``: one replenishment of one SKU, as an agentic loop on durable steps.

Each turn asks the decider (a durable step: the model's choice is logged, so a
replay does not ask again and cannot get a different answer) to pick one of
the tools allowed in the current state, runs it, and applies its result.  A
choice outside the allowed set is refused and costs the turn.  After
``MAX_TURNS`` the replenishment gives up.  It ends by telling its entity the
outcome (a signal: exactly once, even across a crash).
"""

from __future__ import annotations

from typing import Any

import structlog

from dst.env import Json
from dst.runtime.durable import Context, StepCall, StepFailed

from .options import MAX_TURNS, Options
from .tools import BY_NAME, TOOLS, State, new_state

log = structlog.get_logger()


def order_quantity(ctx: Context, args: dict[str, Any], o: Options) -> int:
    """Order up to 2x safety stock (version 1) or 3x (version 2).

    The version branch is what lets version-2 code replay a log written by
    version 1: the quantity is an input of logged steps, so computing it the new
    way for an old run would make the replay ask for different steps.
    """
    new_policy = ctx.patched(2) if o.version_branch else o.code_version >= 2
    target = (3 if new_policy else 2) * args["safety"]
    return max(1, int(target - args["on_hand"]))


async def replenish(ctx: Context, o: Options) -> Json:
    args: Any = ctx.args
    s: State = new_state(args["sku"], order_quantity(ctx, args, o), args["entity"])
    for turn in range(1, MAX_TURNS + 1):
        allowed = [t.name for t in TOOLS if t.allowed(s, o)]
        view: dict[str, Json] = {k: s[k] for k in ("po", "price", "approved_up_to", "order",
                                                   "overdue", "goods", "closed", "rejected")}

        request: dict[str, Json] = {"wf": ctx.id, "turn": turn, "allowed": list(allowed),
                                    "state": view}

        async def decide(call: StepCall, request: dict[str, Json] = request) -> Json:
            return await ctx.env.services.call("decider", "choose", request)

        listed: list[Json] = list(allowed)
        choice = await ctx.step("decide", decide, {"turn": turn, "allowed": listed})
        if choice not in allowed:
            log.info("refused tool", wf=ctx.id, turn=turn, tool=choice)
            continue
        tool = BY_NAME[str(choice)]
        if not ctx.replaying:
            log.info("turn", wf=ctx.id, turn=turn, tool=tool.name)
        try:
            result = await tool.execute(ctx, s, o)
        except StepFailed as exc:
            log.info("tool failed", wf=ctx.id, tool=tool.name, error=str(exc))
            continue
        tool.apply(s, result, o)
        if s["outcome"]:
            break
    else:
        s["outcome"] = "given_up"
    log.info("replenishment ended", wf=ctx.id, outcome=s["outcome"], po=s["po"])
    await ctx.signal(s["entity"], {"kind": "child_done", "child": ctx.id,
                                   "outcome": s["outcome"], "po": s["po"]})
    return {"outcome": s["outcome"], "po": s["po"], "qty": s["qty"], "turns": turn}
