"""The Replenisher's tools: each says when it is allowed, what it does, and how it changes state.

The business rules live in ``allowed``, not in the decider's prompt: whatever
the model picks, ``place_order`` is unavailable until the manager has approved
a price at least the current one, ``chase_supplier`` until the supplier is
overdue (and at most ``MAX_CHASES`` times), ``done`` while an order may exist
and has not arrived.  ``execute`` reaches the world only through durable steps
(``ctx.step`` / ``ctx.wait``), so after a crash it returns the logged result;
``apply`` is a pure function of state and result, so replay rebuilds the same
state.  (``read_supplier_reply`` and ``done`` only read the state, so they are
not steps: replay recomputes them.)  State is a JSON dict, so it can be logged and shown.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from dst.env import Json
from dst.runtime.durable import NO_RETRY, Context, StepCall, StepFailed

from .options import CHASE_RETRY, MAX_CHASES, PLACE_ORDER_RETRY, Options

State = dict[str, Any]

#: Waits the agent makes for a manager who does not answer before it gives up.
MAX_APPROVAL_WAITS = 3


def new_state(sku: str, qty: int, entity: str) -> State:
    return {
        "sku": sku, "qty": qty, "entity": entity, "quote": None, "price": None, "po": None,
        "approval_asked_at": None, "approved_up_to": None, "rejected": False,
        "approval_waits": 0, "order": None, "reply": None, "reply_read": False,
        "overdue": False, "chases": 0, "goods": False, "closed": False, "outcome": None,
    }


def _in_flight(s: State) -> bool:
    return s["order"] in ("placed", "unknown")


def _needs_approval(s: State) -> bool:
    return s["approved_up_to"] is None or s["approved_up_to"] < s["price"]


async def _call(ctx: Context, service: str, op: str, request: dict[str, Json]) -> Json:
    return await ctx.env.services.call(service, op, request)


def _service_step(service: str, op: str, request: dict[str, Json],
                  ctx: Context) -> Callable[[StepCall], Awaitable[Json]]:
    async def fn(call: StepCall) -> Json:
        return await _call(ctx, service, op, dict(request, key=call.key, wf=ctx.id))
    return fn


@dataclass(frozen=True)
class Tool:
    name: str
    #: The business rule: may the decider pick this tool in this state?
    allowed: Callable[[State, Options], bool]
    execute: Callable[[Context, State, Options], Awaitable[Json]]
    apply: Callable[[State, Json, Options], None]


# -- get_quotes ----------------------------------------------------------------

_APPROVED_IN_TEXT = re.compile(r"approved \$([0-9]+(?:\.[0-9]+)?)")


async def _get_quotes(ctx: Context, s: State, o: Options) -> Json:
    req: dict[str, Json] = {"sku": s["sku"], "qty": s["qty"]}
    return await ctx.step("tool:get_quotes", _service_step("supplier", "quote", req, ctx), req,
                          retry=CHASE_RETRY)


def _apply_quotes(s: State, r: Any, o: Options) -> None:
    s["quote"] = r
    s["price"] = r["price"]
    if o.trust_email:  # planted bug: a supplier's words taken as the manager's
        found = _APPROVED_IN_TEXT.search(str(r.get("note", "")))
        if found:
            s["approved_up_to"] = float(found.group(1))


# -- purchase order and approval -------------------------------------------------

async def _draft(ctx: Context, s: State, o: Options) -> Json:
    req: dict[str, Json] = {"sku": s["sku"], "qty": s["qty"], "price": s["price"]}
    return await ctx.step("tool:draft_purchase_order",
                          _service_step("erp", "draft_po", req, ctx), req)


def _apply_draft(s: State, r: Any, o: Options) -> None:
    s["po"] = r["po"]


async def _request_approval(ctx: Context, s: State, o: Options) -> Json:
    req: dict[str, Json] = {"po": s["po"], "qty": s["qty"], "price": s["price"],
                            "reply_to": s["entity"]}
    return await ctx.step("tool:request_approval",
                          _service_step("manager", "request_approval", req, ctx), req)


def _apply_request(s: State, r: Any, o: Options) -> None:
    s["approval_asked_at"] = s["price"]


async def _wait_approval(ctx: Context, s: State, o: Options) -> Json:
    msg, _ = await ctx.wait(["approval"], timeout=7 * o.day, match={"po": s["po"]})
    return msg


def _apply_approval(s: State, r: Any, o: Options) -> None:
    if r is None:
        s["approval_waits"] += 1
    elif r.get("from") != "manager":
        return  # approvals count only through the manager's own channel
    elif r.get("approved"):
        s["approved_up_to"] = r["up_to"]
    else:
        s["rejected"] = True


# -- the order -----------------------------------------------------------------

async def _place_order(ctx: Context, s: State, o: Options) -> Json:
    req: dict[str, Json] = {"po": s["po"], "sku": s["sku"], "qty": s["qty"],
                            "cap": s["approved_up_to"] if o.price_cap else None,
                            "reply_to": s["entity"]}

    async def fn(call: StepCall) -> Json:
        # The PO number is the idempotency key: the same for every attempt and replay.
        key = f"{s['po']}#{call.attempt}" if o.key_per_attempt else s["po"]
        return await _call(ctx, "supplier", "order", dict(req, key=key, wf=ctx.id))

    try:
        return await ctx.step("tool:place_order", fn, req,
                              retry=PLACE_ORDER_RETRY if o.retry else NO_RETRY)
    except StepFailed:
        return {"status": "no answer" if o.retry else "failed"}


def _apply_order(s: State, r: Any, o: Options) -> None:
    status = r["status"]
    if status == "accepted":
        s["order"] = "placed"
    elif status == "price_changed":
        s["price"] = r["price"]  # needs a new approval before ordering again
    elif status == "failed" or o.unknown_is_failure:
        # planted bugs: no retry policy (one failure ends the run), or "no answer"
        # taken for "no order" (the supplier may hold it)
        s["outcome"] = "given_up"
    else:
        s["order"] = "unknown"


async def _wait_reply(ctx: Context, s: State, o: Options) -> Json:
    msg, _ = await ctx.wait(["supplier_reply"], timeout=7 * o.day, match={"po": s["po"]})
    return msg


def _apply_reply(s: State, r: Any, o: Options) -> None:
    if r is None:
        s["overdue"] = True
    else:
        s["reply"] = r


async def _read_reply(ctx: Context, s: State, o: Options) -> Json:
    # The reply is already in the state (a logged wait brought it): reading it
    # touches nothing outside, so it is not a step of its own.
    reply = s["reply"]
    return {"status": reply.get("status"), "text": reply.get("text", "")}


def _apply_read(s: State, r: Any, o: Options) -> None:
    s["reply_read"] = True
    if r["status"] == "accepted":
        s["order"] = "placed"
    if o.trust_email:
        found = _APPROVED_IN_TEXT.search(str(r.get("text", "")))
        if found:
            s["approved_up_to"] = float(found.group(1))


async def _chase(ctx: Context, s: State, o: Options) -> Json:
    req: dict[str, Json] = {"po": s["po"], "reply_to": s["entity"]}
    try:
        return await ctx.step("tool:chase_supplier",
                              _service_step("supplier", "status", req, ctx), req,
                              retry=CHASE_RETRY)
    except StepFailed:
        return {"status": "unreachable"}


def _apply_chase(s: State, r: Any, o: Options) -> None:
    s["chases"] += 1
    s["overdue"] = False
    if r["status"] == "accepted":
        s["order"] = "placed"
    elif r["status"] == "none" and s["order"] == "unknown":
        s["order"] = None  # it never reached the supplier: ordering again is safe


async def _wait_goods(ctx: Context, s: State, o: Options) -> Json:
    msg, _ = await ctx.wait(["goods"], timeout=14 * o.day, match={"po": s["po"]})
    return msg


def _apply_goods(s: State, r: Any, o: Options) -> None:
    if r is None:
        s["overdue"] = True
    else:
        s["goods"] = True
        s["order"] = "placed"


async def _close(ctx: Context, s: State, o: Options) -> Json:
    req: dict[str, Json] = {"po": s["po"]}
    return await ctx.step("tool:close_purchase_order",
                          _service_step("erp", "close_po", req, ctx), req)


def _apply_close(s: State, r: Any, o: Options) -> None:
    s["closed"] = True


def _outcome(s: State) -> str:
    if s["closed"]:
        return "received"
    return "rejected" if s["rejected"] else "cancelled"


async def _done(ctx: Context, s: State, o: Options) -> Json:
    return _outcome(s)  # a function of the state: nothing to log


def _apply_done(s: State, r: Json, o: Options) -> None:
    s["outcome"] = r


TOOLS: tuple[Tool, ...] = (
    Tool("get_quotes", lambda s, o: s["quote"] is None, _get_quotes, _apply_quotes),
    Tool("draft_purchase_order", lambda s, o: s["quote"] is not None and s["po"] is None,
         _draft, _apply_draft),
    Tool("request_approval",
         lambda s, o: s["po"] is not None and not s["rejected"] and not _in_flight(s)
         and not s["goods"] and s["approval_asked_at"] != s["price"] and _needs_approval(s),
         _request_approval, _apply_request),
    Tool("wait_for_approval",
         lambda s, o: s["approval_asked_at"] is not None and not s["rejected"]
         and _needs_approval(s) and s["approval_waits"] < MAX_APPROVAL_WAITS
         and not _in_flight(s),
         _wait_approval, _apply_approval),
    Tool("place_order",
         lambda s, o: s["po"] is not None and not s["rejected"] and s["order"] is None
         and not s["goods"] and not _needs_approval(s),
         _place_order, _apply_order),
    Tool("wait_for_supplier_reply",
         lambda s, o: _in_flight(s) and s["reply"] is None and not s["overdue"] and not s["goods"],
         _wait_reply, _apply_reply),
    Tool("read_supplier_reply", lambda s, o: s["reply"] is not None and not s["reply_read"],
         _read_reply, _apply_read),
    Tool("chase_supplier",
         lambda s, o: s["overdue"] and not s["goods"]
         and (s["chases"] < MAX_CHASES or not o.chase_limit),
         _chase, _apply_chase),
    Tool("wait_for_goods", lambda s, o: _in_flight(s) and not s["goods"], _wait_goods,
         _apply_goods),
    Tool("close_purchase_order", lambda s, o: s["goods"] and not s["closed"], _close,
         _apply_close),
    Tool("done", lambda s, o: not _in_flight(s) or s["closed"], _done, _apply_done),
)

BY_NAME = {t.name: t for t in TOOLS}
