"""What ``dst shrink`` reports and keeps, for the failures users write against the docs:
faults a fake injects as data choices (``NAME.fault``) counted with the others, and a
``Deadlock`` of several processes shrunk to the story of the tasks it names.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from dst.cli import main
from dst.trace.codec import read_trace


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def failures(source: Path, tmp_path: Path, seeds: int) -> list[dict[str, Any]]:
    found = invoke("run", str(source), "--seeds", str(seeds), "--out", str(tmp_path / "t"),
                   "--json")
    assert found.exit_code == 1, found.output
    out: list[dict[str, Any]] = json.loads(found.stdout)["failures"]
    return out


FAKE_FAULTS = '''
from dst import Env, Scenario, Sim

scenario = Scenario("shop", doc="a fake payment service whose faults are data choices")


async def shop(env: Env) -> None:
    for i in range(4):
        await env.store.put(f"cart/{i}", 1)
        reply = await env.services.call("payments", "charge", {"id": i})
        await env.store.put(f"order/{i}", "paid" if reply["ok"] else "failed")


@scenario.setup
def setup(sim: Sim, config: dict) -> object:
    db = sim.store("db")

    def payments(op, request):
        return {"ok": sim.choose("payments.fault", ["none", "fail", "slow"]) != "fail"}

    sim.service("payments", payments, suffers=())
    sim.process("shop", shop, stores=["db"])
    return db


@scenario.invariant("LastOrderPaid")
def last_paid(db) -> bool | str:
    return db.peek("order/3") != "failed" or "order 3 failed"
'''


def data_faults(path: str) -> list[str]:
    """The ``NAME.fault`` data choices other than ``none`` a trace made."""
    chosen = [r["enabled"][r["chosen"]] for r in read_trace(path).records
              if r["type"] == "decision" and r["kind"] == "data"]
    return [c for c in chosen if c.startswith("payments.fault:") and not c.endswith(":none")]


def test_shrink_counts_a_fakes_data_choice_faults_before_and_after(tmp_path: Path) -> None:
    source = tmp_path / "shop.py"
    source.write_text(FAKE_FAULTS, encoding="utf-8")
    traces = [f["trace"] for f in failures(source, tmp_path, 30)]
    trace = next(t for t in traces if len(data_faults(t)) >= 2)
    out = tmp_path / "min.jsonl"
    done = invoke("shrink", trace, "--scenario", str(source), "-o", str(out), "--json")
    assert done.exit_code == 1, done.output
    report = json.loads(done.stdout)
    assert report["faults"] == {"before": len(data_faults(trace)),
                                "after": len(data_faults(str(out)))}
    # Only the failed charge of the last order matters: the other faults are dropped.
    assert data_faults(str(out)) == ["payments.fault:fail"]
    told = invoke("shrink", trace, "--scenario", str(source), "-o", str(out))
    assert f"1 fault (from {len(data_faults(trace))})" in told.stdout.splitlines()[0]


DEADLOCK = '''
import trio

from dst import Env, FaultPlan, Scenario, Sim

scenario = Scenario("bank", doc="two transfers take two locks in opposite orders",
                    faults=FaultPlan(preemptions=2))


async def bank(env: Env) -> None:
    a, b = trio.Lock(), trio.Lock()

    async def transfer(first, second):
        async with first:
            await trio.sleep(0)
            async with second:
                pass

    await env.store.put("start", 1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(transfer, a, b)
        nursery.start_soon(transfer, b, a)


async def audit(env: Env) -> None:
    for i in range(5):
        await env.store.put(f"audit/{i}", i)
        await env.net.send("ledger", {"i": i})
        await env.clock.sleep(1)


async def ledger(env: Env) -> None:
    for _ in range(5):
        message = await env.net.recv()
        await env.store.put(f"ledger/{message.body['i']}", 1)


@scenario.setup
def setup(sim: Sim, config: dict) -> None:
    sim.store("db")
    sim.process("bank", bank, stores=["db"])
    sim.process("audit", audit, stores=["db"])
    sim.process("ledger", ledger, stores=["db"])
'''


def banks_last_step(path: str) -> int:
    """The step of the last decision of the bank's tasks: where its deadlock formed."""
    return max(r["step"] for r in read_trace(path).records
               if r["type"] == "decision" and r["enabled"][r["chosen"]].startswith("bank"))


def violation(path: str) -> str:
    return next(str(r["message"]) for r in read_trace(path).records if r["type"] == "violation")


def test_a_deadlock_of_several_processes_shrinks_to_the_story_of_the_tasks_it_names(
        tmp_path: Path) -> None:
    """Every run deadlocks only at rest, after the audit and the ledger have done all their
    work, so no run is shorter in steps; the shrunk one has the bank's step first."""
    source = tmp_path / "bank.py"
    source.write_text(DEADLOCK, encoding="utf-8")
    found = failures(source, tmp_path, 20)
    assert {tuple(f["violated"]) for f in found} == {("Deadlock",)}
    trace = max((f["trace"] for f in found), key=banks_last_step)
    assert banks_last_step(trace) > 1
    out = tmp_path / "min.jsonl"
    done = invoke("shrink", trace, "--scenario", str(source), "-o", str(out), "--json")
    assert done.exit_code == 1, done.output
    report = json.loads(done.stdout)
    assert report["formed"] == {"before": banks_last_step(trace), "after": 1}
    assert banks_last_step(str(out)) == 1
    assert report["steps"]["after"] <= report["steps"]["before"]
    assert violation(str(out)) == violation(trace)  # the same tasks, waiting where they did
    replayed = invoke("replay", str(out), "--scenario", str(source))
    assert replayed.exit_code == 1 and replayed.stdout.startswith("identical: ")

    told = invoke("shrink", trace, "--scenario", str(source), "-o", str(out)).stdout
    lines = told.splitlines()
    assert f"formed by step 1 (from {banks_last_step(trace)})" in lines[0]
    assert "bank@db.put(start)" in lines[2]
    # The audit's and the ledger's steps are counted, not told; the waits are told.
    assert "left out: " in lines[3] and "of audit, ledger, timers, which the deadlock " \
        "does not name" in lines[3]
    assert "deadlocked: bank/transfer waits in trio.Lock.acquire" in lines[4]
    assert "deadlocked: bank/transfer#2 waits in trio.Lock.acquire" in lines[5]
    assert "VIOLATED Deadlock: nothing left can wake bank/transfer waits" in lines[6]
    assert lines[7].startswith("  trace:  ")


#: Two processes take two locks in opposite orders and log nothing; a third logs.
QUIET_DEADLOCK = '''
import trio
import structlog
from dst import Env, Scenario, Sim

log = structlog.get_logger()
scenario = Scenario("locks2", doc="two processes take two locks; a third does unrelated work")


async def transfer(env: Env, locks, a, b):
    async with locks[a]:
        await env.store.put(f"{env.name}/got", a)
        async with locks[b]:
            await env.store.put(f"{env.name}/done", True)


async def noise(env: Env):
    for i in range(10):
        await env.store.put(f"noise{i}", i)
        log.info("noise", i=i)


@scenario.setup
def setup(sim: Sim, config):
    locks = {k: trio.Lock() for k in "xy"}
    sim.process("noise", noise, stores=["db"])
    sim.process("p1", lambda env: transfer(env, locks, "x", "y"), stores=["db"])
    sim.process("p2", lambda env: transfer(env, locks, "y", "x"), stores=["db"])
'''


def test_a_deadlock_of_tasks_that_log_nothing_is_told_by_their_steps_not_the_noise(
        tmp_path: Path) -> None:
    source = tmp_path / "locks2.py"
    source.write_text(QUIET_DEADLOCK, encoding="utf-8")
    trace = failures(source, tmp_path, 5)[0]["trace"]
    out = tmp_path / "min.jsonl"
    for told in (invoke("show", trace).stdout,
                 invoke("shrink", trace, "--scenario", str(source), "-o", str(out)).stdout,
                 invoke("run", str(source), "--seeds", "3", "--out",
                        str(tmp_path / "again")).stdout):
        # Each deadlocked process's step that took its first lock, where each waits,
        # and the noise counted in one line, never told.
        assert "-> p1@db.put(p1/got)" in told and "-> p2@db.put(p2/got)" in told, told
        assert "deadlocked: p1 waits in trio.Lock.acquire" in told
        assert "deadlocked: p2 waits in trio.Lock.acquire" in told
        assert "left out: 10 lines of noise, which the deadlock does not name" in told
        assert "noise  (i=" not in told
        assert "dst show tells them" not in told
    verbose = invoke("show", "-v", trace).stdout
    assert verbose.count("noise  (i=") == 10 and "left out" not in verbose


def test_a_failure_that_is_no_deadlock_reports_no_formation(tmp_path: Path) -> None:
    source = tmp_path / "shop.py"
    source.write_text(FAKE_FAULTS, encoding="utf-8")
    trace = failures(source, tmp_path, 30)[0]["trace"]
    done = invoke("shrink", trace, "--scenario", str(source), "-o", str(tmp_path / "m.jsonl"),
                  "--json")
    assert json.loads(done.stdout)["formed"] is None


GATE = '''
import trio

from dst import Env, Scenario, Sim

scenario = Scenario("gate", doc="a lock-order deadlock, and a gate that may wait for ever")


async def bank(env: Env) -> None:
    a, b = trio.Lock(), trio.Lock()

    async def transfer(first, second, name):
        for i in range(3):
            await env.store.put(f"{name}/prep{i}", i)
        async with first:
            await env.store.put(f"{name}/held", 1)
            async with second:
                await env.store.put(f"{name}/done", 1)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(transfer, a, b, "ab")
        nursery.start_soon(transfer, b, a, "ba")


async def gate(env: Env) -> None:
    await env.store.put("gate/0", 1)
    if not await env.store.get("flag"):
        await trio.Event().wait()


async def setter(env: Env) -> None:
    await env.store.put("flag", 1)


@scenario.setup
def setup(sim: Sim, config: dict) -> None:
    sim.store("db")
    sim.process("bank", bank, stores=["db"])
    sim.process("gate", gate, stores=["db"])
    sim.process("setter", setter, stores=["db"])
'''


def test_a_deadlock_shrinks_to_the_same_tasks_stuck_never_to_another_deadlock(
        tmp_path: Path) -> None:
    """The gate stuck alone forms by its second step, the bank's lock cycle only after eight:
    a shrink of the bank's deadlock must not trade it for the gate's."""
    source = tmp_path / "gate.py"
    source.write_text(GATE, encoding="utf-8")
    found = invoke("run", str(source), "--seeds", "200", "--out", str(tmp_path / "t"),
                   "--json", "--keep-traces", "5")
    traces = [str(p) for p in sorted((tmp_path / "t").glob("*.jsonl"))]
    assert found.exit_code == 1 and traces, found.output
    bank_only = next(t for t in traces if "bank/transfer" in violation(t)
                     and "gate waits" not in violation(t))
    assert any("gate waits" in violation(t) and "bank/" not in violation(t) for t in traces)
    out = tmp_path / "min.jsonl"
    done = invoke("shrink", bank_only, "--scenario", str(source), "-o", str(out), "--json")
    assert done.exit_code == 1, done.output
    assert violation(str(out)) == violation(bank_only)
