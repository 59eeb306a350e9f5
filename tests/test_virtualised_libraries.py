"""Reads of the outside world made by installed libraries get the simulation's values.

The user's own code that reads the wall clock, ``uuid4``, ``os.urandom``, the global
``random`` or ``secrets`` inside a run is refused (``Nondeterminism``), as before.  The
same reads made by a library (an SDK stamping a request) are plumbing: they read virtual
time and draw from generators seeded by the run, the process and its incarnation, so a
replay gets the same bytes.  "A library" is, by default, code installed in site-packages;
a scenario that declares its code (``Scenario(user_code=[...])``) makes everything else
one.  A tiny fake SDK is written to a temporary directory for each form.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from dst import Env, Scenario, Sim
from dst.runner.single import replay_trace, run_seeds
from dst.sim.outside import EPOCH

from .simkit import inline, many

#: The fake SDK: every read the guard virtualises for libraries, made the ways real
#: libraries make them (a module-level ``from time import time``, a dataclass whose field
#: defaults to ``time.time``, a default argument, a closure, a worker thread).
SDK = '''
import dataclasses
import datetime
import os
import random
import secrets
import threading
import time
import uuid
from collections.abc import Callable
from time import time as _wall

import trio

_NOW = datetime.datetime.now


@dataclasses.dataclass
class Session:
    clock: Callable[[], float] = time.time
    ticks: Callable[[], float] = dataclasses.field(default_factory=lambda: time.monotonic)


def _stamped_at(clock=time.time):
    return clock()


def _later(clock=time.perf_counter):
    def read():
        return clock()
    return read


def stamp():
    return {
        "time": time.time(),
        "time_ns": time.time_ns(),
        "monotonic": time.monotonic(),
        "perf_counter_ns": time.perf_counter_ns(),
        "alias": _wall(),
        "session": Session().clock(),
        "default": _stamped_at(),
        "closure": _later()(),
        "now": datetime.datetime.now().isoformat(),
        "alias_now": _NOW().isoformat(),
        "utcnow": datetime.datetime.utcnow().isoformat(),
        "aware": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "today": datetime.date.today().isoformat(),
        "ctime": time.ctime(),
        "strftime": time.strftime("%Y-%m-%d %H:%M:%S"),
        "uuid4": str(uuid.uuid4()),
        "uuid1": str(uuid.uuid1()),
        "urandom": os.urandom(8).hex(),
        "random": random.random(),
        "choice": random.choice("abcdefgh"),
        "token_hex": secrets.token_hex(8),
        "system": random.SystemRandom().random(),
        "unseeded": random.Random().random(),
        "pid": os.getpid(),
    }


def platform_name():
    return "virtual-" + str(len(os.urandom(4)))


async def headers():
    return {"os": await trio.to_thread.run_sync(platform_name)}


def background():
    threading.Thread(target=print).start()


def adapt(text):
    import pydantic

    return pydantic.TypeAdapter(datetime.datetime).validate_python(text)
'''

#: A library that uses ``datetime`` only as a type: pydantic models built lazily, inside
#: the run (it never reads a clock, so it keeps the real classes while the guard is on).
MODELS = '''
import datetime

from pydantic import BaseModel, ConfigDict


class Event(BaseModel):
    model_config = ConfigDict(defer_build=True)

    at: datetime.datetime
    day: datetime.date


def parse(payload):
    event = Event.model_validate(payload)
    return type(event.at) is datetime.datetime, event.at.isoformat(), event.day.isoformat()
'''


def _write_package(root: Path, name: str) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text(textwrap.dedent(SDK))


@pytest.fixture
def library(tmp_path: Path) -> Iterator[Any]:
    """``fakesdk``, installed: under a directory named site-packages on sys.path."""
    site = tmp_path / "venv" / "lib" / "site-packages"
    _write_package(site, "fakesdk")
    yield from _imported(site, "fakesdk")


@pytest.fixture
def plain(tmp_path: Path) -> Iterator[Any]:
    """``plainsdk``, on sys.path but not installed (a source tree): the user's by default."""
    src = tmp_path / "src"
    _write_package(src, "plainsdk")
    yield from _imported(src, "plainsdk")


def _imported(where: Path, name: str) -> Iterator[Any]:
    sys.path.insert(0, str(where))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(where))
        sys.modules.pop(name, None)


def _sdk_user(sdk: Any, *, user_code: list[str] | None = None) -> Scenario:
    """Two processes each call the SDK twice, a virtual minute apart, and store what it read."""

    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def caller(env: Env) -> None:
            for i in range(2):
                await env.store.put(f"{env.name}/{i}", sdk.stamp())
                await env.store.put(f"{env.name}/{i}/headers", await sdk.headers())
                await env.clock.sleep(60)

        sim.process("a", caller, stores=["db"])
        sim.process("b", caller, stores=["db"])
        return sim.store("db")

    scenario = inline(setup)
    scenario.user_code = user_code
    return scenario


def _read(result: Any) -> dict[str, Any]:
    db = result.sim.stores["db"]
    return {key: value for key, value in db.scan("")}


def test_a_library_reads_virtual_time_and_seeded_entropy(library: Any) -> None:
    (result,) = many(_sdk_user(library), range(1))
    assert result.verdict == "pass", result.violated
    got = _read(result)
    first, later = got["a/0"], got["a/1"]
    assert first["time"] == first["alias"] == first["session"] == first["default"] == EPOCH
    assert later["time"] == EPOCH + 60.0 and later["time_ns"] == (EPOCH + 60) * 10**9
    assert first["monotonic"] == first["closure"] == 0.0 and later["monotonic"] == 60.0
    assert later["perf_counter_ns"] == 60 * 10**9
    assert first["now"] == first["alias_now"] == first["utcnow"] == "2025-01-01T00:00:00"
    assert later["aware"] == "2025-01-01T00:01:00+00:00"
    assert first["today"] == "2025-01-01"
    assert first["ctime"] == "Wed Jan  1 00:00:00 2025"
    assert later["strftime"] == "2025-01-01 00:01:00"
    assert uuid.UUID(first["uuid4"]).version == 4 and uuid.UUID(first["uuid1"]).version == 1
    assert uuid.UUID(later["uuid1"]).time > uuid.UUID(first["uuid1"]).time
    assert len(first["urandom"]) == 16 and len(first["token_hex"]) == 16
    assert 0.0 <= first["random"] < 1.0 and 0.0 <= first["system"] < 1.0
    # Each process draws from its own generators, each call from further along them.
    for key in ("uuid4", "urandom", "random", "token_hex", "system", "unseeded"):
        assert first[key] != later[key] != got["b/1"][key], key
        assert first[key] != got["b/0"][key], key
    assert first["pid"] == later["pid"] != got["b/0"]["pid"]
    assert got["a/0/headers"] == {"os": "virtual-4"}  # the worker thread ran inline


def test_the_same_seed_gets_the_same_bytes_and_a_replay_is_identical(library: Any) -> None:
    scenario = _sdk_user(library)
    first, again, other = many(scenario, range(1))[0], many(scenario, range(1))[0], \
        many(scenario, range(1, 2))[0]
    assert first.trace().record_lines() == again.trace().record_lines()
    assert _read(first)["a/0"]["uuid4"] != _read(other)["a/0"]["uuid4"]  # seeds differ
    replayed = replay_trace(scenario, first.trace())
    assert replayed.divergence is None
    assert replayed.trace().record_lines() == first.trace().record_lines()


def test_a_batch_gives_each_seed_the_bytes_it_gets_alone(library: Any) -> None:
    scenario = _sdk_user(library)
    batch: list[Any] = []
    run_seeds(scenario, scenario.config(), range(3, 8), batch.append)
    alone = [many(scenario, range(seed, seed + 1))[0] for seed in range(3, 8)]
    assert [r.trace().record_lines() for r in batch] == [r.trace().record_lines()
                                                          for r in alone]


def test_the_same_reads_in_the_users_own_code_are_still_refused(library: Any) -> None:
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def caller(env: Env) -> None:
            await env.store.get("x")
            await env.store.put("t", time.time())

        sim.process("caller", caller, stores=["db"])

    (result,) = many(inline(setup), range(1))
    assert result.violated == ["Nondeterminism"]
    (message,) = [r["message"] for r in result.trace().records if r["type"] == "violation"]
    assert message.startswith("time.time() called at ") and "test_virtualised_libraries.py:" \
        in message and "use env.clock.now() instead" in message


def test_a_library_still_may_not_start_a_thread(library: Any) -> None:
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def caller(env: Env) -> None:
            await env.store.get("x")
            library.background()

        sim.process("caller", caller, stores=["db"])

    (result,) = many(inline(setup), range(1))
    assert result.violated == ["Nondeterminism"]
    (message,) = [r["message"] for r in result.trace().records if r["type"] == "violation"]
    assert message.startswith("threading.Thread.start() called at fakesdk/__init__.py:")


def test_pydantic_models_built_inside_a_run_see_the_real_datetime(
        library: Any, tmp_path: Path) -> None:
    """pydantic asks ``obj is datetime.datetime`` of each annotation when it builds a
    schema (lazily: ``defer_build``, inside the run); the datetime stand-ins of the
    guard must not change its answer, nor what a library's clock read gets."""
    pytest.importorskip("pydantic")
    site = tmp_path / "models" / "site-packages"
    (site / "fakemodels").mkdir(parents=True)
    (site / "fakemodels" / "__init__.py").write_text(textwrap.dedent(MODELS))
    sys.path.insert(0, str(site))
    models = importlib.import_module("fakemodels")

    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def caller(env: Env) -> None:
            parsed = models.parse({"at": "2025-03-04T05:06:07", "day": "2025-03-04"})
            await env.store.put("parsed", list(parsed))
            # A library that reads the clock and builds a schema of the stand-in itself.
            await env.store.put("adapted", library.adapt("2025-03-04T05:06:07").isoformat())
            await env.store.put("now", library.stamp()["now"])

        sim.process("caller", caller, stores=["db"])

    try:
        (result,) = many(inline(setup), range(1))
    finally:
        sys.path.remove(str(site))
        sys.modules.pop("fakemodels", None)
    assert result.verdict == "pass", [r for r in result.trace().records
                                      if r["type"] == "violation"]
    db = result.sim.stores["db"]
    assert db.peek("parsed") == [True, "2025-03-04T05:06:07", "2025-03-04"]
    assert db.peek("adapted") == "2025-03-04T05:06:07"
    assert db.peek("now") == "2025-01-01T00:00:00"


def test_code_on_sys_path_but_not_installed_is_the_users_by_default(plain: Any) -> None:
    (result,) = many(_sdk_user(plain), range(1))
    assert result.violated == ["Nondeterminism"]
    (message,) = [r["message"] for r in result.trace().records if r["type"] == "violation"]
    assert "plainsdk" in message and message.startswith("time.time() called at ")


def test_a_scenario_that_declares_its_code_makes_everything_else_a_library(plain: Any) -> None:
    (result,) = many(_sdk_user(plain, user_code=["tests"]), range(1))
    assert result.verdict == "pass", result.violated
    assert _read(result)["a/0"]["time"] == EPOCH
    # Declared by path as well as by module; the declared code itself stays strict.
    path = str(Path(plain.__file__).parent)
    (strict,) = many(_sdk_user(plain, user_code=[path]), range(1))
    assert strict.violated == ["Nondeterminism"]


def test_a_relaxed_scenario_gives_the_users_reads_virtual_values_too() -> None:
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def caller(env: Env) -> None:
            await env.clock.sleep(5)
            await env.store.put("t", time.time())
            await env.store.put("id", str(uuid.uuid4()))

        sim.process("caller", caller, stores=["db"])

    scenario = inline(setup)
    scenario.strict = False
    (result,) = many(scenario, range(1))
    assert result.verdict == "pass", result.violated
    assert result.sim.stores["db"].peek("t") == EPOCH + 5


def test_everything_is_put_back_after_the_run(library: Any) -> None:
    before = (library.Session.clock, library._stamped_at.__defaults__,
              library._later.__defaults__, library._wall,
              library.Session.__dataclass_fields__["clock"].default)
    (result,) = many(_sdk_user(library), range(1))
    assert result.verdict == "pass"
    after = (library.Session.clock, library._stamped_at.__defaults__,
             library._later.__defaults__, library._wall,
             library.Session.__dataclass_fields__["clock"].default)
    assert all(a is b for a, b in zip(before, after, strict=True))
    assert library.Session.clock is time.time and library._wall is time.time
    assert abs(library._stamped_at() - time.time()) < 3600  # the real clock again
    assert abs(library.Session().clock() - time.time()) < 3600


CLI_SCENARIO = '''
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "venv" / "lib" / "site-packages"))

import fakesdk

from dst import Scenario

scenario = Scenario("sdk", doc="a library reads clocks and entropy")


@scenario.setup
def setup(sim, config):
    async def caller(env):
        for i in range(3):
            await env.store.put(f"{env.name}/{i}", fakesdk.stamp())
            await env.clock.sleep(1)

    sim.process("a", caller, stores=["db"])
    sim.process("b", caller, stores=["db"])
'''


def test_check_determinism_holds_for_a_library_that_reads_the_outside_world(
        tmp_path: Path) -> None:
    from dst.cli import main

    _write_package(tmp_path / "venv" / "lib" / "site-packages", "fakesdk")
    path = tmp_path / "sdk_scenario.py"
    path.write_text(CLI_SCENARIO)
    try:
        result = CliRunner().invoke(main, ["run", str(path), "--seeds", "4",
                                           "--check-determinism", "--out", str(tmp_path / "out")])
    finally:
        sys.modules.pop("fakesdk", None)
    assert result.exit_code == 0, result.output
    assert "4 of 4 seeds replayed identically" in result.output


# -- the OpenAI SDK, unmodified ----------------------------------------------------------


def _openai_agent(build: Any) -> Scenario:
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        build(sim)
        return sim.store("db")

    return inline(setup)


def test_the_openai_client_is_built_and_computes_its_platform_headers_inside_a_run() -> None:
    openai = pytest.importorskip("openai")
    from openai._base_client import get_platform
    from openai._utils import asyncify

    def build(sim: Sim) -> None:
        async def agent(env: Env) -> None:
            client = openai.AsyncOpenAI(api_key="sk-test", base_url="http://llm:8000/v1")
            # What the SDK's first request does: get_platform in a worker thread.
            client._platform = await asyncify(get_platform)()
            headers = {k: v for k, v in client.default_headers.items() if isinstance(v, str)}
            await env.store.put("headers", headers)
            await env.store.put("idempotency", client._idempotency_key())  # a uuid4
            await client.close()

        sim.process("agent", agent, stores=["db"])

    scenario = _openai_agent(build)
    first, again = many(scenario, range(1))[0], many(scenario, range(1))[0]
    assert first.verdict == "pass", [r for r in first.trace().records if r["type"] == "violation"]
    db = first.sim.stores["db"]
    assert db.peek("headers")["X-Stainless-OS"] and db.peek("headers")["X-Stainless-Arch"]
    assert first.trace().record_lines() == again.trace().record_lines()
    assert replay_trace(scenario, first.trace()).divergence is None
    other = many(scenario, range(1, 2))[0]
    assert other.sim.stores["db"].peek("idempotency") != db.peek("idempotency")


def test_a_fault_free_run_never_sees_the_sdks_timeout_fire_before_the_reply() -> None:
    """The SDK's 60 s timeout and the fake LLM's reply over dst's TCP: without a slow
    fault in the plan the reply, which takes no virtual time, always comes first."""
    openai = pytest.importorskip("openai")
    from dst.fakes import llm_http

    def build(sim: Sim) -> None:
        llm_http.openai(sim, "llm", lambda turn: llm_http.text("hello"))

        async def agent(env: Env) -> None:
            client = openai.AsyncOpenAI(api_key="x", base_url="http://llm:8000/v1",
                                        max_retries=0, timeout=60.0)
            try:
                reply = await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}])
                await env.store.put("answer", reply.choices[0].message.content)
            except openai.APITimeoutError:
                await env.store.put("answer", "timed out")
            except openai.APIConnectionError:
                await env.store.put("answer", "not listening yet")  # connected too early
            await client.close()

        sim.process("agent", agent, stores=["db"])

    runs = many(_openai_agent(build), range(40))
    answers = [r.sim.stores["db"].peek("answer") for r in runs]
    assert all(r.verdict == "pass" for r in runs)
    assert "timed out" not in answers and answers.count("hello") > 30
    assert replay_trace(_openai_agent(build), runs[0].trace()).divergence is None


# -- the explorer sees what libraries read ----------------------------------------------


def test_a_library_reading_the_clock_is_a_step_that_read_the_time(library: Any) -> None:
    """A timer commutes with a step that read no time; a step whose library read the
    virtual clock did read it, so reduction must explore both orders: the states it
    reaches are exactly plain search's."""
    import json

    from dst.explore.exhaustive import Bounds, explore

    def timed(seen: set[str]) -> Scenario:
        def setup(sim: Sim, _: dict[str, Any]) -> Any:
            db = sim.store("db")
            noted: dict[str, Any] = {}

            async def worker(env: Env) -> None:
                await env.store.put("x", 1)
                noted["stamp"] = library._stamped_at()  # the library's time.time()
                await env.store.put("y", 1)

            async def sleeper(env: Env) -> None:
                await env.clock.sleep(1.0)
                await env.store.put("z", 1)

            sim.process("worker", worker, stores=["db"])
            sim.process("sleeper", sleeper, stores=["db"])
            return db, noted, sim

        def record(world: Any) -> bool:
            db, noted, sim = world
            seen.add(json.dumps([db.snapshot(), noted, sim.now], sort_keys=True))
            return True

        scenario = inline(setup, invariants={"Seen": record})
        return scenario

    reduced: set[str] = set()
    plain: set[str] = set()
    r = explore(timed(reduced), {}, Bounds(max_steps=30, slow=1))
    p = explore(timed(plain), {}, Bounds(max_steps=30, slow=1), por=False)
    assert r.proof and p.proof, (r.violations, p.violations)
    assert not r.violations and not p.violations, (r.violations, p.violations)
    assert r.schedules < p.schedules, (r.schedules, p.schedules, r.no_reduction)
    assert reduced == plain
    stamps = {json.loads(s)[1].get("stamp") for s in plain}
    assert {EPOCH, EPOCH + 1.0} <= stamps  # before and after the timer
