"""The HTTP fake LLM speaks what the real SDKs parse: OpenAI chat completions and
Anthropic messages, plain and streamed, tool calls and errors.

The server's HTTP layer knows nothing of the simulation, so these tests run it on
loopback under plain trio, with a fixed chooser, and talk to it with the real SDKs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

import pytest
import trio

from dst.fakes import llm_http

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")


def first(label: str, options: Sequence[str]) -> str:
    return options[0]


def script(turn: llm_http.Turn) -> llm_http.Reply:
    if not turn.tool_results:
        return llm_http.tool_calls(("create_tickets", {"count": 12}))
    return llm_http.text(f"done after {len(turn.tool_results)} tool result(s)")


async def serving(api: str, body: Callable[[int], Awaitable[Any]], *,
                  faults: llm_http.Faults | None = None,
                  choose: Callable[[str, Sequence[str]], str] = first,
                  reply: llm_http.Script = script, now: float = 0.0) -> Any:
    serve = llm_http.handler(api, reply, choose, lambda: now, faults)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(trio.serve_tcp, serve, 0)
        port = listeners[0].socket.getsockname()[1]
        try:
            return await body(port)
        finally:
            nursery.cancel_scope.cancel()


TOOLS = [{"type": "function", "function": {"name": "create_tickets", "parameters": {
    "type": "object", "properties": {"count": {"type": "integer"}}}}}]
ANTHROPIC_TOOLS = [{"name": "create_tickets", "input_schema": {
    "type": "object", "properties": {"count": {"type": "integer"}}}}]


def test_openai_sdk_reads_a_tool_call_then_the_answer() -> None:
    async def body(port: int) -> Any:
        client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x")
        first_ = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "create 12"}], tools=TOOLS)
        call = first_.choices[0].message.tool_calls[0]
        second = await client.chat.completions.create(model="m", tools=TOOLS, messages=[
            {"role": "user", "content": "create 12"}, first_.choices[0].message.model_dump(),
            {"role": "tool", "tool_call_id": call.id, "content": "ok"}])
        await client.close()
        return first_, call, second

    first_, call, second = trio.run(serving, "openai", body)
    assert first_.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "create_tickets" and call.function.arguments == '{"count": 12}'
    assert second.choices[0].message.content == "done after 1 tool result(s)"


def test_a_response_is_stamped_on_the_wall_clock_libraries_read_in_a_run() -> None:
    from dst.sim.outside import EPOCH  # what time.time() reads in a run, at virtual 0

    async def body(port: int) -> Any:
        client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x")
        reply = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "create 12"}], tools=TOOLS)
        await client.close()
        return reply

    assert trio.run(serving, "openai", body).created == EPOCH
    assert trio.run(partial(serving, now=90.0), "openai", body).created == EPOCH + 90


# The SDK leaves its own SSE generators unfinished after ``[DONE]``; trio's finaliser
# warns of that (the SDK's behaviour under trio, not the server's).
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_openai_sdk_streams_text_and_tool_calls() -> None:
    def talk(turn: llm_http.Turn) -> llm_http.Reply:
        return llm_http.tool_calls(("create_tickets", {"count": 12, "title": "x" * 40}),
                                   content="Creating the tickets you asked for now.")

    async def body(port: int) -> Any:
        client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x")
        text, args, finish = "", "", None
        async with await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], tools=TOOLS,
                stream=True) as stream:
            async for chunk in stream:
                delta = chunk.choices[0].delta
                text += delta.content or ""
                for tc in delta.tool_calls or []:
                    args += tc.function.arguments or ""
                finish = chunk.choices[0].finish_reason or finish
        await client.close()
        return text, args, finish

    text, args, finish = trio.run(functools_partial(serving, "openai", reply=talk), body)
    assert text == "Creating the tickets you asked for now."
    assert args == '{"count": 12, "title": "' + "x" * 40 + '"}' and finish == "tool_calls"


def test_anthropic_sdk_reads_tool_use_plain_and_streamed() -> None:
    async def body(port: int) -> Any:
        client = anthropic.AsyncAnthropic(base_url=f"http://127.0.0.1:{port}", api_key="x")
        plain = await client.messages.create(
            model="m", max_tokens=100, tools=ANTHROPIC_TOOLS,
            messages=[{"role": "user", "content": "create 12"}])
        async with client.messages.stream(
                model="m", max_tokens=100, tools=ANTHROPIC_TOOLS,
                messages=[{"role": "user", "content": "create 12"}]) as stream:
            final = await stream.get_final_message()
        await client.close()
        return plain, final

    plain, final = trio.run(serving, "anthropic", body)
    for message in (plain, final):
        assert message.stop_reason == "tool_use"
        block = message.content[0]
        assert block.type == "tool_use" and block.name == "create_tickets"
        assert block.input == {"count": 12}


def test_a_rate_limit_is_retried_by_the_sdk_after_retry_after() -> None:
    chosen: list[str] = []

    def rate_limit_once(label: str, options: Sequence[str]) -> str:
        pick = "rate_limit" if "rate_limit" in options else options[0]
        chosen.append(pick)
        return pick

    async def body(port: int) -> Any:
        client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x",
                                    max_retries=2)
        got = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], tools=TOOLS)
        await client.close()
        return got

    got = trio.run(functools_partial(serving, "openai", faults=llm_http.Faults(
        rate_limit=1, retry_after=0.01), choose=rate_limit_once), body)
    assert chosen == ["rate_limit"]  # once the budget is spent, no choice is offered
    assert got.choices[0].message.tool_calls[0].function.name == "create_tickets"


@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("fault", ["truncate", "malformed"])
def test_a_truncated_stream_and_a_malformed_body_reach_the_sdk_as_errors(fault: str) -> None:
    async def body(port: int) -> Any:
        client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1",
                                    api_key="x", max_retries=0)
        try:
            got = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}],
                stream=fault == "truncate")
            if fault == "truncate":
                async with got as stream:
                    async for _ in stream:
                        pass
        except Exception as exc:  # the SDK's own error for what it got
            return exc
        finally:
            await client.close()
        return None

    def pick(label: str, options: Sequence[str]) -> str:
        return fault if fault in options else options[0]

    exc = trio.run(functools_partial(serving, "openai", faults=llm_http.Faults(**{fault: 1}),
                                     choose=pick), body)
    assert exc is not None


def functools_partial(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[..., Any]:
    async def run(*more: Any) -> Any:
        return await fn(*args, *more, **kwargs)
    return run
