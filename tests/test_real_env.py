"""The real clock, network and services of dst.runtime.real_env."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest
import trio
import trio.testing

from dst.env import Json, Message, ServiceUnavailable
from dst.runtime import LocalNetwork, LocalServices, MemoryStore, TrioClock, make_env
from dst.runtime.real_env import WallClock


def test_a_message_sent_to_a_process_is_received_with_its_source() -> None:
    async def main() -> Message:
        net = LocalNetwork()
        alice, bob = net.endpoint("alice"), net.endpoint("bob")
        await alice.send("bob", {"hello": [1, 2]})
        return await bob.recv()

    assert trio.run(main) == Message("alice", {"hello": [1, 2]})


def test_messages_from_one_sender_arrive_in_order() -> None:
    async def main() -> list[Json]:
        net = LocalNetwork()
        a, b = net.endpoint("a"), net.endpoint("b")
        for i in range(5):
            await a.send("b", i)
        return [(await b.recv()).body for _ in range(5)]

    assert trio.run(main) == [0, 1, 2, 3, 4]


def test_a_message_sent_before_the_receiver_exists_waits_for_it() -> None:
    async def main() -> Message:
        net = LocalNetwork()
        await net.endpoint("early").send("late", "hi")
        assert net.names() == ["early", "late"]
        return await net.endpoint("late").recv()

    assert trio.run(main) == Message("early", "hi")


def test_recv_blocks_until_a_message_arrives() -> None:
    async def main() -> None:
        net = LocalNetwork()
        a, b = net.endpoint("a"), net.endpoint("b")
        got: list[Message] = []

        async def receive() -> None:
            got.append(await b.recv())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(receive)
            await trio.testing.wait_all_tasks_blocked()
            assert got == []
            await a.send("b", "wake")
        assert got == [Message("a", "wake")]

    trio.run(main)


def test_two_processes_can_send_to_each_other_before_either_receives() -> None:
    async def main() -> tuple[Message, Message]:
        net = LocalNetwork()
        a, b = net.endpoint("a"), net.endpoint("b")
        for _ in range(100):
            await a.send("b", "x")
            await b.send("a", "y")
        return await a.recv(), await b.recv()

    assert trio.run(main) == (Message("b", "y"), Message("a", "x"))


def test_the_receiver_does_not_share_the_senders_object() -> None:
    async def main() -> Message:
        net = LocalNetwork()
        a, b = net.endpoint("a"), net.endpoint("b")
        body: dict[str, Any] = {"items": [1]}
        await a.send("b", body)
        body["items"].append("mutated after send")
        return await b.recv()

    assert trio.run(main).body == {"items": [1]}


def test_a_message_that_is_not_json_is_refused_at_the_sender() -> None:
    async def main() -> None:
        net = LocalNetwork()
        a = net.endpoint("a")
        with pytest.raises(TypeError, match=r"message from 'a' to 'b'.*set"):
            await a.send("b", {1, 2})  # type: ignore[arg-type]

    trio.run(main)


def test_a_process_needs_a_nonempty_name() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        LocalNetwork().endpoint("")


def test_a_registered_service_answers_calls() -> None:
    calls: list[tuple[str, Json]] = []

    async def echo(op: str, request: Json) -> Json:
        calls.append((op, request))
        return {"op": op, "request": request}

    services = LocalServices()
    services.register("echo", echo)

    async def main() -> Json:
        return await services.call("echo", "ping", [1, {"a": None}])

    assert trio.run(main) == {"op": "ping", "request": [1, {"a": None}]}
    assert calls == [("ping", [1, {"a": None}])]
    assert services.services() == ["echo"]


def test_calling_an_unknown_service_raises_lookup_error_naming_it() -> None:
    services = LocalServices()

    async def noop(op: str, request: Json) -> Json:
        return None

    services.register("known", noop)
    with pytest.raises(LookupError, match=r"no service 'llm'.*registered: 'known'"):
        trio.run(services.call, "llm", "complete", {})


def test_a_service_is_registered_only_once() -> None:
    async def noop(op: str, request: Json) -> Json:
        return None

    services = LocalServices()
    services.register("s", noop)
    with pytest.raises(ValueError, match="already registered"):
        services.register("s", noop)


def test_a_handler_can_play_an_unavailable_service() -> None:
    async def down(op: str, request: Json) -> Json:
        raise ServiceUnavailable("supplier is down")

    services = LocalServices()
    services.register("supplier", down)
    with pytest.raises(ServiceUnavailable, match="supplier is down"):
        trio.run(lambda: services.call("supplier", "order", {"sku": "x"}))


def test_handler_and_caller_share_no_objects() -> None:
    kept: list[Json] = []
    reply: dict[str, Any] = {"stock": [5]}

    async def handler(op: str, request: Json) -> Json:
        kept.append(request)
        return reply

    services = LocalServices()
    services.register("inv", handler)
    request: dict[str, Any] = {"skus": ["a"]}
    got = trio.run(services.call, "inv", "get", request)
    request["skus"].append("b")
    reply["stock"].append(6)
    assert kept == [{"skus": ["a"]}]
    assert got == {"stock": [5]}


def test_the_trio_clock_counts_from_its_start_and_sleeps_on_trio_time() -> None:
    async def main() -> tuple[float, float]:
        clock = TrioClock()
        before = clock.now()
        await clock.sleep(10)
        return before, clock.now()

    before, after = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert before == 0
    assert after == 10


def test_a_trio_clock_outside_trio_run_says_how_to_fix_it() -> None:
    with pytest.raises(RuntimeError, match=r"inside trio\.run"):
        TrioClock()
    assert TrioClock(start=1.0).start == 1.0


def test_a_wall_clock_counts_unix_seconds_so_a_restarted_process_agrees_on_it() -> None:
    before = time.time()
    first, second = WallClock(), WallClock()  # two incarnations of one process
    a = first.now()
    b = second.now()
    assert before <= a <= b <= time.time()
    since = WallClock(epoch=before).now()  # counted from the given epoch
    assert 0 <= since <= time.time() - before


def test_a_wall_clock_sleeps_on_trio_time() -> None:
    async def main() -> float:
        t0 = trio.current_time()
        await WallClock().sleep(5)
        return trio.current_time() - t0

    assert trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0)) == 5


def test_make_env_wires_a_process_to_its_stores_network_and_services() -> None:
    async def main() -> None:
        net, services, store = LocalNetwork(), LocalServices(), MemoryStore()
        env = make_env(
            "worker", stores={"main": store}, network=net, services=services, seed=7
        )
        assert env.name == "worker"
        assert env.store is store
        assert env.services is services
        assert (
            env.rng.random()
            == make_env(
                "other", stores={}, network=net, services=services, seed=7
            ).rng.random()
        )
        assert 0 <= env.clock.now() < math.inf
        await net.endpoint("boss").send("worker", "go")
        assert await env.net.recv() == Message("boss", "go")

    trio.run(main)
