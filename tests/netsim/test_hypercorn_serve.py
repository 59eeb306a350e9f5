"""hypercorn's own ``serve()``, unmodified, in a simulated process: its listener is made
with the standard library's socket by hypercorn and lives on the simulated network; no
real socket is opened.  httpx in another process reaches it by name, a retry after a lost
reply is found and replays, and everything else on a standard-library socket stays refused.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from dst import Env, FaultPlan, Sim
from dst.runner.single import RunResult, replay_trace
from dst.testing import SeedFailed, check_seeds
from dst.trace.codec import read_trace

from ..simkit import events, inline, many, one
from . import shop_api

# httpx leaves its request body's async generator unfinished when the connection resets
# while it sends (as it would over a real socket); trio warns when it is collected.
pytestmark = pytest.mark.filterwarnings("ignore:Async generator 'httpx:ResourceWarning")


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> SeedFailed:
    """The first seed of the planted bug that charges twice, its trace written."""
    with pytest.raises(SeedFailed) as failed:
        check_seeds(shop_api.scenario, 300, out=tmp_path_factory.mktemp("bug"),
                    idempotent=False)
    return failed.value


def test_httpx_charges_through_hypercorns_serve_and_the_keyed_retry_is_safe() -> None:
    runs = many(shop_api.scenario, range(60), shop_api.scenario.config())
    assert all(r.verdict == "pass" for r in runs), [(r.seed, r.violated) for r in runs]
    told = [[event for _, event, _ in events(r)] for r in runs]
    assert all(t.count("charged") == 1 for t in told), told
    assert any("charge replayed" in t for t in told), "a retry after a lost reply was answered"


def test_a_retry_after_a_lost_reply_charges_twice_and_replays_exactly(found: SeedFailed) -> None:
    story = str(found)
    assert "ChargedOnce violated" in story and "order-1 was charged 2 times" in story, story
    assert "reset:" in story and "shop-api:8080 -> shop" in story, "the reply was lost"
    trace = read_trace(found.path)
    again = replay_trace(shop_api.scenario, trace)
    assert again.divergence is None and again.violated == ["ChargedOnce"]


def test_the_same_seed_gives_the_same_trace_byte_for_byte(found: SeedFailed,
                                                          tmp_path: Path) -> None:
    with pytest.raises(SeedFailed) as again:
        check_seeds(shop_api.scenario, [found.seed], out=tmp_path, idempotent=False)
    assert again.value.path != found.path
    assert again.value.path.read_bytes() == found.path.read_bytes()


def test_serve_returns_on_its_shutdown_trigger_and_is_cancelled_at_the_end_otherwise() -> None:
    for shutdown in (True, False):
        for result in many(shop_api.scenario, range(10),
                           shop_api.scenario.checked_config({"shutdown": shutdown})):
            assert result.verdict == "pass", result.violated
            told = [(actor, event) for actor, event, _ in events(result)]
            assert (("shop-api", "server stopped") in told) is shutdown, told


def test_a_crashed_server_restarts_and_binds_its_port_again() -> None:
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        world = {"paid": False, "health": None, "store": sim.store("payments")}
        sim.process("shop-api", lambda env: shop_api.shop_api(env, False), stores=["payments"])
        sim.process("shop", lambda env: shop_api.shop(env, world, True, False),
                    crashable=False)
        return world

    runs = many(inline(setup, faults=FaultPlan(max_crashes=1, crash_weight=0.2),
                       invariants={"ChargedOnce": shop_api.charged_once}), range(20))
    assert all(r.verdict == "pass" for r in runs), [(r.seed, r.violated) for r in runs]

    def charged_after_a_restart(result: RunResult) -> bool:
        records = result.trace().records
        restarts = [x["step"] for x in records if x["type"] == "fault" and x["fault"] == "restart"]
        return bool(restarts) and any(x["type"] == "event" and x["event"] == "charged"
                                      and x["step"] > restarts[0] for x in records)

    assert any(charged_after_a_restart(r) for r in runs), \
        "a restarted incarnation served a charge on the same port"


def _sockets() -> set[str]:
    """The real sockets this process holds (Linux: what its descriptors link to)."""
    held = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:"):
            held.add(f"{fd} {target}")
    return held


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="descriptors listed by /proc")
def test_a_run_with_hypercorns_serve_opens_no_real_socket() -> None:
    async def trios_own() -> set[str]:
        return _sockets()

    baseline = trio.run(trios_own)  # the wake-up socket pair every trio.run opens
    during: list[set[str]] = []

    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        world = shop_api.setup(sim, shop_api.scenario.config())

        async def look(env: Env) -> None:
            await trio.sleep(5)  # hypercorn listens, the shop has charged
            during.append(_sockets())

        sim.process("probe", look)
        return world

    before = _sockets()
    results = many(inline(setup), range(3))
    assert [r.verdict for r in results] == ["pass"] * 3, [r.violated for r in results]
    assert len(during) == 3 and all(len(s) == len(baseline) for s in during), (baseline, during)
    assert _sockets() == before


def _serving(bind: str) -> Any:
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def api(env: Env) -> None:
            config = Config()
            config.bind = [bind]
            config.errorlog = None
            await serve(shop_api.make_app(env, trio.Event()), config)  # type: ignore[arg-type]

        sim.process("shop-api", api)

    return inline(setup)


@pytest.mark.parametrize("bind", ["[::]:8080", "unix:/tmp/dst-shop-api.sock", "fd://3"])
def test_a_listener_dst_does_not_simulate_stays_refused(bind: str) -> None:
    result = one(_serving(bind))
    assert result.violated == ["Nondeterminism"]
    (violation,) = [r for r in result.trace().records if r["type"] == "violation"]
    assert violation["message"].startswith("socket.socket() called at "), violation
    assert "hypercorn" in violation["message"] and "test_hypercorn_serve.py:" in violation[
        "message"], "it names hypercorn's line and the user's line it ran for"
    assert not os.path.exists("/tmp/dst-shop-api.sock")


def _user(call: Any, strict: bool = True) -> RunResult:
    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def mine(env: Env) -> None:
            await trio.sleep(1)
            call()

        sim.process("mine", mine)

    scenario = inline(setup)
    scenario.strict = strict
    return one(scenario)


@pytest.mark.parametrize("strict", [True, False])
def test_the_users_own_stdlib_socket_is_still_refused(strict: bool) -> None:
    """Even under ``strict=False``, which answers the user's clock reads from the run."""
    result = _user(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM), strict)
    assert result.violated == ["Nondeterminism"]
    (violation,) = [r for r in result.trace().records if r["type"] == "violation"]
    assert violation["message"].startswith("socket.socket() called at "), violation
    assert "test_hypercorn_serve.py:" in violation["message"]


@pytest.mark.parametrize("use", ["connect", "fileno", "recv", "detach"])
def test_a_librarys_stand_in_socket_refuses_anything_but_a_listeners_set_up(use: str) -> None:
    calls = {"connect": lambda s: s.connect(("shop", 80)), "fileno": lambda s: s.fileno(),
             "recv": lambda s: s.recv(10), "detach": lambda s: s.detach()}

    def listen_then(config: Config) -> None:
        (sock,) = config.create_sockets().insecure_sockets  # hypercorn makes it
        sock.listen(5)
        assert sock.getsockname() == ("0.0.0.0", 8080) and sock.family == socket.AF_INET
        calls[use](sock)

    config = Config()
    config.bind = ["0.0.0.0:8080"]
    result = _user(lambda: listen_then(config))
    assert result.violated == ["Nondeterminism"]
    (violation,) = [r for r in result.trace().records if r["type"] == "violation"]
    message = violation["message"]
    assert message.startswith(f"socket.socket.{use}() on a library's simulated listener "
                              "called at "), message
    assert "test_hypercorn_serve.py:" in message and "\n" not in message
