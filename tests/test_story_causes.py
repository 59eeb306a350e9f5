"""The story of a failure says what stood behind it: messages never delivered, calls left
parked while virtual time jumped, the faults the run injected; a plain race says nothing more.

The lease scenario is a miniature of a stale-lease refund: a lessor revokes a
holder's lease (by a message, or by letting it expire), and the holder's refund
must not go through after that; the charge scenario breaks only by a duplicate.
Where a failing run could come about more than one way, the test establishes the
cause from the trace's own records first, then looks for it in what ``dst run``,
``dst show`` and ``dst.testing`` print.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from dst.cli import main
from dst.testing import check_seeds
from dst.trace.codec import read_trace

README = Path(__file__).resolve().parent.parent / "README.md"

#: A lessor ends the holder's lease, by a revoke message or (``expiry=true``) by
#: letting it run out after 9 virtual seconds; the holder calls for a refund from the
#: start, and the refund breaks the check if it goes through after the lease ended.
#: By message, the refund may race the revoke's delivery.  By expiry, only a slow
#: timer (a fault) fires before the parked call: every failing run is that one.
LEASE = '''
from typing import Any

import structlog

from dst import FaultPlan, Scenario

log = structlog.get_logger()
scenario = Scenario("lease", doc="a refund after the lease ended",
                    faults=lambda config: FaultPlan(max_slow=int(config["expiry"]),
                                                    slow_weight=1.0, preemptions=0))
scenario.switch("expiry", False, doc="the lease runs out (false: it is revoked by a message)")


class World:
    ended = False
    refunds = 0


@scenario.setup
def setup(sim: Any, config: Any) -> World:
    world = World()

    def payments(op: str, request: Any) -> Any:
        world.refunds += world.ended
        return "ok"

    async def lessor(env: Any) -> None:
        if config["expiry"]:
            await env.clock.sleep(9)
        else:
            await env.net.send("holder", "revoke")
        world.ended = True
        log.info("lease expired" if config["expiry"] else "revoke sent", lease="L1")

    async def holder(env: Any) -> None:
        await env.services.call("payments", "refund", {"lease": "L1"})
        log.info("refunded", lease="L1")

    sim.service("payments", payments, suffers=())
    sim.process("lessor", lessor, crashable=False)
    sim.process("holder", holder, crashable=False)
    return world


@scenario.invariant("NoRefundAfterRevoke")
def no_refund_after_revoke(world: World) -> bool | str:
    return world.refunds == 0 or "a refund went through after the lease ended"
'''

#: One charge request, which the network may duplicate; the biller charges each
#: message it gets: only a duplicate breaks the check.
DUPLICATE = '''
from typing import Any

import structlog

from dst import FaultPlan, Scenario

log = structlog.get_logger()
scenario = Scenario("charge", doc="a duplicated charge request charges twice",
                    faults=FaultPlan(max_dups=1, dup_weight=1.0, preemptions=0))


class World:
    charges = 0


@scenario.setup
def setup(sim: Any, config: Any) -> World:
    world = World()

    async def shop(env: Any) -> None:
        await env.net.send("biller", "charge 10")

    async def biller(env: Any) -> None:
        while True:
            await env.net.recv()
            world.charges += 1
            log.info("charged", times=world.charges)

    sim.process("shop", shop, crashable=False)
    sim.process("biller", biller, crashable=False)
    return world


@scenario.invariant("ChargedOnce")
def charged_once(world: World) -> bool | str:
    return world.charges <= 1 or f"charged {world.charges} times"
'''


def _scenario(tmp_path: Path, name: str, source: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


def _run(tmp_path: Path, scenario: Path, *args: str) -> tuple[list[str], Path]:
    """``dst run``'s printed story lines, and the trace its story tells."""
    out = tmp_path / "out"
    ran = CliRunner().invoke(main, ["run", str(scenario), "--seeds", "30", "--out", str(out),
                                    *args])
    assert ran.exit_code == 1, ran.output
    lines = ran.stdout.splitlines()
    told = next(line for line in lines if line.startswith(("  shrunk: ", "  trace:  ")))
    return lines, Path(told.split(": ", 1)[1].split(" (", 1)[0].strip())


def _why(lines: list[str]) -> list[str]:
    """The story's ``why`` lines, which must come right before its VIOLATED line."""
    at = next(i for i, line in enumerate(lines) if "VIOLATED" in line)
    before = [line for line in lines[:at] if re.match(r"^\s+\d+\s+\S+\s+why\s", line)]
    block = lines[at - len(before):at]
    assert block == before, "the why lines stand together just before the violation"
    return [re.split(r"\s+why\s+", line, maxsplit=1)[1] for line in before]


def test_a_message_sent_and_never_delivered_is_told_before_the_violation(
        tmp_path: Path) -> None:
    lines, path = _run(tmp_path, _scenario(tmp_path, "lease", LEASE))
    trace = read_trace(path)
    chosen = [r["enabled"][r["chosen"]] for r in trace.records if r["type"] == "decision"]
    assert not any(c.startswith("deliver:m1") for c in chosen), \
        "the shortest failing story is the refund racing the revoke's delivery"
    assert any(c.startswith("lessor@send(holder)") for c in chosen)
    assert _why(lines) == [
        'never delivered: m1 from lessor to holder ("revoke sent" lease=L1), '
        "sent 00:00:00.000 (step 1)"]


def test_a_call_parked_across_a_time_jump_is_told_with_how_long_it_waited(
        tmp_path: Path) -> None:
    lines, path = _run(tmp_path, _scenario(tmp_path, "lease", LEASE), "-c", "expiry=true")
    why = _why(lines)
    assert why[0].startswith("parked across a time jump: holder at call:payments.refund "
                             "waited 9s, from 00:00:00.000 (step 1) until 00:00:09.000 "
                             "(step "), why
    assert why[-1].startswith("faults injected: slow timer (step 1)"), why
    # dst show tells the same story, in text and in Markdown.
    shown = CliRunner().invoke(main, ["show", str(path)])
    assert "parked across a time jump: holder at call:payments.refund waited 9s" \
        in shown.stdout
    markdown = CliRunner().invoke(main, ["show", str(path), "--format", "markdown"])
    unescaped = re.sub(r"\\(.)", r"\1", markdown.stdout)  # Markdown escapes punctuation
    assert "why: parked across a time jump: holder at call:payments.refund waited 9s" \
        in unescaped


def test_an_injected_fault_is_told_before_the_violation_in_an_assertion_message(
        tmp_path: Path) -> None:
    scenario = _scenario(tmp_path, "charge", DUPLICATE)
    with pytest.raises(AssertionError) as failed:
        check_seeds(str(scenario), 30, out=tmp_path / "out")
    message = str(failed.value).splitlines()
    at = next(i for i, line in enumerate(message) if "VIOLATED ChargedOnce" in line)
    assert re.search(r"\s+why\s+faults injected: m1 duplicated \(step \d+\)$",
                     message[at - 1]), message


#: A fake's fault is a data choice named ``NAME.fault`` (as the HTTP fake LLM's are):
#: a 500 makes the agent retry a turn whose tool already ran.
FAKE_FAULT = '''
from typing import Any

from dst import Scenario

scenario = Scenario("retried", doc="a turn retried after the model's 500 runs its tool twice")


class World:
    tool_runs = 0


@scenario.setup
def setup(sim: Any, config: Any) -> World:
    world = World()

    async def agent(env: Any) -> None:
        for _attempt in range(2):
            world.tool_runs += 1
            if sim.choose("llm.fault", ["none", "server_error"]) == "none":
                return
            await env.clock.sleep(1)

    sim.process("agent", agent, crashable=False)
    return world


@scenario.invariant("ToolRunsOnce")
def once(world: World) -> bool | str:
    return world.tool_runs <= 1 or f"the tool ran {world.tool_runs} times"
'''


def test_a_fake_s_fault_choice_is_told_with_the_faults(tmp_path: Path) -> None:
    lines, _ = _run(tmp_path, _scenario(tmp_path, "retried", FAKE_FAULT))
    at = next(i for i, line in enumerate(lines) if "VIOLATED ToolRunsOnce" in line)
    assert re.search(r"\s+why\s+faults injected: llm: server_error \(step \d+\)$",
                     lines[at - 1]), lines


def test_a_plain_race_tells_no_why_and_the_readme_story_as_printed(tmp_path: Path) -> None:
    """The counter's lost update has no message, no wait and no fault behind it: its
    story is the README's, line for line."""
    ran = CliRunner().invoke(main, ["run", "counter", "-c", "cas=false", "--seed", "5",
                                    "--out", str(tmp_path)])
    assert ran.exit_code == 1, ran.output
    readme = README.read_text(encoding="utf-8").split("  story (5 lines", 1)[1]
    expected = readme.split("\n", 1)[1].split("  shrunk: ", 1)[0].splitlines()
    printed = ran.stdout.split("  story (", 1)[1].split("\n", 1)[1]
    assert printed.split("  shrunk: ", 1)[0].splitlines() == expected
    assert " why " not in ran.stdout
