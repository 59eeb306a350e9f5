"""A slow fault (a timer fired while other work could run) is drawn on the lane of the task
its timer woke, in the Perfetto export and on the HTML page: never as a lane of its own
named after the timer, as if ``timer@5.000`` were an actor.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from dst.cli import main
from dst.trace.codec import read_trace
from tests.test_artifacts import (
    test_perfetto_events_are_trace_event_format_with_nested_slices as valid_perfetto,
)

SHOP = '''
import trio

from dst import Env, FaultPlan, Scenario, Sim

scenario = Scenario("shop", doc="a charge under a timeout, which a slow fault fires first",
                    faults=FaultPlan(max_slow=1))


async def shop(env: Env) -> None:
    await env.services.call("payments", "ping", {})
    with trio.move_on_after(5):
        await env.services.call("payments", "charge", {"id": 1})
        await env.store.put("paid", True)
    await env.store.put("done", True)


@scenario.setup
def setup(sim: Sim, config: dict) -> object:
    db = sim.store("db")
    sim.service("payments", lambda op, request: {"ok": True})
    sim.process("shop", shop, stores=["db"])
    return db


@scenario.invariant("PaidBeforeDone")
def paid(db) -> bool | str:
    return not db.peek("done") or bool(db.peek("paid")) or "done but not paid"
'''


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def slow_trace(tmp_path: Path) -> tuple[Path, Path]:
    """A failing trace of SHOP whose timeout fired by a slow fault, and the scenario file."""
    source = tmp_path / "shop.py"
    source.write_text(SHOP, encoding="utf-8")
    found = invoke("run", str(source), "--seeds", "40", "--out", str(tmp_path / "t"),
                   "--json", "--keep-traces", "3")
    assert found.exit_code == 1, found.output
    for failure in json.loads(found.stdout)["failures"]:
        records = read_trace(failure["trace"]).records
        if any(r["type"] == "fault" and r["fault"] == "slow" for r in records):
            return Path(failure["trace"]), source
    raise AssertionError("no failing seed of 40 was a slow fault")


def show(trace: Path, source: Path, fmt: str) -> str:
    done = invoke("show", str(trace), "--scenario", str(source), "--format", fmt)
    assert done.exit_code in (0, 1), done.output
    return done.stdout


def test_perfetto_draws_a_slow_fault_on_the_lane_of_the_task_its_timer_woke(
        tmp_path: Path) -> None:
    trace, source = slow_trace(tmp_path)
    events: list[dict[str, Any]] = json.loads(show(trace, source, "perfetto"))["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    shown = [e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] in ("thread_name", "process_name")]
    assert not [n for n in shown if n.startswith("timer@")]
    slow = [e for e in events if e["ph"] == "i" and e["name"].startswith("SLOW: timer@")]
    assert [names[(e["pid"], e["tid"])] for e in slow] == ["shop"]
    valid_perfetto(trace)  # the export's own checks: fields, nesting, flows on slices
    assert not [e["name"] for e in events if e["name"].startswith("VIOLATED VIOLATED")]


def test_the_html_page_lists_no_timer_as_a_lane(tmp_path: Path) -> None:
    trace, source = slow_trace(tmp_path)
    page = show(trace, source, "html")
    assert 'title="process: shop">shop</div>' in page
    assert 'title="task: timer@' not in page and ">timer@5.000</div>" not in page
