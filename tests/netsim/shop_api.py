"""hypercorn's own ``serve()`` in a simulated process, called over HTTP by httpx.

The process ``shop-api`` runs ``await hypercorn.trio.serve(app, config)`` with
``config.bind = ["0.0.0.0:8080"]``, exactly as a deployment would: hypercorn
makes its listener with the standard library's socket (``dst.sim.sockets.stdlib``
answers it on the simulated network).  The app is a hand-written ASGI app:
``POST /charge`` charges an order in the process's store, ``GET /health``
answers ``ok``.  The process ``shop`` pays one order with
``httpx.AsyncClient()`` and retries when the connection breaks; the fault plan
may reset one connection, on the request or on the reply.  Without an
idempotency key (``idempotent=false``) a retry after a lost reply charges the
order again.  With ``shutdown=true`` the shop asks the server to stop when it
is done (``POST /quit``, which sets hypercorn's ``shutdown_trigger``) and
``serve()`` returns; otherwise it is still serving when the run ends, and the
end of the run cancels it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import structlog
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from dst import Env, FaultPlan, Scenario, Sim

log = structlog.get_logger()

scenario = Scenario("netsim_shop_api", doc="hypercorn's serve() charged over HTTP by httpx",
                    faults=FaultPlan(max_resets=1, reset_weight=0.3))
scenario.switch("idempotent", True, doc="each charge carries an idempotency key the server "
                "claims in its store")
scenario.switch("shutdown", False, doc="the shop stops the server when it is done "
                "(hypercorn's shutdown_trigger)")
scenario.planted_bug({"idempotent": False}, breaks=["ChargedOnce"],
                     doc="a retry after the reply was lost charges the order again")

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def make_app(env: Env, quit_: trio.Event) -> Callable[[dict[str, Any], Receive, Send],
                                                     Awaitable[None]]:
    async def app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        status, reply = 404, {"error": "not found"}
        if scope["method"] == "GET" and scope["path"] == "/health":
            status, reply = 200, {"status": "ok"}
        elif scope["method"] == "POST" and scope["path"] == "/charge":
            status, reply = 200, await charge(env, json.loads(body), dict(scope["headers"]))
        elif scope["method"] == "POST" and scope["path"] == "/quit":
            status, reply = 200, {"status": "stopping"}
            quit_.set()
        payload = json.dumps(reply, sort_keys=True).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(payload)).encode())]})
        await send({"type": "http.response.body", "body": payload})

    return app


async def read_body(receive: Receive) -> bytes:
    """An HTTP request's body, from as many ``http.request`` messages as it came in."""
    chunks, more = [], True
    while more:
        message = await receive()
        chunks.append(message.get("body", b""))
        more = bool(message.get("more_body"))
    return b"".join(chunks)


async def charge(env: Env, request: dict[str, Any], headers: dict[bytes, bytes]) -> dict[str, Any]:
    order = request["order"]
    key = headers.get(b"idempotency-key", b"").decode()
    if key and not await env.store.cas(f"key/{key}", None, order):
        log.info("charge replayed", order=order)
        return {"order": order, "status": "paid"}
    while True:  # the number of charges, counted in the store
        count = await env.store.get("charges")
        charges = (count if isinstance(count, int) else 0) + 1
        if await env.store.cas("charges", count, charges):
            break
    log.info("charged", order=order, charges=charges)
    return {"order": order, "status": "paid"}


async def shop_api(env: Env, shutdown: bool) -> None:
    quit_ = trio.Event()
    config = Config()
    config.bind = ["0.0.0.0:8080"]
    config.errorlog = None  # "Running on http://0.0.0.0:8080": the story has its own
    await serve(make_app(env, quit_), config,  # type: ignore[arg-type]
                shutdown_trigger=quit_.wait if shutdown else None)
    log.info("server stopped")


async def shop(env: Env, world: dict[str, Any], idempotent: bool, shutdown: bool) -> None:
    await trio.sleep(1)  # the server listens by then
    headers = {"idempotency-key": "charge-order-1"} if idempotent else {}
    async with httpx.AsyncClient() as client:
        for attempt in range(1, 4):
            try:
                got = await client.post("http://shop-api:8080/charge",
                                        json={"order": "order-1"}, headers=headers)
                world["paid"] = got.status_code == 200
                break
            except httpx.TransportError as exc:
                log.info("charge broke off; retrying", attempt=attempt,
                         error=type(exc).__name__)
        for _ in range(3):
            try:
                health = await client.get("http://shop-api:8080/health")
                world["health"] = health.json()
                break
            except httpx.TransportError:
                continue
        if shutdown:
            for _ in range(3):
                try:
                    await client.post("http://shop-api:8080/quit")
                    break
                except httpx.TransportError:
                    continue
    log.info("shop done", paid=world["paid"])


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> Any:
    world: dict[str, Any] = {"paid": False, "health": None, "store": sim.store("payments")}
    sim.process("shop-api", lambda env: shop_api(env, config["shutdown"]),
                stores=["payments"], crashable=False)
    sim.process("shop", lambda env: shop(env, world, config["idempotent"], config["shutdown"]),
                crashable=False)
    return world


@scenario.invariant("ChargedOnce")
def charged_once(world: dict[str, Any]) -> bool | str:
    n = world["store"].peek("charges") or 0
    return n <= 1 or f"order-1 was charged {n} times"


@scenario.at_end("Paid")
def paid(world: dict[str, Any]) -> bool | str:
    return (world["paid"] and world["health"] == {"status": "ok"}) \
        or f"paid={world['paid']} health={world['health']!r}"
