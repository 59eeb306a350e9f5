"""agent_mcp: an agent calls a tool on an MCP server, both on the real MCP SDK.

Nothing here is written for dst: the server is an ordinary
``mcp.server.mcpserver.MCPServer`` with one tool, ``place_order``, that writes
the order to its durable store; its streamable HTTP app is served by hypercorn's
own ``hypercorn.trio.serve`` (bound to port 8000, its ASGI lifespan running the
SDK's session manager) in process ``orders``.  The agent, in
process ``agent``, opens a ``ClientSession`` over the SDK's streamable HTTP
client (httpx2 over anyio's trio backend) by host name over the simulated
network, and calls the tool.

A call whose reply never comes (the connection reset after the server placed
the order) is retried on a new session, as agents do: three attempts, one more
than the resets a run may have.  With ``idempotent=true``
(the default) the agent names the order with a key it made for it, and the
server claims the key before it places the order and places nothing for a key
already claimed; with
``idempotent=false`` the retried call places the order a second time.

The server answers each POST with a JSON body; ``sse=true`` answers with an SSE
stream, the SDK's default.  The SDK's client stops reading that stream once its
answer has come and leaves httpx2's iterators beneath it for trio to close,
which warns (``ResourceWarning``, over real sockets too): under a test runner
that makes warnings errors, filter that one.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx2
import hypercorn.trio
import structlog
import trio
from hypercorn.config import Config
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import MCPServer
from mcp.types import TextContent

from dst import Env, FaultPlan, Json, Scenario, Sim

log = structlog.get_logger()

# The SDK logs each connection that broke off, with its traceback, at ERROR (and
# MCPServer installs a rich console handler when the process has none): the
# agent's own log is what a run's story tells.
logging.getLogger("mcp").setLevel(logging.CRITICAL)

#: Where the agent finds the MCP server: process ``orders``, port 8000.
URL = "http://orders:8000/mcp"
#: The agent's attempts at one call: the first and two retries.
ATTEMPTS = 3
#: Seconds the agent waits for a tool's reply before it gives up on the attempt.
CALL_TIMEOUT = 30.0
#: How often a parked send is reset, against 1.0 for sending it.
RESET_WEIGHT = 0.1


def _faults(config: dict[str, Any]) -> FaultPlan:
    return FaultPlan(max_crashes=0, max_resets=config["resets"], reset_weight=RESET_WEIGHT,
                     preemptions=config["preemptions"])


scenario = Scenario(
    "agent_mcp",
    doc="an agent on the real MCP SDK retries a tool call whose reply was lost; the order "
        "must be placed once",
    faults=_faults,
)
scenario.switch("idempotent", True,
                doc="name each order with the agent's key (false: a retried call orders again)")
scenario.switch("stateless", False, doc="serve stateless HTTP (no MCP session id, no GET stream)")
scenario.switch("sse", False, doc="answer each POST with an SSE stream, the SDK's default "
                                  "(false: a JSON body)")
scenario.switch("resets", 2, choices=[0, 1, 2], doc="TCP connection resets per run")
scenario.switch("preemptions", 0, choices=[0, 1, 2], doc="preemptions at trio checkpoints")
scenario.planted_bug({"idempotent": False}, breaks=["OrderPlacedOnce"],
                     doc="a call retried after its reply was lost places the order again")


# -- the server: an MCP server with one tool -------------------------------------------


def order_server(env: Env) -> MCPServer:
    server = MCPServer("orders", log_level="WARNING")

    @server.tool()
    async def place_order(sku: str, qty: int, key: str = "") -> str:
        """Place an order for qty of sku; a key seen before places nothing again."""
        order: Json = {"sku": sku, "qty": qty}
        # The key is claimed before anything is placed, in one step: a retried call
        # that arrives while the first is still at work finds it taken.  (Checked first
        # and recorded after the order, it let such a call order again: dst found that
        # with -c stateless=true -c sse=true -c preemptions=1, 3 seeds in 200.)
        if key and not await env.store.cas(f"key/{key}", None, order):
            return f"already ordered under {key}: {qty} x {sku}"
        number = await next_number(env)
        log.info("placing order", number=number, sku=sku, qty=qty, key=key or None)
        await env.store.put(f"order/{number}", order)
        return f"order {number}: {qty} x {sku}"

    return server


async def next_number(env: Env) -> int:
    """The next order's number: two calls placing orders at once get two numbers."""
    while True:
        last = await env.store.get("orders")
        number = (last if isinstance(last, int) else 0) + 1
        if await env.store.cas("orders", last, number):
            return number


async def orders(env: Env, stateless: bool = False, sse: bool = False) -> None:
    await serve(order_server(env), stateless, sse)


async def serve(server: MCPServer, stateless: bool = False, sse: bool = False) -> None:
    """Serve ``server``'s streamable HTTP app at ``URL`` (this process, port 8000)."""
    # host: the name the agent reaches it by is no loopback name, so the SDK's DNS
    # rebinding protection (for servers on localhost) does not apply.
    app = server.streamable_http_app(host="0.0.0.0", stateless_http=stateless,
                                     json_response=not sse)
    config = Config()
    config.bind = ["0.0.0.0:8000"]
    config.accesslog = None
    config.errorlog = None
    asgi: Any = app  # Starlette's ASGI types are not hypercorn's, the protocol is the same
    await hypercorn.trio.serve(asgi, config)  # its lifespan runs the session manager


# -- the agent: calls the tool, retries a call that failed --------------------------------


async def agent(env: Env, idempotent: bool) -> None:
    await trio.sleep(1)  # the server listens by then
    arguments: dict[str, Any] = {"sku": "A-1", "qty": 2}
    if idempotent:
        arguments["key"] = "agent/order-1"  # the same key on every attempt at this order
    # One HTTP client for every attempt, with the SDK's own timeouts.  The simulated
    # network has no TLS (an https:// URL is refused), so loading the machine's
    # certificate store (0.1 s a client) is skipped.
    http = httpx2.AsyncClient(verify=False, timeout=httpx2.Timeout(30.0, read=300.0))
    async with http:
        for attempt in range(1, ATTEMPTS + 1):
            try:
                answer = await call_place_order(http, arguments)
            except Exception as exc:  # the agent retries whatever went wrong
                log.info("call failed", attempt=attempt, error=_leaf(exc))
                continue
            log.info("tool answered", attempt=attempt, answer=answer)
            await env.store.put("answer", answer)
            return


async def call_place_order(http: httpx2.AsyncClient, arguments: dict[str, Any]) -> str:
    """One attempt: a new MCP session, the call, the text of its answer."""
    async with streamable_http_client(URL, http_client=http) as (read, write), \
            ClientSession(read, write, read_timeout_seconds=CALL_TIMEOUT) as session:
        await session.initialize()
        result = await session.call_tool("place_order", arguments)
    text = [block.text for block in result.content if isinstance(block, TextContent)]
    if result.is_error:
        raise RuntimeError(f"the tool failed: {text}")
    return " ".join(text)


def _leaf(exc: BaseException) -> str:
    """What went wrong, out of the task groups' exception groups around it."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> Any:
    db = sim.store("orders")
    answers = sim.store("agent")
    stateless, sse, idempotent = (bool(config[k]) for k in ("stateless", "sse", "idempotent"))
    sim.process("orders", lambda env: orders(env, stateless, sse), stores=["orders"])
    sim.process("agent", lambda env: agent(env, idempotent), stores=["agent"])
    return {"orders": db, "agent": answers}


@scenario.invariant("OrderPlacedOnce")
def order_placed_once(world: Any) -> Any:
    placed = world["orders"].peek("orders") or 0
    return placed <= 1 or f"the order was placed {placed} times"


@scenario.at_end("Answered")
def answered(world: Any) -> Any:
    return world["agent"].peek("answer") is not None or "the agent never got its order placed"
