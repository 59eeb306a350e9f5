"""What the simulated network costs: one request and its reply over trio's TCP against ``Env.net``.

Usage::

    python benchmarks/bench_netsim.py [--seeds N] [--repeat 3] [--json]

Three rows, each a scenario of two processes, ``client`` and ``server``, that
exchange one request and its reply per seed, measured in this one process with
their passes interleaved (one pass of each row, then the next round):

``Env.net``
    the client ``env.net.send``s a request, the server ``env.net.recv``s it and
    sends the reply back, the client receives it: the kernel's own messages.
``trio TCP``
    the server ``trio.serve_tcp``s, the client ``trio.open_tcp_stream``s to it
    by name, sends a line and reads the reply line, then closes: trio's
    ``SocketStream`` over dst's simulated sockets (``dst.sim.sockets``), every
    connect, accept, send and recv a choice point, every recv's cut a data
    choice (the shipped ``split_weight``).
``trio TCP, no splits``
    the same with ``FaultPlan(split_weight=0)``: what the data choices cost.

No faults, no preemption (``preemptions=0``) in any row, so that each measures
the exchange itself.  Each row gets a warm-up pass, then ``--repeat`` timed
passes; the best counts.  Seeds per second per CPU second of this process
(``time.process_time``), and the decisions a seed takes.  The ratio printed is
the cost of a seed of each TCP row over a seed of ``Env.net``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import trio

from dst import Env, FaultPlan, Scenario, Sim
from dst.runner.bulk import CHUNK
from dst.runner.single import RunResult, run_seeds


def _envnet() -> Scenario:
    scenario = Scenario("bench_envnet", doc="one request and reply over Env.net",
                        faults=FaultPlan(preemptions=0))

    async def server(env: Env) -> None:
        while True:  # a server: it waits for the next request when the run ends
            message = await env.net.recv()
            body = message.body
            assert isinstance(body, dict)
            await env.net.send(message.source, {"ok": body["n"]})

    async def client(env: Env) -> None:
        await env.net.send("server", {"n": 1})
        reply = await env.net.recv()
        assert reply.body == {"ok": 1}

    @scenario.setup
    def setup(sim: Sim, config: dict[str, Any]) -> Any:
        sim.process("server", server)
        sim.process("client", client)

    return scenario


async def _line(stream: trio.SocketStream, buffer: bytearray) -> bytes:
    while b"\n" not in buffer:
        chunk = await stream.receive_some()
        if not chunk:
            raise EOFError
        buffer += chunk
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return line


def _tcp(split_weight: float) -> Scenario:
    scenario = Scenario("bench_tcp", doc="one request and reply over trio's TCP",
                        faults=FaultPlan(preemptions=0, split_weight=split_weight))

    async def server(env: Env, listening: trio.Event) -> None:
        async def handle(stream: trio.SocketStream) -> None:
            buffer = bytearray()
            try:
                while True:
                    line = await _line(stream, buffer)
                    await stream.send_all(b"OK " + line + b"\n")
            except EOFError:
                await stream.aclose()

        listeners = await trio.open_tcp_listeners(8000)
        listening.set()
        await trio.serve_listeners(handle, listeners)

    async def client(env: Env, listening: trio.Event) -> None:
        await listening.wait()
        stream = await trio.open_tcp_stream("server", 8000)
        await stream.send_all(b"GET 1\n")
        assert await _line(stream, bytearray()) == b"OK GET 1"
        await stream.aclose()

    @scenario.setup
    def setup(sim: Sim, config: dict[str, Any]) -> Any:
        listening = trio.Event()
        sim.process("server", lambda env: server(env, listening))
        sim.process("client", lambda env: client(env, listening))

    return scenario


def _sockets(split_weight: float) -> Scenario:
    scenario = Scenario("bench_sockets", doc="one request and reply over trio.socket",
                        faults=FaultPlan(preemptions=0, split_weight=split_weight))

    async def server(env: Env, listening: trio.Event) -> None:
        listener = trio.socket.socket()
        await listener.bind(("", 8000))
        listener.listen()
        listening.set()
        while True:
            sock, _ = await listener.accept()
            buffer = b""
            while chunk := await sock.recv(65536):
                buffer += chunk
                if buffer.endswith(b"\n"):
                    await sock.send(b"OK " + buffer)
                    buffer = b""
            sock.close()

    async def client(env: Env, listening: trio.Event) -> None:
        await listening.wait()
        sock = trio.socket.socket()
        await sock.connect(("server", 8000))
        await sock.send(b"GET 1\n")
        reply = b""
        while not reply.endswith(b"\n"):
            reply += await sock.recv(65536)
        assert reply == b"OK GET 1\n"
        sock.close()

    @scenario.setup
    def setup(sim: Sim, config: dict[str, Any]) -> Any:
        listening = trio.Event()
        sim.process("server", lambda env: server(env, listening))
        sim.process("client", lambda env: client(env, listening))

    return scenario


ROWS: dict[str, Callable[[], Scenario]] = {
    "Env.net": _envnet,
    "trio.socket": lambda: _sockets(FaultPlan().split_weight),
    "trio.socket, no splits": lambda: _sockets(0.0),
    "trio streams": lambda: _tcp(FaultPlan().split_weight),
    "trio streams, no splits": lambda: _tcp(0.0),
}


def _pass(scenario: Scenario, seeds: int) -> tuple[float, float, int]:
    """(CPU seconds, wall seconds, decisions) of one pass over ``seeds`` seeds."""
    results: list[RunResult] = []
    start_cpu, start_wall = time.process_time(), time.perf_counter()
    for lo in range(0, seeds, CHUNK):
        run_seeds(scenario, scenario.config(), range(lo, min(seeds, lo + CHUNK)),
                  results.append)
    cpu, wall = time.process_time() - start_cpu, time.perf_counter() - start_wall
    bad = [r for r in results if r.verdict != "pass"]
    if bad:
        raise SystemExit(f"{scenario.name}: seed {bad[0].seed} did not pass: {bad[0].violated}")
    return cpu, wall, sum(r.steps for r in results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    scenarios = {name: make() for name, make in ROWS.items()}
    best: dict[str, tuple[float, float, int]] = {}
    for round_ in range(args.repeat + 1):
        for name, scenario in scenarios.items():
            measured = _pass(scenario, args.seeds if round_ else max(50, args.seeds // 10))
            if round_ and (name not in best or measured[0] < best[name][0]):
                best[name] = measured
    base_cpu = best["Env.net"][0]
    rows = []
    for name, (cpu, wall, decisions) in best.items():
        rows.append({"row": name, "seeds_per_cpu_s": args.seeds / cpu,
                     "seeds_per_wall_s": args.seeds / wall,
                     "decisions_per_seed": decisions / args.seeds,
                     "cost_vs_envnet": cpu / base_cpu})
    if args.json:
        print(json.dumps({"seeds": args.seeds, "rows": rows}, indent=2))
        return
    print(f"{args.seeds} seeds a pass, best of {args.repeat} (CPU seconds of this process)")
    for row in rows:
        print(f"  {row['row']:<22} {row['seeds_per_cpu_s']:>8,.0f} seeds/s  "
              f"{row['decisions_per_seed']:>5.1f} decisions/seed  "
              f"{row['cost_vs_envnet']:.2f}x the cost of Env.net")


if __name__ == "__main__":
    main()
