"""The shipped MCP agent: an MCPServer and a ClientSession on the real MCP SDK, in two
simulated processes over streamable HTTP on the simulated network, nothing monkeypatched.
A call retried after its reply was lost places the order twice unless keyed; the failure
replays exactly, a seed gives the same trace byte for byte, the tool's handler is the
server's task, and the SDK's own entropy (its session ids) comes from the seed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

pytest.importorskip("mcp")

import trio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from dst import Env, FaultPlan, Sim
from dst.cli import main
from dst.testing import SeedFailed, check_seeds
from dst.trace.codec import read_trace
from scenarios import agent_mcp

from .simkit import inline, many


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> SeedFailed:
    """The first seed of the planted bug that breaks a check, its trace written."""
    with pytest.raises(SeedFailed) as failed:
        check_seeds("agent_mcp", 40, out=tmp_path_factory.mktemp("bug"), idempotent=False)
    return failed.value


def test_the_keyed_agent_holds_over_its_seeds(tmp_path: Path) -> None:
    checked = check_seeds("agent_mcp", 20, out=tmp_path)
    assert checked.runs == 20


# The SDK stops reading a streamed (SSE) reply once its answer has come, leaving httpx2's
# iterators beneath it for trio to close, with a ResourceWarning: over real sockets too.
@pytest.mark.filterwarnings("ignore:Async generator 'http:ResourceWarning")
@pytest.mark.parametrize("stateless", [False, True])
def test_the_keyed_agent_holds_with_streamed_replies(tmp_path: Path, stateless: bool) -> None:
    checked = check_seeds("agent_mcp", 10, out=tmp_path, sse=True, stateless=stateless)
    assert checked.runs == 10


def test_a_retried_call_places_the_order_twice_and_replays_exactly(found: SeedFailed) -> None:
    story = str(found)
    assert "VIOLATED OrderPlacedOnce: the order was placed 2 times" in story, story
    assert "reset:" in story and "call failed" in story, story  # the reply lost, then retried
    replayed = CliRunner().invoke(main, ["replay", str(found.path)])
    assert replayed.exit_code == 1 and replayed.output.startswith("identical"), replayed.output


def test_the_same_seed_gives_the_same_trace_byte_for_byte(found: SeedFailed,
                                                          tmp_path: Path) -> None:
    with pytest.raises(SeedFailed) as again:
        check_seeds("agent_mcp", [found.seed], out=tmp_path, idempotent=False)
    assert again.value.path != found.path
    assert again.value.path.read_bytes() == found.path.read_bytes()


def test_the_tool_handler_is_the_server_process_in_the_trace(found: SeedFailed) -> None:
    trace = read_trace(found.path)
    placing = [r["actor"] for r in trace.records
               if r["type"] == "event" and r["event"] == "placing order"]
    assert len(placing) == 2 and all(a.startswith("orders/") for a in placing), placing
    store_calls = [r["enabled"][r["chosen"]] for r in trace.records if r["type"] == "decision"
                   and "@orders." in r["enabled"][r["chosen"]]]
    numbered = [c.partition("@")[0] for c in store_calls if c.endswith("@orders.cas(orders)")]
    assert len(set(numbered)) == 2, store_calls  # two handlers, one order each
    assert all(c.startswith("orders/") for c in store_calls), store_calls


def test_a_handler_started_in_the_clients_context_is_the_servers_task() -> None:
    """Over the SDK's in-memory streams, which carry the sender's contextvars with each
    message: the server starts the tool's handler inside the client's context, and it is
    still the server's task (labelled ``server/...``), in every schedule."""
    import mcp.types as types
    from mcp.server.lowlevel import Server
    from mcp.shared.memory import create_client_server_memory_streams

    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        pipe: list[Any] = []
        ready = trio.Event()

        async def server(env: Env) -> None:
            async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> Any:
                await env.store.put("placed", params.name)
                return types.CallToolResult(content=[types.TextContent(type="text", text="ok")])

            async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
                tool = types.Tool(name="place_order", input_schema={"type": "object"})
                return types.ListToolsResult(tools=[tool])

            mcp_server = Server("orders", on_call_tool=call_tool, on_list_tools=list_tools)
            async with create_client_server_memory_streams() as (client_side, server_side):
                pipe.append(client_side)
                ready.set()
                await mcp_server.run(*server_side, mcp_server.create_initialization_options())

        async def client(env: Env) -> None:
            await ready.wait()
            read, write = pipe[0]
            async with ClientSession(read, write) as session:
                await session.initialize()
                await session.call_tool("place_order", {})
            await write.aclose()

        sim.process("server", server, stores=["db"])
        sim.process("client", client, stores=["db"])
        return sim.store("db")

    writers: set[str] = set()
    for result in many(inline(setup, faults=FaultPlan(preemptions=2)), range(8)):
        assert result.verdict == "pass", (result.seed, result.violated)
        writers |= {label.partition("@")[0] for r in result.trace().records
                    if r["type"] == "decision"
                    for label in [r["enabled"][r["chosen"]]] if "@db.put(placed)" in label}
    assert writers and all(w.startswith("server/") for w in writers), writers


def test_the_sdks_session_ids_come_from_the_seed() -> None:
    """The server's ``Mcp-Session-Id`` is a ``uuid4()`` inside the SDK: virtualised, it is
    the same for a seed in every run and differs from seed to seed."""
    import httpx2
    import structlog

    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def agent(env: Env) -> None:
            await trio.sleep(1)
            seen: list[str] = []

            async def note(response: httpx2.Response) -> None:
                if "mcp-session-id" in response.headers:
                    seen.append(response.headers["mcp-session-id"])

            http = httpx2.AsyncClient(verify=False, event_hooks={"response": [note]})
            async with http, streamable_http_client(agent_mcp.URL, http_client=http) as (
                    read, write), ClientSession(read, write) as session:
                await session.initialize()
            structlog.get_logger().info("session", id=seen[0])

        sim.process("orders", lambda env: agent_mcp.orders(env), stores=["orders"])
        sim.process("agent", agent)
        return None

    scenario = inline(setup, faults=FaultPlan(preemptions=0))
    ids = [[r["fields"]["id"] for r in result.trace().records
            if r["type"] == "event" and r["event"] == "session"]
           for result in many(scenario, range(3)) + many(scenario, range(3))]
    assert ids[:3] == ids[3:], ids
    assert all(len(i) == 1 and len(i[0]) == 32 for i in ids), ids
    assert len({i[0] for i in ids}) == 3, ids


def test_the_clients_cache_expires_on_the_runs_clock() -> None:
    """``CacheConfig.clock`` defaults to ``time.time`` (a dataclass field): read inside
    the SDK, it is the run's virtual wall clock, so a listing cached for 60 s is served
    again 30 virtual seconds later and fetched again 61 seconds later, in no real time."""
    import httpx2
    import structlog
    from mcp import Client
    from mcp.client.caching import CacheConfig
    from mcp.server.caching import CacheHint
    from mcp.server.mcpserver import MCPServer

    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def agent(env: Env) -> None:
            await trio.sleep(1)
            posted: list[str] = []

            async def note(request: httpx2.Request) -> None:
                posted.append(json.loads(request.content or b"{}").get("method", ""))

            http = httpx2.AsyncClient(verify=False, event_hooks={"request": [note]})
            transport = streamable_http_client(agent_mcp.URL, http_client=http)
            async with http, Client(transport, cache=CacheConfig()) as client:
                for wait in (0, 30, 31):
                    await trio.sleep(wait)
                    await client.list_tools()
            structlog.get_logger().info("posted", methods=posted)

        hints: Any = {"tools/list": CacheHint(ttl_ms=60_000)}
        server = MCPServer("orders", log_level="WARNING", cache_hints=hints)
        sim.process("orders", lambda env: agent_mcp.serve(server))
        sim.process("agent", agent)
        return None

    (result,) = many(inline(setup, faults=FaultPlan(preemptions=0)), range(1))
    assert result.verdict == "pass", result.violated
    (posted,) = [r["fields"]["methods"] for r in result.trace().records
                 if r["type"] == "event" and r["event"] == "posted"]
    assert posted.count("tools/list") == 2, posted


def test_the_sdks_stdio_transport_is_refused_naming_the_agents_own_line() -> None:
    """``stdio_client`` starts the server as a subprocess (refused in a run, whoever asks);
    the refusal names the SDK's call and the agent's line that led to it."""
    import inspect

    from mcp import StdioServerParameters, stdio_client

    async def agent(env: Env) -> None:
        params = StdioServerParameters(command="python", args=["-m", "orders"])
        async with stdio_client(params) as (read, write), ClientSession(read, write):
            pass

    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        sim.process("agent", agent)

    (result,) = many(inline(setup), range(1))
    (message,) = [r["message"] for r in result.trace().records if r["type"] == "violation"]
    line = inspect.getsourcelines(agent)[1] + 2  # the ``async with stdio_client(...)``
    assert message.startswith("trio.lowlevel.open_process() called at "), message
    assert f", from {Path(__file__).name}:{line} in agent, inside a simulated run" in message, \
        message
