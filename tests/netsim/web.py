"""Unmodified web libraries over simulated TCP: httpx against hypercorn, and a WebSocket.

The process ``api`` serves an ASGI app with hypercorn's trio protocol stack
(``hypercorn.trio.tcp_server.TCPServer`` on ``trio.serve_tcp``); the process
``client`` makes a GET and a POST with ``httpx.AsyncClient()`` (its default
transport: httpcore over anyio's trio backend) and, with ``websocket=true``,
echoes a message through ``trio_websocket``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import httpx
import structlog
import trio
from hypercorn.config import Config
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ConnectionState
from hypercorn.utils import wrap_app
from trio_websocket import open_websocket_url

from dst import Env, Scenario, Sim

log = structlog.get_logger()

#: The world of every run set up, in order (the tests read them).
WORLDS: list[dict[str, Any]] = []

scenario = Scenario("netsim_web", doc="httpx, hypercorn and trio-websocket over simulated TCP")
scenario.switch("websocket", False, doc="also echo a message over a WebSocket")

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


async def app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
    """A small ASGI app: ``GET /hello/NAME``, ``POST /echo`` and a WebSocket at ``/ws``."""
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        message = await receive()
        if message["type"] == "websocket.receive":
            await send({"type": "websocket.send", "text": "echo: " + message.get("text", "")})
            await send({"type": "websocket.close", "code": 1000})
        return
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    if scope["method"] == "POST":
        reply = b"you sent " + body
    else:
        reply = ("hello " + scope["path"].rpartition("/")[2]).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"),
                            (b"content-length", str(len(reply)).encode())]})
    await send({"type": "http.response.body", "body": reply})


async def api(env: Env) -> None:
    config = Config()
    config.accesslog = None
    serve = partial(TCPServer, wrap_app(app, config.wsgi_max_body_size, "asgi"), config,
                    WorkerContext(None), ConnectionState({}))
    await trio.serve_tcp(serve, 8000)


async def client(env: Env, world: dict[str, Any], websocket: bool) -> None:
    await trio.sleep(1)  # the server listens by then
    async with httpx.AsyncClient() as http:
        got = await http.get("http://api:8000/hello/dst")
        world["get"] = (got.status_code, got.text)
        sent = await http.post("http://api:8000/echo", content=b"a body")
        world["post"] = (sent.status_code, sent.text)
    log.info("http done", get=world["get"][1], post=world["post"][1])
    if websocket:
        async with open_websocket_url("ws://api:8000/ws") as ws:
            await ws.send_message("ping")
            world["ws"] = await ws.get_message()


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> Any:
    world: dict[str, Any] = {}
    WORLDS.append(world)
    sim.process("api", api)
    sim.process("client", lambda env: client(env, world, config["websocket"]))
    return world


@scenario.at_end("Answered")
def answered(world: dict[str, Any]) -> bool | str:
    return world.get("get") == (200, "hello dst") or f"GET got {world.get('get')!r}"
