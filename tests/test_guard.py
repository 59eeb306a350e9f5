"""Inside a run, every way to read the real world raises, naming the call and the fix."""

from __future__ import annotations

import datetime
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import trio

from dst import Env, Sim

from . import guarded_user_code
from .simkit import inline, one

TRAPPED: dict[str, tuple[Callable[[], object], str]] = {
    "time.time": (lambda: time.time(), "env.clock.now()"),
    "time.monotonic": (lambda: time.monotonic(), "env.clock.now()"),
    "datetime.now": (lambda: datetime.datetime.now(), "env.clock.now()"),
    "random.random": (lambda: random.random(), "env.rng"),
    "random.choice": (lambda: random.choice([1, 2]), "env.rng"),
    "os.urandom": (lambda: os.urandom(4), "env.rng.randbytes"),
    "uuid.uuid4": (lambda: uuid.uuid4(), "env.rng.getrandbits"),
    "uuid.uuid1": (lambda: uuid.uuid1(), "env.rng.getrandbits"),
    "threading.Thread.start": (lambda: threading.Thread(target=print).start(), "trio task"),
    "socket.socket": (lambda: socket.socket(), "env.net"),
    "from time import time": (guarded_user_code.wall_clock_now, "env.clock.now()"),
    "from datetime import datetime": (guarded_user_code.today, "env.clock.now()"),
}


@pytest.mark.parametrize("name", sorted(TRAPPED))
def test_the_guard_trips_on_each_trapped_call(name: str) -> None:
    call, instead = TRAPPED[name]

    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def culprit(env: Env) -> None:
            await env.store.get("x")
            call()

        sim.process("culprit", culprit, stores=["db"])

    result = one(inline(setup))
    assert result.violated == ["NoUncaughtError"]
    message = result.trace().records[-1]["message"]
    assert "NondeterminismError" in message
    assert "inside a simulated run" in message and instead in message
    assert "test_guard.py" in message or "guarded_user_code.py" in message


def test_everything_is_restored_after_the_run() -> None:
    originals = (time.time, random.random, os.urandom, uuid.uuid4, datetime.datetime,
                 threading.Thread.start, socket.socket.__init__, guarded_user_code.time,
                 trio.to_thread.run_sync)

    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def fine(env: Env) -> None:
            await env.store.get("x")

        sim.process("fine", fine, stores=["db"])

    assert one(inline(setup)).verdict == "pass"
    assert originals == (time.time, random.random, os.urandom, uuid.uuid4, datetime.datetime,
                         threading.Thread.start, socket.socket.__init__,
                         guarded_user_code.time, trio.to_thread.run_sync)
    assert isinstance(time.time(), float)


def test_seeded_generators_and_env_rng_are_allowed() -> None:
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def fine(env: Env) -> None:
            await env.store.put("x", env.rng.random() + random.Random(3).random())

        sim.process("fine", fine, stores=["db"])

    assert one(inline(setup)).verdict == "pass"
