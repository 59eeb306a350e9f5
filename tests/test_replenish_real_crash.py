"""A real crash: the Replenisher on SQLite and a real clock, killed with SIGKILL while it waits.

The test starts the agent in a subprocess (this file run as a script), with a
day lasting 0.2 s.  Once the agent has asked for approval and logged its decision
to wait, the test kills the process with SIGKILL (no ``finally``, no
flush), starts it again on the same files, and checks what the simulated
crash checks: the replenishment finishes, and no step that ran before the
crash ran again (one quote request, one PO, one approval request).

The world (supplier, manager, ERP, warehouse) runs inside the same process,
keeping its records in its own SQLite file so they survive the kill too.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

DAY = 0.2  # seconds of real time per simulated day


def _rows(path: Path, prefix: str) -> list[tuple[str, Any]]:
    if not path.exists():
        return []
    db = sqlite3.connect(path, timeout=5)
    try:
        rows = db.execute("SELECT key, value FROM kv WHERE key >= ? AND key < ? ORDER BY key",
                          (prefix, prefix + "\uffff")).fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        db.close()
    return [(k, json.loads(v)) for k, v in rows]


def _waiting_for_approval(agent_db: Path) -> bool:
    """The replenishment has asked for approval and decided to wait for it."""
    steps = [v for _, v in _rows(agent_db, "wf/agent-SKU-1.r1/") if isinstance(v, dict)]
    names = [v.get("name") for v in steps]
    return "tool:request_approval" in names and steps[-1].get("output") == "wait_for_approval"


def _start(tmp: Path, epoch: float) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, __file__, str(tmp), repr(epoch)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")
def test_a_replenisher_killed_during_a_wait_resumes_without_repeating_a_step(
    tmp_path: Path,
) -> None:
    epoch = time.time()
    first = _start(tmp_path, epoch)
    deadline = time.monotonic() + 30
    while not _waiting_for_approval(tmp_path / "agent.db"):
        assert first.poll() is None, first.communicate()[0].decode()
        assert time.monotonic() < deadline, "the agent never reached the approval wait"
        time.sleep(0.01)
    os.kill(first.pid, signal.SIGKILL)
    first.communicate()
    assert first.returncode == -signal.SIGKILL

    second = _start(tmp_path, epoch)
    out, _ = second.communicate(timeout=60)
    assert second.returncode == 0, out.decode()
    calls = [v for _, v in _rows(tmp_path / "world.db", "call/")]
    ops = [c["op"] for c in calls]
    assert ops.count("quote") == 1
    assert ops.count("draft_po") == 1
    assert ops.count("request_approval") == 1
    assert ops.count("order") == 1
    meta = dict(_rows(tmp_path / "agent.db", "wfmeta/"))
    assert meta["wfmeta/agent-SKU-1.r1"]["result"]["outcome"] == "received"
    assert b"resumed workflows" in out


# -- the child process ---------------------------------------------------------------

def _child(tmp: Path, epoch: float) -> None:
    import trio

    from dst.agents.replenisher import Options, run_replenisher
    from dst.env import Json
    from dst.fakes.replenisher.decider import sensible
    from dst.runtime import LocalNetwork, LocalServices, SQLiteStore, make_env
    from dst.runtime.real_env import WallClock

    # Deadlines in the log are absolute: the restarted process must count time
    # from the same epoch as the killed one.
    clock = WallClock(epoch)
    world = SQLiteStore(tmp / "world.db")
    agent_db = SQLiteStore(tmp / "agent.db")
    net = LocalNetwork()
    services = LocalServices()

    async def record(op: str, req: Any) -> None:
        n = len(await world.scan("call/"))
        await world.put(f"call/{n:04d}", {"op": op, "key": req.get("key"), "at": clock.now()})

    async def post(body: dict[str, Json], after_days: float) -> None:
        n = len(await world.scan("out/"))
        mid = f"w{n}"
        at = clock.now() + after_days * DAY
        await world.put(f"out/{n:04d}", {"body": dict(body, to="agent-SKU-1", id=mid),
                                         "due": at, "arrive": at, "acked": False})

    async def supplier(op: str, req: Any) -> Json:
        await record(op, req)
        if op == "quote":
            return {"price": 5.0, "note": "Quote valid 30 days."}
        if op == "order":
            await post({"kind": "supplier_reply", "po": req["po"], "status": "accepted",
                        "text": "confirmed"}, 1)
            await post({"kind": "goods", "po": req["po"], "qty": req["qty"]}, 2)
            return {"status": "accepted", "order": "SO-1", "price": 5.0}
        return {"status": "accepted"}

    async def manager(op: str, req: Any) -> Json:
        await record(op, req)
        await post({"kind": "approval", "po": req["po"], "approved": True,
                    "up_to": req["price"], "from": "manager"}, 3)
        return {"status": "requested"}

    async def erp(op: str, req: Any) -> Json:
        await record(op, req)
        return {"po": "PO-1"} if op == "draft_po" else {"status": "closed"}

    async def warehouse(op: str, req: Any) -> Json:
        arrived = sum(out["body"]["qty"] for _, out in await world.scan("out/")
                      if out["body"]["kind"] == "goods" and out["arrive"] <= clock.now())
        return {"on_hand": 4 + arrived, "day": clock.now() / DAY}

    async def decider(op: str, req: Any) -> Json:
        return sensible(list(req["allowed"]), req["state"])

    for name, handler in [("supplier", supplier), ("manager", manager), ("erp", erp),
                          ("warehouse", warehouse), ("decider", decider)]:
        services.register(name, handler)

    async def courier() -> None:
        endpoint = net.endpoint("world")

        async def acks() -> None:
            while True:
                msg = await endpoint.recv()
                for key, out in await world.scan("out/"):
                    if out["body"]["id"] == msg.body.get("ack"):
                        await world.put(key, dict(out, acked=True))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(acks)
            while True:
                for key, out in await world.scan("out/"):
                    if not out["acked"] and out["due"] <= clock.now():
                        await endpoint.send("replenisher", out["body"])
                        await world.put(key, dict(out, due=clock.now() + DAY / 2))
                await trio.sleep(DAY / 10)

    async def main() -> None:
        env = make_env("replenisher", stores={"main": agent_db}, network=net,
                       services=services, seed=0, clock=clock)
        options = Options(day=DAY, horizon_checks=1)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(courier)
            await run_replenisher(env, options, exit_when_idle=True)
            nursery.cancel_scope.cancel()

    trio.run(main)


if __name__ == "__main__":
    _child(Path(sys.argv[1]), float(sys.argv[2]))
