"""Inside a run, every way to read the real world raises, naming the call and the fix."""

from __future__ import annotations

import datetime
import logging
import os
import random
import socket
import subprocess
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

TRAPPED: dict[str, tuple[Callable[[], object], str, str]] = {
    "time.time": (lambda: time.time(), "time.time()", "env.clock.now()"),
    "time.monotonic": (lambda: time.monotonic(), "time.monotonic()", "env.clock.now()"),
    "datetime.now": (lambda: datetime.datetime.now(), "datetime.datetime.now()",
                     "env.clock.now()"),
    "random.random": (lambda: random.random(), "random.random()", "env.rng"),
    "random.choice": (lambda: random.choice([1, 2]), "random.choice()", "env.rng"),
    "os.urandom": (lambda: os.urandom(4), "os.urandom()", "env.rng.randbytes"),
    "uuid.uuid4": (lambda: uuid.uuid4(), "uuid.uuid4()", "env.rng.getrandbits"),
    "uuid.uuid1": (lambda: uuid.uuid1(), "uuid.uuid1()", "env.rng.getrandbits"),
    "threading.Thread.start": (lambda: threading.Thread(target=print).start(),
                               "threading.Thread.start()", "trio task"),
    "socket.socket": (lambda: socket.socket(), "socket.socket()", "env.net"),
    "from time import time": (guarded_user_code.wall_clock_now, "time.time()",
                              "env.clock.now()"),
    "from datetime import datetime": (guarded_user_code.today, "datetime.datetime.now()",
                                      "env.clock.now()"),
}


@pytest.mark.parametrize("name", sorted(TRAPPED))
def test_the_guard_trips_on_each_trapped_call(name: str) -> None:
    call, what, instead = TRAPPED[name]

    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def culprit(env: Env) -> None:
            await env.store.get("x")
            call()

        sim.process("culprit", culprit, stores=["db"])

    result = one(inline(setup))
    assert result.violated == ["Nondeterminism"]
    (violation,) = [r for r in result.trace().records if r["type"] == "violation"]
    message = violation["message"]
    assert message.startswith(what + " called at ")
    assert "inside a simulated run" in message and instead in message
    assert "test_guard.py:" in message or "guarded_user_code.py:" in message
    assert os.sep not in message.partition(" inside ")[0]  # the file's name, as elsewhere


def test_everything_is_restored_after_the_run() -> None:
    def everything() -> tuple[object, ...]:
        return (time.time, time.perf_counter, random.random, random.Random.seed, os.urandom,
                os.getpid, uuid.uuid4, datetime.datetime, datetime.date, threading.Thread.start,
                socket.socket.__init__, subprocess.Popen.__init__, guarded_user_code.time,
                guarded_user_code.datetime, trio.to_thread.run_sync,
                trio.lowlevel.start_thread_soon, trio.Path.read_text, trio.open_file,
                logging.time, logging.os)  # type: ignore[attr-defined]

    originals = everything()

    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def fine(env: Env) -> None:
            await env.store.get("x")

        sim.process("fine", fine, stores=["db"])

    assert one(inline(setup)).verdict == "pass"
    assert all(a is b for a, b in zip(originals, everything(), strict=True))
    assert isinstance(time.time(), float)


def test_env_rng_reseeded_without_a_seed_draws_the_new_one_from_the_run_not_the_machine(
        ) -> None:
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def reseed(env: Env) -> None:
            env.rng.seed()  # before any draw: random.Random.seed would read os.urandom
            await env.store.put("x", env.rng.random())

        sim.process("reseed", reseed, stores=["db"])

    scenario = inline(setup)
    traces = [[one(scenario, seed).trace().text() for seed in (0, 1)] for _ in range(2)]
    assert traces[0] == traces[1]  # each seed the same twice
    assert traces[0][0] != traces[0][1]  # and from its seed


def test_seeded_generators_and_env_rng_are_allowed() -> None:
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def fine(env: Env) -> None:
            await env.store.put("x", env.rng.random() + random.Random(3).random())

        sim.process("fine", fine, stores=["db"])

    assert one(inline(setup)).verdict == "pass"
