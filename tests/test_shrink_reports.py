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
