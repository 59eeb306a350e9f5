"""A fake LLM that speaks HTTP: OpenAI chat completions and Anthropic messages.

The real SDKs (``openai.AsyncOpenAI``, ``anthropic.AsyncAnthropic``) talk to it
unmodified, so their own request building, retries, timeouts, streaming parsers
and tool-call plumbing run under the scheduler like the rest of the agent.  The
server is a simulated process: a scenario starts it in one line, by the host
name the SDK's ``base_url`` names::

    llm_http.openai(sim, "llm", script)        # base_url="http://llm:8000/v1"
    llm_http.anthropic(sim, "claude", script)  # base_url="http://claude:8000"

What it answers is the scenario's ``script(turn) -> Reply``: it reads the
request (:class:`Turn`: the messages, the tools offered, whether the client
asked for a stream) and returns :func:`text`, :func:`tool_calls` or
:func:`error`; ``turn.choose(label, options)`` is a data choice, recorded and
replayed like every other, so the search branches on what the model says.
Protocol faults come from a budget (:class:`Faults`): a rate limit (429 with
``Retry-After``), a server error (500), a stream cut off half way, a body that
is not JSON.  Each request offers the faults left as one data choice, so a run
without faults in the budget makes no choice at all.

The HTTP layer is h11 over any trio stream, one request after another on a
kept-alive connection; it knows nothing of the simulation (the process wiring
at the bottom does), so it is tested over in-memory streams too.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import h11
import trio

from ..sim.outside import EPOCH as EPOCH

Json = Any

# A response's ``created`` is ``EPOCH`` (``dst.sim.outside``'s) plus the virtual seconds:
# the wall clock the SDK itself reads in the same run, so a client comparing the two (a
# cache's age, a ``Retry-After`` date) sees them agree.


# -- what the script sees and returns ----------------------------------------------


@dataclass(frozen=True)
class ToolCall:
    """One call the model asks for: a tool's name and its arguments."""

    name: str
    arguments: dict[str, Json]


@dataclass(frozen=True)
class Reply:
    """What the fake model answers: text, tool calls, or an HTTP error."""

    text: str = ""
    calls: tuple[ToolCall, ...] = ()
    status: int = 200
    retry_after: float | None = None
    message: str = ""


def text(content: str) -> Reply:
    """The model answers ``content`` and stops."""
    return Reply(text=content)


def tool_calls(*calls: tuple[str, dict[str, Json]] | ToolCall, content: str = "") -> Reply:
    """The model asks for these tools, in order (``("name", {args})`` pairs)."""
    return Reply(text=content, calls=tuple(
        c if isinstance(c, ToolCall) else ToolCall(c[0], dict(c[1])) for c in calls))


def error(status: int, message: str = "", *, retry_after: float | None = None) -> Reply:
    """An HTTP error: 429 (with ``retry_after`` seconds), 500, 400..."""
    return Reply(status=status, retry_after=retry_after,
                 message=message or _REASONS.get(status, "error"))


_REASONS = {400: "bad request", 401: "unauthorized", 429: "rate limited",
            500: "internal server error", 503: "overloaded"}


@dataclass
class Turn:
    """One request to the fake model, in the terms both APIs share."""

    api: str
    model: str
    #: The conversation as sent: a list of ``{"role": ..., "content": ...}`` dicts
    #: (OpenAI's ``tool`` messages and Anthropic's ``tool_result`` blocks as they came).
    messages: list[dict[str, Json]]
    #: The names of the tools offered.
    tools: list[str]
    stream: bool
    #: The whole request body.
    body: dict[str, Json]
    #: ``choose(label, options)``: a recorded data choice.
    choose: Callable[[str, Sequence[str]], str]
    #: How many requests this server answered before this one.
    number: int = 0

    @property
    def tool_results(self) -> list[Json]:
        """The results of tool calls the conversation carries back, in order."""
        out: list[Json] = []
        for m in self.messages:
            if m.get("role") == "tool":
                out.append(m.get("content"))
            content = m.get("content")
            if isinstance(content, list):
                out.extend(b.get("content") for b in content
                           if isinstance(b, dict) and b.get("type") == "tool_result")
        return out

    @property
    def last_user_text(self) -> str:
        for m in reversed(self.messages):
            if m.get("role") == "user":
                content = m.get("content")
                if isinstance(content, str):
                    return content
                if isinstance(content, list):
                    return " ".join(str(b.get("text", "")) for b in content
                                    if isinstance(b, dict) and b.get("type") == "text")
        return ""


Script = Callable[[Turn], Reply]


@dataclass
class Faults:
    """Protocol faults the server may inject, each a budget per run."""

    rate_limit: int = 0
    server_error: int = 0
    truncate: int = 0
    malformed: int = 0
    #: Seconds a rate limit asks the client to wait.
    retry_after: float = 1.0

    def left(self) -> list[str]:
        return [name for name in ("rate_limit", "server_error", "truncate", "malformed")
                if getattr(self, name) > 0]


# -- the two APIs ------------------------------------------------------------------


@dataclass
class _Server:
    api: str
    script: Script
    choose: Callable[[str, Sequence[str]], str]
    now: Callable[[], float]
    faults: Faults = field(default_factory=Faults)
    counter: itertools.count[int] = field(default_factory=itertools.count)

    def turn(self, body: dict[str, Json], number: int) -> Turn:
        tools = []
        for t in body.get("tools") or []:
            if isinstance(t, dict):
                fn = t.get("function")
                tools.append(str((fn or t).get("name", "")))
        messages = list(body.get("messages") or [])
        if self.api == "anthropic" and body.get("system"):
            messages.insert(0, {"role": "system", "content": body["system"]})
        return Turn(self.api, str(body.get("model", "")), messages, tools,
                    bool(body.get("stream")), body, self.choose, number)

    def fault(self) -> str:
        left = self.faults.left()
        if not left:
            return "none"
        picked = self.choose(f"{self.api}.fault", ["none", *left])
        if picked != "none":
            setattr(self.faults, picked, getattr(self.faults, picked) - 1)
        return picked


_Response = tuple[int, list[tuple[str, str]], list[bytes], bool]
"""Status, headers, body chunks, and whether the connection is cut after them."""


def _json_response(status: int, value: Json, headers: Sequence[tuple[str, str]] = ()
                   ) -> _Response:
    body = json.dumps(value, separators=(",", ":")).encode()
    return status, [("content-type", "application/json"), *headers], [body], False


def _error_response(api: str, reply: Reply) -> _Response:
    headers = []
    if reply.retry_after is not None:
        headers.append(("retry-after", f"{reply.retry_after:g}"))
    kind = {429: "rate_limit_error", 500: "api_error", 503: "overloaded_error",
            400: "invalid_request_error", 401: "authentication_error"}.get(
                reply.status, "api_error")
    if api == "anthropic":
        return _json_response(reply.status, {"type": "error", "error": {
            "type": kind, "message": reply.message}}, headers)
    return _json_response(reply.status, {"error": {
        "message": reply.message, "type": kind, "param": None, "code": None}}, headers)


def _sse(events: list[tuple[str | None, Json]]) -> list[bytes]:
    out = []
    for name, data in events:
        text_ = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
        head = f"event: {name}\n" if name else ""
        out.append(f"{head}data: {text_}\n\n".encode())
    return out


def _openai(server: _Server, turn: Turn, reply: Reply) -> list[bytes] | Json:
    n = turn.number
    ident = f"chatcmpl-{n}"
    created = EPOCH + int(server.now())
    calls: list[dict[str, Any]] = [{"id": f"call_{n}_{i}", "type": "function",
              "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
             for i, c in enumerate(reply.calls)]
    finish = "tool_calls" if calls else "stop"
    if not turn.stream:
        message: dict[str, Json] = {"role": "assistant", "content": reply.text or None,
                                    "refusal": None}
        if calls:
            message["tool_calls"] = calls
        return {"id": ident, "object": "chat.completion", "created": created,
                "model": turn.model, "choices": [{"index": 0, "message": message,
                                                  "logprobs": None, "finish_reason": finish}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}

    def chunk(delta: dict[str, Json], finish_reason: str | None = None) -> Json:
        return {"id": ident, "object": "chat.completion.chunk", "created": created,
                "model": turn.model, "choices": [{"index": 0, "delta": delta,
                                                  "logprobs": None,
                                                  "finish_reason": finish_reason}]}

    events: list[tuple[str | None, Json]] = [(None, chunk({"role": "assistant",
                                                           "content": ""}))]
    for piece in _pieces(reply.text):
        events.append((None, chunk({"content": piece})))
    for i, call in enumerate(calls):
        args = call["function"]["arguments"]
        events.append((None, chunk({"tool_calls": [{
            "index": i, "id": call["id"], "type": "function",
            "function": {"name": call["function"]["name"], "arguments": ""}}]})))
        for piece in _pieces(args):
            events.append((None, chunk({"tool_calls": [{
                "index": i, "function": {"arguments": piece}}]})))
    events.append((None, chunk({}, finish)))
    events.append((None, "[DONE]"))
    return _sse(events)


def _anthropic(server: _Server, turn: Turn, reply: Reply) -> list[bytes] | Json:
    n = turn.number
    ident = f"msg_{n}"
    blocks: list[dict[str, Json]] = []
    if reply.text:
        blocks.append({"type": "text", "text": reply.text})
    for i, c in enumerate(reply.calls):
        blocks.append({"type": "tool_use", "id": f"toolu_{n}_{i}", "name": c.name,
                       "input": c.arguments})
    stop = "tool_use" if reply.calls else "end_turn"
    usage = {"input_tokens": 1, "output_tokens": 1}
    if not turn.stream:
        return {"id": ident, "type": "message", "role": "assistant", "model": turn.model,
                "content": blocks, "stop_reason": stop, "stop_sequence": None,
                "usage": usage}
    events: list[tuple[str | None, Json]] = [("message_start", {
        "type": "message_start", "message": {
            "id": ident, "type": "message", "role": "assistant", "model": turn.model,
            "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}})]
    for i, block in enumerate(blocks):
        if block["type"] == "text":
            events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                   "content_block": {"type": "text",
                                                                     "text": ""}}))
            for piece in _pieces(block["text"]):
                events.append(("content_block_delta", {
                    "type": "content_block_delta", "index": i,
                    "delta": {"type": "text_delta", "text": piece}}))
        else:
            events.append(("content_block_start", {
                "type": "content_block_start", "index": i,
                "content_block": {**block, "input": {}}}))
            for piece in _pieces(json.dumps(block["input"])):
                events.append(("content_block_delta", {
                    "type": "content_block_delta", "index": i,
                    "delta": {"type": "input_json_delta", "partial_json": piece}}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": stop, "stop_sequence": None},
                                     "usage": {"output_tokens": 1}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return _sse(events)


def _pieces(s: str, size: int = 16) -> list[str]:
    """``s`` in pieces, as a model streams it (none for the empty string)."""
    return [s[i:i + size] for i in range(0, len(s), size)]


_PATHS = {"openai": ("/v1/chat/completions", "/chat/completions"),
          "anthropic": ("/v1/messages", "/messages")}


def _answer(server: _Server, method: str, path: str, raw: bytes) -> _Response:
    route = path.split("?", 1)[0]
    if method != "POST" or not route.endswith(_PATHS[server.api]):
        return _error_response(server.api, error(404, f"no route {method} {route}"))
    try:
        body = json.loads(raw or b"{}")
    except ValueError:
        return _error_response(server.api, error(400, "the body is not JSON"))
    number = next(server.counter)
    fault = server.fault()
    if fault == "rate_limit":
        return _error_response(server.api, error(429, retry_after=server.faults.retry_after))
    if fault == "server_error":
        return _error_response(server.api, error(500))
    turn = server.turn(body, number)
    reply = server.script(turn)
    if reply.status != 200:
        return _error_response(server.api, reply)
    made = (_openai if server.api == "openai" else _anthropic)(server, turn, reply)
    if fault == "malformed":
        return 200, [("content-type", "application/json")], [b'{"id": "broken'], False
    if isinstance(made, list):
        chunks = made[:max(1, len(made) // 2)] if fault == "truncate" else made
        return 200, [("content-type", "text/event-stream"),
                     ("cache-control", "no-cache")], chunks, fault == "truncate"
    status, headers, chunks, _ = _json_response(200, made)
    if fault == "truncate":
        return status, headers, [chunks[0][:len(chunks[0]) // 2]], True
    return status, headers, chunks, False


# -- HTTP/1.1 over a trio stream -----------------------------------------------------


async def serve_stream(stream: trio.abc.Stream, server: _Server) -> None:
    """Answer requests on one connection until the client closes it (or a fault cuts it)."""
    conn = h11.Connection(h11.SERVER)
    try:
        while True:
            request = None
            body = bytearray()
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    conn.receive_data(bytes(data))
                    continue
                if isinstance(event, h11.Request):
                    request = event
                elif isinstance(event, h11.Data):
                    body += event.data
                elif isinstance(event, h11.EndOfMessage):
                    break
                elif isinstance(event, h11.ConnectionClosed):
                    return
            assert request is not None
            status, headers, chunks, cut = _answer(
                server, request.method.decode(), request.target.decode(), bytes(body))
            size = sum(len(c) for c in chunks)
            sse = any(k == "content-type" and v == "text/event-stream" for k, v in headers)
            framing = [("transfer-encoding", "chunked")] if sse or cut else \
                [("content-length", str(size))]
            await stream.send_all(conn.send(h11.Response(
                status_code=status, headers=[*headers, *framing])) or b"")
            for chunk in chunks:
                await stream.send_all(conn.send(h11.Data(data=chunk)) or b"")
            if cut:
                return  # the connection drops half way through the answer
            await stream.send_all(conn.send(h11.EndOfMessage()) or b"")
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            conn.start_next_cycle()
    except (trio.BrokenResourceError, trio.ClosedResourceError, h11.RemoteProtocolError):
        return
    finally:
        await trio.aclose_forcefully(stream)


def handler(api: str, script: Script, choose: Callable[[str, Sequence[str]], str],
            now: Callable[[], float], faults: Faults | None = None
            ) -> Callable[[trio.abc.Stream], Awaitable[None]]:
    """The per-connection handler of a fake ``api`` (``"openai"`` or ``"anthropic"``)
    server, for ``trio.serve_tcp`` or any trio stream."""
    if api not in _PATHS:
        raise ValueError(f"api is 'openai' or 'anthropic', not {api!r}")
    server = _Server(api, script, choose, now, faults or Faults())
    return functools.partial(serve_stream, server=server)


# -- as a simulated process ------------------------------------------------------------


def _start(api: str, sim: Any, name: str, script: Script, port: int,
           faults: Faults | None) -> None:
    budget = faults or Faults()

    async def main(env: Any) -> None:
        # Budgets and request numbers are the process's memory: a restart after a
        # crash starts them afresh, as a real server's would.
        fresh = Faults(budget.rate_limit, budget.server_error, budget.truncate,
                       budget.malformed, budget.retry_after)
        serve = handler(api, script, sim.choose, env.clock.now, fresh)
        await trio.serve_tcp(serve, port)

    sim.process(name, main)


def openai(sim: Any, name: str, script: Script, *, port: int = 8000,
           faults: Faults | None = None) -> None:
    """Start process ``name`` serving OpenAI's chat completions on ``port``:
    ``openai.AsyncOpenAI(base_url=f"http://{name}:{port}/v1", api_key="x")``."""
    _start("openai", sim, name, script, port, faults)


def anthropic(sim: Any, name: str, script: Script, *, port: int = 8000,
              faults: Faults | None = None) -> None:
    """Start process ``name`` serving Anthropic's messages API on ``port``:
    ``anthropic.AsyncAnthropic(base_url=f"http://{name}:{port}", api_key="x")``."""
    _start("anthropic", sim, name, script, port, faults)
