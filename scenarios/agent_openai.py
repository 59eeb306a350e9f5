"""agent_openai: an agent on the real openai SDK, a tool behind an HTTP backend.

Nothing here is written for dst: the agent is an ordinary tool-calling loop on
``openai.AsyncOpenAI`` and ``httpx.AsyncClient``, reaching its model and its
tool by host name over the simulated network.  The model is dst's HTTP fake
(``dst.fakes.llm_http``) in process ``llm``; the tool is a small HTTP service in
process ``tickets`` that creates tickets and keeps them in its durable store.

The agent retries a turn that fails (the model answers 500, a connection
resets) from its start, as agent frameworks do.  A retried turn asks the model
again, and the model asks for the same tool again: with ``idempotent=true``
(the default) the agent sends an idempotency key made from the turn and the
call, and the backend answers a repeated key with the first result; with
``idempotent=false`` the retried turn creates the tickets a second time.
"""

from __future__ import annotations

import json
from typing import Any

import h11
import httpx
import openai
import structlog
import trio

from dst import Env, FaultPlan, Scenario, Sim
from dst.fakes import llm_http

log = structlog.get_logger()

TOOLS = [{"type": "function", "function": {
    "name": "create_tickets", "description": "Create support tickets.",
    "parameters": {"type": "object", "properties": {"count": {"type": "integer"}},
                   "required": ["count"]}}}]

TURNS = ("create 12 tickets",)


def _faults(config: dict[str, Any]) -> FaultPlan:
    return FaultPlan(max_crashes=0, preemptions=config["preemptions"])


scenario = Scenario(
    "agent_openai",
    doc="an agent on the real openai SDK retries a failed turn; its tool must run once",
    faults=_faults,
)
scenario.switch("idempotent", True,
                doc="send an idempotency key per turn and call (false: a retry re-runs the tool)")
scenario.switch("llm_errors", 1, choices=[0, 1, 2], doc="model 500s the fake may answer per run")
scenario.switch("preemptions", 0, choices=[0, 1, 2], doc="preemptions at trio checkpoints")
scenario.planted_bug({"idempotent": False}, breaks=["ToolRunsOnce"],
                     doc="a turn retried after the tool ran creates the tickets again")


def model(turn: llm_http.Turn) -> llm_http.Reply:
    """A good model: asks for the tool the user wants, then reports what it returned."""
    if not turn.tool_results:
        count = int("".join(c for c in turn.last_user_text if c.isdigit()) or "1")
        return llm_http.tool_calls(("create_tickets", {"count": count}))
    return llm_http.text(f"Done: {turn.tool_results[-1]}")


# -- the tool: an HTTP service ------------------------------------------------------


async def tickets_service(env: Env) -> None:
    """POST /tickets {"count": n}: create n tickets; a repeated Idempotency-Key gets the
    first answer again, without creating anything."""

    async def handle(stream: trio.abc.Stream) -> None:
        conn = h11.Connection(h11.SERVER)
        body = b""
        request = None
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(65536)
                if not data:
                    return
                conn.receive_data(bytes(data))
            elif isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                break
        if request is None:
            return
        key = dict(request.headers).get(b"idempotency-key", b"").decode()
        answer = await env.store.get(f"key/{key}") if key else None
        if answer is None:
            count = int(json.loads(body or b"{}").get("count", 0))
            made = await env.store.get("tickets") or 0
            assert isinstance(made, int)
            await env.store.put("tickets", made + count)
            turn = dict(request.headers).get(b"x-turn", b"?").decode()
            runs = await env.store.get(f"runs/{turn}") or 0
            assert isinstance(runs, int)
            await env.store.put(f"runs/{turn}", runs + 1)
            answer = f"created {count} tickets"
            log.info("tickets created", count=count, turn=turn, key=key or None)
            if key:
                await env.store.put(f"key/{key}", answer)
        payload = json.dumps({"result": answer}).encode()
        await stream.send_all(conn.send(h11.Response(status_code=200, headers=[
            ("content-type", "application/json"), ("content-length", str(len(payload))),
            ("connection", "close")])) or b"")
        await stream.send_all(conn.send(h11.Data(data=payload)) or b"")
        await stream.send_all(conn.send(h11.EndOfMessage()) or b"")
        await stream.aclose()

    await trio.serve_tcp(handle, 8080)


# -- the agent: an ordinary tool-calling loop ---------------------------------------------


async def agent(env: Env, idempotent: bool) -> None:
    llm = openai.AsyncOpenAI(base_url="http://llm:8000/v1", api_key="x", max_retries=0)
    tools = httpx.AsyncClient(base_url="http://tickets:8080")
    for number, text in enumerate(TURNS, 1):
        turn = f"turn-{number}"
        for attempt in (1, 2, 3):
            try:
                answer = await run_turn(llm, tools, turn, text, idempotent)
            except (openai.APIError, httpx.HTTPError) as exc:
                log.info("turn failed", turn=turn, attempt=attempt, error=type(exc).__name__)
                continue
            log.info("turn answered", turn=turn, answer=answer)
            await env.store.put(f"answered/{turn}", answer)
            break
    await tools.aclose()
    await llm.close()


async def run_turn(llm: Any, tools: Any, turn: str, text: str, idempotent: bool) -> str:
    messages: list[dict[str, Any]] = [{"role": "user", "content": text}]
    while True:
        reply = await llm.chat.completions.create(model="fake", messages=messages,
                                                  tools=TOOLS)
        message = reply.choices[0].message
        if not message.tool_calls:
            return str(message.content)
        messages.append(message.model_dump(exclude_none=True))
        for index, call in enumerate(message.tool_calls):
            headers = {"x-turn": turn}
            if idempotent:
                # The turn and the call's place in it: the same on a retried turn,
                # whatever ids the model gives its calls this time.
                headers["idempotency-key"] = f"{turn}/{index}/{call.function.name}"
            got = await tools.post("/tickets", headers=headers,
                                   json=json.loads(call.function.arguments))
            got.raise_for_status()
            messages.append({"role": "tool", "tool_call_id": call.id,
                             "content": got.json()["result"]})


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> Any:
    db = sim.store("tickets")
    answers = sim.store("agent")
    llm_http.openai(sim, "llm", model, faults=llm_http.Faults(server_error=config["llm_errors"]))
    sim.process("tickets", tickets_service, stores=["tickets"])
    idempotent = bool(config["idempotent"])

    async def main(env: Env) -> None:
        await agent(env, idempotent)

    sim.process("agent", main, stores=["agent"])
    return {"tickets": db, "agent": answers}


@scenario.invariant("ToolRunsOnce")
def tool_runs_once(world: Any) -> Any:
    for turn in (f"turn-{n}" for n in range(1, len(TURNS) + 1)):
        runs = world["tickets"].peek(f"runs/{turn}") or 0
        if runs > 1:
            return f"the tool ran {runs} times for {turn}"
    return True


@scenario.at_end("EveryTurnAnswered")
def every_turn_answered(world: Any) -> Any:
    missing = [n for n in range(1, len(TURNS) + 1)
               if world["agent"].peek(f"answered/turn-{n}") is None]
    return not missing or f"turns {missing} were never answered"
