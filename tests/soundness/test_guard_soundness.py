"""The guard leaves no silent way to the real world, and leaves nothing behind after a run."""

from __future__ import annotations

import datetime
import importlib
import io
import logging
import os
import random
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from dst import Env, Sim
from dst.sim.outside import EPOCH

from ..simkit import inline, one

HERE = Path(__file__).name
PYTHON = [sys.executable, "-c", "pass"]


def _violation(setup: Callable[[Sim, dict[str, Any]], Any]) -> tuple[list[str], str]:
    result = one(inline(setup))
    messages = [r["message"] for r in result.trace().records if r["type"] == "violation"]
    return result.violated, messages[0] if messages else ""


def _run_culprit(body: Callable[[Env], Awaitable[object]]) -> tuple[list[str], str]:
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def culprit(env: Env) -> None:
            await env.store.get("x")
            await body(env)

        sim.process("culprit", culprit, stores=["db"])

    return _violation(setup)


# -- trio's entry points to threads, files, subprocesses and sockets ----------

_WRAPPED_BEFORE_THE_RUN = trio.wrap_file(io.StringIO("made outside any run"))


async def _path_read_text(env: Env) -> object:
    return await trio.Path(__file__).read_text()


async def _path_cwd(env: Env) -> object:
    return await trio.Path.cwd()


async def _open_file(env: Env) -> object:
    return await trio.open_file(__file__)


async def _wrap_file(env: Env) -> object:
    return trio.wrap_file(io.StringIO())


async def _read_a_file_wrapped_before_the_run(env: Env) -> object:
    return await _WRAPPED_BEFORE_THE_RUN.read()


async def _to_thread(env: Env) -> object:
    return await trio.to_thread.run_sync(int)


async def _start_thread_soon(env: Env) -> object:
    trio.lowlevel.start_thread_soon(int, lambda _: None)
    return None


async def _run_process(env: Env) -> object:
    return await trio.run_process(PYTHON)


async def _open_process(env: Env) -> object:
    return await trio.lowlevel.open_process(PYTHON)


async def _trio_socket_from_a_descriptor(env: Env) -> object:
    return trio.socket.socket(fileno=0)


async def _trio_socketpair(env: Env) -> object:
    return trio.socket.socketpair()


async def _open_unix_socket(env: Env) -> object:
    return await trio.open_unix_socket("/nonexistent/dst.sock")


ENTRY_POINTS: dict[str, tuple[Callable[[Env], Awaitable[object]], str, str]] = {
    "trio.Path.read_text": (_path_read_text, "trio.Path.read_text()", "env.store"),
    "trio.Path.cwd": (_path_cwd, "trio.Path.cwd()", "env.store"),
    "trio.open_file": (_open_file, "trio.open_file()", "env.store"),
    "trio.wrap_file": (_wrap_file, "trio.wrap_file()", "env.store"),
    "a file wrapped before the run": (_read_a_file_wrapped_before_the_run,
                                      "trio.to_thread.run_sync()", "trio task"),
    "trio.to_thread.run_sync": (_to_thread, "trio.to_thread.run_sync()", "trio task"),
    "trio.lowlevel.start_thread_soon": (_start_thread_soon,
                                        "trio.lowlevel.start_thread_soon()", "trio task"),
    "trio.run_process": (_run_process, "trio.run_process()", "env.services"),
    "trio.lowlevel.open_process": (_open_process, "trio.lowlevel.open_process()",
                                   "env.services"),
    # trio's TCP (``trio.socket.socket()``, ``getaddrinfo``, ``open_tcp_stream``...)
    # reaches dst's simulated network instead (tests/test_netsim.py); these are real.
    "trio.socket.socket(fileno=...)": (_trio_socket_from_a_descriptor,
                                       "trio.socket.socket()", "env.net"),
    "trio.socket.socketpair": (_trio_socketpair, "trio.socket.socketpair()", "env.net"),
    "trio.open_unix_socket": (_open_unix_socket, "trio.open_unix_socket()", "env.net"),
}


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_trio_entry_points_to_the_real_world_stop_the_run(name: str) -> None:
    body, what, instead = ENTRY_POINTS[name]
    violated, message = _run_culprit(body)
    assert violated == ["Nondeterminism"]
    assert message.startswith(f"{what} called at ")
    assert f"{HERE}:" in message, "the site named is the user's line, not trio's"
    assert instead in message


# -- a caught trap still voids the run ------------------------------------------


def test_catching_the_trap_with_except_exception_does_not_save_the_run() -> None:
    async def swallow(env: Env) -> None:
        try:
            time.time()
        except Exception:
            pass
        await env.store.put("x", 1)

    violated, message = _run_culprit(swallow)
    assert violated == ["Nondeterminism"]
    assert message.startswith("time.time() called at ") and "env.clock.now()" in message


# -- exemption by exact module name ----------------------------------------------


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Any]]:
    """Import user code under a module name of the test's choosing; unload it after."""
    made: list[str] = []

    def make(name: str, source: str, *, load: bool = True) -> Any:
        (tmp_path / f"{name}.py").write_text(source)
        importlib.invalidate_caches()
        made.append(name)
        return importlib.import_module(name) if load else None

    monkeypatch.syspath_prepend(str(tmp_path))
    yield make
    for name in made:
        sys.modules.pop(name, None)


CLOCK_USER = """\
import time as time_module
from time import time


def imported_name():
    return time()


def module_attribute():
    return time_module.time()
"""


@pytest.mark.parametrize("how", ["imported_name", "module_attribute"])
@pytest.mark.parametrize("name", ["outcomes", "trio_x", "clickety", "coverage_tools"])
def test_a_user_module_named_like_an_exempt_package_is_still_guarded(
    name: str, how: str, user_module: Callable[..., Any]
) -> None:
    module = user_module(name, CLOCK_USER)

    async def read(env: Env) -> object:
        return getattr(module, how)()

    violated, message = _run_culprit(read)
    assert violated == ["Nondeterminism"]
    assert f"{name}.py:" in message


# -- stdlib logging ----------------------------------------------------------------


class _Keep(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        self.lines.append(self.format(record))


@pytest.fixture
def kept() -> Iterator[tuple[logging.Logger, _Keep]]:
    logger = logging.getLogger("guard-soundness")
    handler = _Keep()
    handler.setFormatter(logging.Formatter("%(asctime)s %(relativeCreated)d %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield logger, handler
    logger.removeHandler(handler)
    logger.propagate = True
    logger.setLevel(logging.NOTSET)


def test_stdlib_logging_works_inside_a_run_and_stamps_virtual_time(
    kept: tuple[logging.Logger, _Keep],
) -> None:
    logger, handler = kept

    async def log(env: Env) -> None:
        await trio.sleep(5)
        logger.warning("five virtual seconds in")

    violated, _ = _run_culprit(log)
    assert violated == []
    (record,) = handler.records
    # The wall clock installed libraries read in a run (2025-01-01 plus virtual seconds),
    # and the process's virtual pid: the same records on every replay.
    assert (record.created, record.msecs, record.relativeCreated) == (EPOCH + 5, 0.0, 5000.0)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(EPOCH + 5))  # this machine's zone
    assert handler.lines[0] == f"{stamp},000 5000 five virtual seconds in"
    assert record.process != os.getpid()

    logger.warning("after the run")
    assert handler.records[-1].created > 1e9, "the wall clock is back outside a run"
    assert logging.time is time  # type: ignore[attr-defined]
    assert logging.os is os  # type: ignore[attr-defined]


# -- nothing left behind -------------------------------------------------------------

LATE_IMPORT = """\
import time as time_module
from datetime import datetime
from time import time


class Formatter:
    converter = time_module.localtime
"""


def test_a_module_first_imported_during_a_run_gets_the_originals_back(
    user_module: Callable[..., Any],
) -> None:
    user_module("late_clock_user", LATE_IMPORT, load=False)

    async def import_it(env: Env) -> None:
        importlib.import_module("late_clock_user")

    violated, _ = _run_culprit(import_it)
    assert violated == []
    module = sys.modules["late_clock_user"]
    assert module.time is time.time
    assert module.datetime is datetime.datetime
    assert module.Formatter.converter is time.localtime
    assert isinstance(module.time(), float)


def test_a_trap_kept_past_the_run_behaves_like_the_original() -> None:
    kept: list[Callable[[], float]] = []

    async def keep(env: Env) -> None:
        kept.append(time.time)

    violated, _ = _run_culprit(keep)
    assert violated == []
    assert kept[0] is not time.time, "the run saw the trap, out of the guard's reach"
    assert kept[0]() > 1e9


def test_a_thread_started_before_the_run_is_not_judged_and_cannot_touch_the_run() -> None:
    go, done = threading.Event(), threading.Event()
    got: list[object] = []

    def outside() -> None:  # stands for a log listener or a watchdog of the test runner
        go.wait()
        try:
            got.append(time.time())
        except Exception as exc:
            got.append(exc)
        done.set()

    thread = threading.Thread(target=outside)
    thread.start()

    async def meanwhile(env: Env) -> None:
        go.set()
        done.wait()  # blocks the simulation until the other thread has read the clock

    violated, _ = _run_culprit(meanwhile)
    thread.join()
    assert violated == []
    assert isinstance(got[0], float)


# -- other ways to the real world --------------------------------------------------


READERS: dict[str, tuple[Callable[[], object], str, str]] = {
    "time.perf_counter": (lambda: time.perf_counter(), "time.perf_counter()", "env.clock"),
    "time.process_time": (lambda: time.process_time(), "time.process_time()", "env.clock"),
    "time.localtime": (lambda: time.localtime(), "time.localtime() without", "env.clock"),
    "time.gmtime": (lambda: time.gmtime(), "time.gmtime() without", "env.clock"),
    "time.strftime": (lambda: time.strftime("%Y"), "time.strftime() without", "env.clock"),
    "random.expovariate": (lambda: random.expovariate(1.0), "random.expovariate()",
                           "env.rng"),
    "random.SystemRandom": (lambda: random.SystemRandom().random(),
                            "random.SystemRandom.random()", "env.rng"),
    "secrets.token_hex": (lambda: secrets.token_hex(4), "random.SystemRandom.randbytes()",
                          "env.rng"),
    "random.Random()": (lambda: random.Random(), "random.Random() without a seed",
                        "env.rng"),
    "os.getpid": (lambda: os.getpid(), "os.getpid()", "env.name"),
    "subprocess.run": (lambda: subprocess.run(PYTHON, check=False), "subprocess.Popen()",
                       "env.services"),
    "socket.getaddrinfo": (lambda: socket.getaddrinfo("localhost", 80),
                           "socket.getaddrinfo()", "env.net"),
}


@pytest.mark.parametrize("name", sorted(READERS))
def test_each_other_reader_of_the_real_world_stops_the_run(name: str) -> None:
    call, what, instead = READERS[name]

    async def read(env: Env) -> object:
        return call()

    violated, message = _run_culprit(read)
    assert violated == ["Nondeterminism"]
    assert message.startswith(what)
    assert f"{HERE}:" in message and instead in message


def test_clock_conversions_of_a_given_time_are_allowed_and_only_now_is_trapped() -> None:
    sites: list[int] = []

    async def convert(env: Env) -> None:
        time.localtime(0)
        time.strftime("%Y", time.gmtime(0))
        time.ctime(0)
        random.Random(7).random()
        datetime.datetime.fromtimestamp(0, tz=datetime.UTC)
        sites.append(sys._getframe().f_lineno + 1)
        time.localtime()

    violated, message = _run_culprit(convert)
    assert violated == ["Nondeterminism"]
    assert f"{HERE}:{sites[0]} " in message


MADE_BEFORE_THE_RUN = datetime.datetime(2020, 1, 1)


def test_a_datetime_made_before_the_run_is_still_a_datetime_inside_it() -> None:
    seen: list[bool] = []

    async def check(env: Env) -> None:
        seen.append(isinstance(MADE_BEFORE_THE_RUN, datetime.datetime))
        seen.append(isinstance(datetime.datetime.fromisoformat("2021-01-01"), datetime.date))

    violated, _ = _run_culprit(check)
    assert violated == []
    assert seen == [True, True]
