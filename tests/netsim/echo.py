"""Raw trio TCP between two processes: an echo server and a client that checks what comes back.

The client's messages, what each ``receive_some`` returned and how each
connection ended are written to the world (``dict``) for the tests to read.
"""

from __future__ import annotations

import socket
from typing import Any

import structlog
import trio

from dst import Env, FaultPlan, Scenario, Sim

log = structlog.get_logger()

#: The world of every run set up, in order (the tests read them).
WORLDS: list[dict[str, Any]] = []

MESSAGES = (b"hello", b"a longer line that crosses a boundary or two\n", bytes(range(40)))


def _faults(config: dict[str, Any]) -> FaultPlan:
    return FaultPlan(
        max_crashes=config["crashes"], crash_only=("server",), crash_weight=0.2,
        max_partitions=config["partitions"], partition_of=("server",), partition_weight=0.3,
        max_resets=config["resets"], max_segment_delays=config["delays"],
        preemptions=config["preemptions"],
    )


scenario = Scenario("netsim_echo", doc="an echo server and its client over simulated TCP",
                    faults=_faults)
scenario.switch("crashes", 0, doc="crashes of the server")
scenario.switch("partitions", 0, doc="partitions of the server")
scenario.switch("resets", 0, doc="connection resets")
scenario.switch("delays", 0, doc="delayed segments")
scenario.switch("preemptions", 2, doc="preemptions at trio checkpoints")
scenario.switch("timeout", 0.0, doc="the client's timeout for the whole exchange (0: none)")
scenario.switch("framed", True, doc="read until the whole echo is back (else: one receive_some)")
scenario.planted_bug({"framed": False}, breaks=["EchoedIntact"],
                     doc="one recv taken for one message: a split reply is cut short")


async def server(env: Env) -> None:
    async def echo(stream: trio.SocketStream) -> None:
        try:
            async for chunk in stream:
                await stream.send_all(chunk)
        except trio.BrokenResourceError:
            log.info("server lost its client")

    await trio.serve_tcp(echo, 7)


async def client(env: Env, world: dict[str, Any], timeout: float, framed: bool) -> None:
    while True:
        try:
            stream = await trio.open_tcp_stream("server", 7)
            break
        except OSError:
            await trio.sleep(0.5)  # not listening yet, or gone: try again
    world["connected"] = True
    chunks: list[int] = world["chunks"]
    try:
        with trio.fail_after(timeout) if timeout else _forever():
            for message in MESSAGES:
                await stream.send_all(message)
                got = b""
                while len(got) < len(message):
                    chunk = await stream.receive_some()
                    if not chunk:
                        raise EOFError("the server closed the connection")
                    chunks.append(len(chunk))
                    got += chunk
                    if not framed:
                        break  # the bug: a message is whatever one recv returned
                log.info("echo came back", sent=len(message), got=len(got))
                world["echoed"].append(got)
        world["ended"] = "done"
    except trio.BrokenResourceError as exc:
        world["ended"] = type(exc.__cause__).__name__
    except EOFError:
        world["ended"] = "EOF"
    except trio.TooSlowError:
        world["ended"] = "timeout"
    log.info("client ended", how=world["ended"])
    await stream.aclose()


class _forever:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> Any:
    world: dict[str, Any] = {"chunks": [], "echoed": [], "ended": None, "connected": False}
    WORLDS.append(world)
    sim.process("server", server)  # waiting in accept or recv is waiting on the world
    sim.process("client", lambda env: client(env, world, config["timeout"], config["framed"]),
                crashable=False)
    return world


@scenario.invariant("EchoedIntact")
def intact(world: dict[str, Any]) -> bool | str:
    for sent, got in zip(MESSAGES, world["echoed"], strict=False):
        if sent != got:
            return "an echo came back different from what was sent"
    return True


# A gaierror, a refusal and a connection to itself, each written to the world.
lookups = Scenario("netsim_lookups", doc="names that do not resolve, ports nobody listens on")


async def prober(env: Env, world: dict[str, Any]) -> None:
    try:
        await trio.open_tcp_stream("nowhere", 80)
    except socket.gaierror as exc:
        world["unknown"] = (type(exc).__name__, exc.errno)
    sock = trio.socket.socket()
    try:
        await sock.connect(("server", 81))
    except OSError as exc:
        world["closed port"] = (type(exc).__name__, exc.errno)
    sock.close()
    try:
        await trio.open_tcp_stream("server", 81)
    except OSError as exc:
        causes = getattr(exc.__cause__, "exceptions", ())
        world["closed port, high level"] = [type(c).__name__ for c in causes]
    listeners = await trio.open_tcp_listeners(9000)
    for host in ("localhost", "127.0.0.1", "prober"):
        stream = await trio.open_tcp_stream(host, 9000)
        accepted = await listeners[0].accept()
        await stream.send_all(host.encode())
        world[f"self via {host}"] = await accepted.receive_some()
        world[f"peer of {host}"] = accepted.socket.getpeername()[0]
        await stream.aclose()
        await accepted.aclose()
    world["addresses"] = [await trio.socket.getaddrinfo(n, 1) for n in ("server", "prober")]
    await listeners[0].aclose()


@lookups.setup
def lookups_setup(sim: Sim, config: dict[str, Any]) -> Any:
    world: dict[str, Any] = {}
    WORLDS.append(world)

    async def idle_server(env: Env) -> None:
        await trio.sleep_forever()

    sim.process("server", idle_server, idle=True)
    sim.process("prober", lambda env: prober(env, world))
    return world
