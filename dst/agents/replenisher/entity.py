"""``SkuAgent``: the long-lived entity of one SKU.

It checks stock every ``check_every_days`` and starts one ``Replenish`` when
stock is below safety stock (plus any reservation it has promised); it routes
the messages that arrive for the SKU (approvals, supplier replies, goods) to
the running replenishment, and keeps promises (reservations due on a later
day).  After ``horizon_checks`` checks it stops, once no replenishment runs.

While a replenishment runs the entity does not check stock: a check could not
start another one, so it would be a wake-up (and log entries) for nothing.  It
sleeps until a message arrives or a promise falls due, and checks again as
soon as the replenishment ends.  (With ``count_active=false``, the planted bug,
the entity does not know a replenishment runs and keeps its weekly checks.)

Its own log would grow forever, so after ``entity_log_limit`` steps it
continues as new, carrying only its state: the log stays bounded while a
promise made months earlier survives in the carried state.
"""

from __future__ import annotations

from typing import Any

import structlog

from dst.env import Json
from dst.runtime.durable import Context, StepCall

from .options import Options

log = structlog.get_logger()

ROUTED = ("approval", "supplier_reply", "goods")
KINDS = ("child_done", "promise", *ROUTED)


def _initial(args: Any) -> dict[str, Any]:
    return {"checks": 0, "active": None, "started": 0, "promises": [], "next_check": None}


def _busy(st: dict[str, Any], o: Options) -> bool:
    return st["active"] is not None and o.count_active


def _promise_due(st: dict[str, Any], o: Options) -> float | None:
    """When the earliest unkept promise falls due (absolute seconds), if any."""
    due = [p["due_day"] * o.day for p in st["promises"] if not p["kept"]]
    return min(due) if due else None


async def sku_agent(ctx: Context, o: Options) -> Json:
    args: Any = ctx.args
    st: dict[str, Any] = dict(ctx.carried) if isinstance(ctx.carried, dict) else _initial(args)
    sku = args["sku"]
    while True:
        if st["next_check"] is None and not _busy(st, o):
            if o.continue_as_new and ctx.steps >= o.entity_log_limit:
                carried = st if o.carry_state else dict(st, promises=[])
                ctx.continue_as_new(carried)
            if await _check(ctx, st, sku, o) == "stop":
                return {"checks": st["checks"], "replenishments": st["started"]}
        if _busy(st, o):
            st["next_check"] = None  # check again as soon as the replenishment ends
            body, until = await ctx.wait(KINDS, deadline=_promise_due(st, o))
            if body is None:
                await _keep_due(ctx, st, sku, until / o.day)
                continue
        elif st["next_check"] is None:
            body, until = await ctx.wait(KINDS, timeout=o.check_every_days * o.day)
        else:
            body, until = await ctx.wait(KINDS, deadline=st["next_check"])
        if body is None:
            st["next_check"] = None
            continue
        if not _busy(st, o):
            st["next_check"] = until
        assert isinstance(body, dict)
        kind = body["kind"]
        if kind == "child_done":
            if body["child"] == st["active"]:
                # Its outcome is in, but its final record may not be: wait for
                # it to end before anything can start the next one.
                await ctx.join(st["active"])
                st["active"] = None
                if st["checks"] >= o.horizon_checks:
                    return {"checks": st["checks"], "replenishments": st["started"]}
        elif kind == "promise":
            st["promises"].append({"id": body["promise"], "units": body["units"],
                                   "due_day": body["due_day"], "kept": False})
        elif st["active"] is not None:
            await ctx.signal(st["active"], body)
        else:
            log.info("message for no running replenishment dropped", sku=sku, kind=kind)


async def _check(ctx: Context, st: dict[str, Any], sku: str, o: Options) -> str:
    async def stock(call: StepCall) -> Json:
        return await ctx.env.services.call("warehouse", "stock", {"sku": sku})

    seen: Any = await ctx.step("check_stock", stock, {"sku": sku, "check": st["checks"]})
    st["checks"] += 1
    await _keep_due(ctx, st, sku, seen["day"])
    reserved = sum(p["units"] for p in st["promises"] if not p["kept"])
    if seen["on_hand"] < o.safety_stock + reserved and not _busy(st, o):
        st["started"] += 1
        child = f"{ctx.id}.r{st['started']}"
        await ctx.start_child("Replenish", child, {
            "sku": sku, "safety": o.safety_stock + reserved, "on_hand": seen["on_hand"],
            "entity": ctx.id})
        st["active"] = child
        log.info("replenishment started", sku=sku, wf=child, on_hand=seen["on_hand"])
    if st["checks"] >= o.horizon_checks and st["active"] is None:
        return "stop"
    return "go"


async def _keep_due(ctx: Context, st: dict[str, Any], sku: str, day: float) -> None:
    """Keep every promise due by ``day`` (a logged day: the same on replay)."""
    for promise in st["promises"]:
        if not promise["kept"] and day >= promise["due_day"]:
            await _keep(ctx, sku, promise)


async def _keep(ctx: Context, sku: str, promise: dict[str, Any]) -> None:
    async def reserve(call: StepCall) -> Json:
        return await ctx.env.services.call(
            "warehouse", "reserve", {"sku": sku, "promise": promise["id"],
                                     "units": promise["units"], "key": call.key})

    await ctx.step("keep_promise", reserve, {"promise": promise["id"]})
    promise["kept"] = True
    log.info("promise kept", sku=sku, promise=promise["id"])
