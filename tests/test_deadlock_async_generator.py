"""Waiting for mail inside an async generator is waiting on the world, not a Deadlock.

A server that reads its messages through an async generator (as the MCP SDK's
server does: ``async for message in messages(): ...``) waits in ``env.net.recv()``
all the same; a real deadlock beside it is still found.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import trio

from dst import Env, Message, Scenario, Sim

from .simkit import many


def _server(env: Env, handled: list[Any]) -> Any:
    async def messages() -> AsyncIterator[Message]:
        while True:
            yield await env.net.recv()

    async def serve() -> None:
        async for message in messages():
            handled.append(message.body)
            await env.net.send(message.source, {"ok": message.body["n"]})

    return serve


def _scenario(*, stuck: bool) -> Scenario:
    scenario = Scenario("agen", doc="a server reading its mail through an async generator")

    @scenario.setup
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        handled: list[Any] = []
        replies: list[Any] = []

        async def client(env: Env) -> None:
            for n in range(2):
                await env.net.send("server", {"n": n})
                replies.append((await env.net.recv()).body)

        async def pair(env: Env) -> None:
            first, second = trio.Event(), trio.Event()

            async def one() -> None:
                await second.wait()
                first.set()

            async def other() -> None:
                await first.wait()
                second.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(one)
                nursery.start_soon(other)

        sim.process("server", lambda env: _server(env, handled)())
        sim.process("client", client)
        if stuck:
            sim.process("pair", pair)
        return handled, replies

    @scenario.at_end("AllAnswered")
    def all_answered(world: Any) -> bool | str:
        handled, replies = world
        return replies == [{"ok": 0}, {"ok": 1}] or f"replies {replies}, handled {handled}"

    return scenario


def test_a_server_waiting_in_an_async_generator_is_idle() -> None:
    results = many(_scenario(stuck=False), range(50))
    assert [r.violated for r in results] == [[]] * 50
    assert {r.ended for r in results} == {"quiescent"}


def test_a_real_deadlock_beside_it_is_still_reported() -> None:
    results = many(_scenario(stuck=True), range(50))
    assert [r.violated for r in results] == [["Deadlock"]] * 50
    for r in results:
        (record,) = [x for x in r.trace().records if x["type"] == "violation"]
        message = record["message"]
        assert "pair/one waits in trio.Event.wait" in message
        assert "pair/other waits in trio.Event.wait" in message
        assert "server" not in message
