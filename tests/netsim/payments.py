"""A retried POST over simulated TCP: the reply lost after the server acted.

A client pays an order with ``POST /charge`` and retries when the connection
breaks.  The fault plan may reset one connection (``FaultPlan.max_resets``): on
the client's request (the server never sees it: a retry is right) or on the
server's reply (the server charged, the client cannot know: a retry charges
again, unless the request carries an idempotency key the server remembers).

The server is a minimal HTTP/1.1 server on h11; the client is h11 over
``trio.open_tcp_stream`` (``client="h11"``) or ``httpx.AsyncClient()`` with its
default transport (``client="httpx"``), both unmodified library code.
"""

from __future__ import annotations

import json
from typing import Any

import h11
import httpx
import structlog
import trio

from dst import Env, FaultPlan, Scenario, Sim

log = structlog.get_logger()

#: The world of every run set up, in order (the tests read them).
WORLDS: list[dict[str, Any]] = []

scenario = Scenario("netsim_payments", doc="a POST retried after a connection reset",
                    faults=FaultPlan(max_resets=1, reset_weight=0.3))
scenario.switch("idempotent", True, doc="each payment carries an idempotency key the "
                "server remembers")
scenario.switch("client", "h11", choices=["h11", "httpx"], doc="the client's HTTP library")
scenario.planted_bug({"idempotent": False}, breaks=["AtMostOneCharge"],
                     doc="a retry after the reply was lost charges the order again")


# -- the server -------------------------------------------------------------------


async def _read_request(conn: h11.Connection, stream: trio.SocketStream
                        ) -> tuple[h11.Request, bytes] | None:
    request: h11.Request | None = None
    body = b""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await stream.receive_some()
            conn.receive_data(data)  # b"" is the end of the stream
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            assert request is not None
            return request, body
        else:  # ConnectionClosed, or the client gave up mid-request
            return None


async def _respond(conn: h11.Connection, stream: trio.SocketStream, status: int,
                   payload: dict[str, Any]) -> None:
    body = json.dumps(payload, sort_keys=True).encode()
    headers = [("content-type", "application/json"), ("content-length", str(len(body)))]
    await stream.send_all(conn.send(h11.Response(status_code=status, headers=headers)))
    await stream.send_all(conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage()))


async def payments_server(env: Env, world: dict[str, Any]) -> None:
    seen: dict[str, dict[str, Any]] = {}  # idempotency key -> the reply it got

    async def serve(stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                got = await _read_request(conn, stream)
                if got is None:
                    break
                request, body = got
                key = dict(request.headers).get(b"idempotency-key", b"").decode()
                order = json.loads(body)["order"]
                if key and key in seen:
                    log.info("payment replayed", order=order)
                    reply = seen[key]
                else:
                    world["charges"].append(order)
                    log.info("charged", order=order, charges=len(world["charges"]))
                    reply = {"order": order, "status": "paid"}
                    if key:
                        seen[key] = reply
                await _respond(conn, stream, 200, reply)
                conn.start_next_cycle()
        except (trio.BrokenResourceError, h11.RemoteProtocolError):
            log.info("server lost the connection")
        finally:
            await stream.aclose()

    await trio.serve_tcp(serve, 8080)


# -- the clients ------------------------------------------------------------------


class Broken(Exception):
    """The connection broke before the reply came: whether the server acted is unknown."""


async def _post_h11(path: str, payload: dict[str, Any], headers: dict[str, str]) -> int:
    body = json.dumps(payload).encode()
    try:
        stream = await trio.open_tcp_stream("payments", 8080)
    except OSError as exc:
        raise Broken(f"connect: {exc}") from exc
    conn = h11.Connection(h11.CLIENT)
    try:
        request = h11.Request(method="POST", target=path, headers=[
            ("host", "payments"), ("content-length", str(len(body))), *headers.items()])
        await stream.send_all(conn.send(request) + conn.send(h11.Data(data=body))
                              + conn.send(h11.EndOfMessage()))
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some())
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.EndOfMessage):
                return status
            elif isinstance(event, h11.ConnectionClosed):
                raise Broken("the server closed the connection")
    except (trio.BrokenResourceError, h11.RemoteProtocolError) as exc:
        raise Broken(str(exc)) from exc
    finally:
        await stream.aclose()


async def pay(env: Env, world: dict[str, Any], idempotent: bool, library: str) -> None:
    order = "order-1"
    headers = {"idempotency-key": f"pay-{order}"} if idempotent else {}
    if library == "httpx":
        async with httpx.AsyncClient() as client:
            for attempt in range(1, 4):
                try:
                    response = await client.post("http://payments:8080/charge",
                                                 json={"order": order}, headers=headers)
                    world["paid"] = response.status_code == 200
                    break
                except httpx.TransportError as exc:
                    log.info("payment broke off; retrying", attempt=attempt,
                             error=type(exc).__name__)
    else:
        for attempt in range(1, 4):
            try:
                world["paid"] = await _post_h11("/charge", {"order": order}, headers) == 200
                break
            except Broken as exc:
                log.info("payment broke off; retrying", attempt=attempt, error=str(exc))
    log.info("client done", paid=world["paid"])


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> Any:
    world: dict[str, Any] = {"charges": [], "paid": False}
    WORLDS.append(world)
    sim.process("payments", lambda env: payments_server(env, world), crashable=False)
    sim.process("shop", lambda env: pay(env, world, config["idempotent"], config["client"]),
                crashable=False)
    return world


@scenario.invariant("AtMostOneCharge")
def at_most_once(world: dict[str, Any]) -> bool | str:
    n = world["charges"].count("order-1")
    return n <= 1 or f"order-1 was charged {n} times"


@scenario.at_end("Paid")
def paid(world: dict[str, Any]) -> bool | str:
    return world["paid"] or "the order was never paid"
