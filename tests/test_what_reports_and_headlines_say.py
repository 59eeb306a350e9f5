"""What ``dst run``'s reports and headlines and ``dst show`` say agree with the run itself:
a run that exits 3 for nondeterminism is no pass in JUnit or Markdown, a failure's
headline names a seed with that seed's own step, and a config is written in one order."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from click.testing import CliRunner

from dst.cli import main
from dst.runner.reports import RunFacts, junit, markdown
from dst.trace.codec import read_trace
from tests.test_junit_schemas import _both as both_junit_schemas
from tests.test_readme import readme_scenario

#: What ``--check-determinism`` says of a scenario that iterates a set of strings.
DIFFERENCE = ("record 3 differs in another process (PYTHONHASHSEED=1, here 0): the run depends "
              "on hash order (does it iterate a set of strings?):\n"
              '    this process:  {"enabled":["p@s.put(beta)"]}\n'
              '    other process: {"enabled":["p@s.put(epsilon)"]}')


def facts(nondeterministic: list[tuple[int, str]], failed: int = 0) -> RunFacts:
    return RunFacts("setorder", {}, "random", "0..49", None, 50, 0, failed, 1.0, "done", [],
                    replay=lambda p: f"dst replay {p}",
                    rerun=lambda s: f"dst run setorder.py --seed {s}",
                    nondeterministic=nondeterministic)


def test_the_junit_of_a_nondeterministic_run_fails_naming_its_seeds_and_first_difference(
) -> None:
    root = ET.fromstring(junit(facts([(3, DIFFERENCE), (7, DIFFERENCE)])))
    both_junit_schemas(root)
    [case] = list(root.iter("testcase"))  # no passing case beside it
    [failure] = list(case.iter("failure"))
    assert failure.get("type") == "nondeterministic"
    message = failure.get("message") or ""
    assert message.startswith("2 of 50 seeds did not repeat themselves (seeds 3, 7)")
    assert "first difference, seed 3: record 3 differs in another process" in message
    assert "other process: {\"enabled\":[\"p@s.put(epsilon)\"]}" in (failure.text or "")
    [suite] = list(root.iter("testsuite"))
    assert suite.get("failures") == "1" and suite.get("tests") == "1"


def test_the_markdown_of_a_nondeterministic_run_says_its_seeds_did_not_repeat_themselves(
) -> None:
    text = markdown(facts([(3, DIFFERENCE)]))
    head = text.splitlines()[0]
    assert head == "### dst run setorder: 1 seed did not repeat itself"
    assert "no failures" not in text
    assert ("**Nondeterministic:** 1 of 50 seeds did not repeat itself (seed 3)" in text)
    assert "The first difference, seed 3:" in text
    # The difference is a code block, every line of it: Markdown shows it as it is.
    assert '\n        other process: {"enabled":["p@s.put(epsilon)"]}\n' in text


def test_the_markdown_of_a_nondeterministic_run_with_failures_says_both() -> None:
    head = markdown(facts([(3, DIFFERENCE)], failed=2)).splitlines()[0]
    assert head == ("### dst run setorder: 1 seed did not repeat itself; 2 failing seeds "
                    "in 0 groups")


def test_a_deterministic_run_reports_as_before() -> None:
    assert markdown(facts([])).splitlines()[0] == "### dst run setorder: no failures in 50 seeds"
    root = ET.fromstring(junit(facts([])))
    assert [c.get("name") for c in root.iter("testcase")] == ["setorder []"]
    assert not list(root.iter("failure"))


# -- the headline's seed and step --------------------------------------------------------


def test_a_failure_headline_names_its_seed_with_that_seeds_own_step(tmp_path: Path) -> None:
    """The README's bank, stopped at its first failure (seed 0, 8 steps), whose shrunk
    trace breaks the invariant a step earlier: the headline tells seed 0's step."""
    source = tmp_path / "bank.py"
    source.write_text(readme_scenario(), encoding="utf-8")
    done = CliRunner().invoke(main, ["run", str(source), "-c", "locked=false", "--seeds", "300",
                                     "-x", "--out", str(tmp_path / "t")])
    assert done.exit_code == 1, done.output
    head = done.stdout.splitlines()[0]
    found = re.fullmatch(r"FAIL bank \[locked=false\]: NoOverdraft violated \(seed (\d+), "
                         r"step (\d+), virtual (\S+)\)", head)
    assert found, head
    kept = re.search(r"^  trace:  (\S+)$", done.stdout, flags=re.M)
    shrunk = re.search(r"^  shrunk: (\S+) ", done.stdout, flags=re.M)
    assert kept and shrunk, done.stdout
    own = read_trace(kept.group(1))
    [vio] = [r for r in own.records if r["type"] == "violation"]
    assert own.header["seed"] == int(found.group(1)) and vio["step"] == int(found.group(2))
    [small] = [r for r in read_trace(shrunk.group(1)).records if r["type"] == "violation"]
    assert small["step"] < vio["step"]  # the case this pins: the two traces' steps differ


# -- one order for a config --------------------------------------------------------------

PAY = '''
from typing import Any
from dst import Env, Scenario, Sim

scenario = Scenario("pay", doc="switches declared out of alphabetical order")
scenario.switch("keyed", True, doc="send a key")
scenario.switch("clients", 1, choices=[1, 2], doc="checkouts")


async def shop(env: Env) -> None:
    await env.store.put("x", 1)


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> Any:
    sim.process("shop", shop, stores=["db"])
    return sim.seed


@scenario.invariant("Odd")
def odd(seed: int) -> bool:
    return False
'''


def test_dst_show_scenario_writes_a_shipped_scenarios_config_in_the_order_dst_run_does(
    tmp_path: Path,
) -> None:
    runner = CliRunner()
    run = runner.invoke(main, ["run", "counter", "-c", "cas=false", "--seed", "5", "--no-shrink",
                               "--out", str(tmp_path / "t")])
    assert run.exit_code == 1, run.output
    shown = "[cas=false workers=2 increments=7]"  # declared so; sorted, increments is first
    assert f"FAIL counter {shown}:" in run.stdout
    [trace] = sorted((tmp_path / "t").glob("counter-*.jsonl"))
    given = ["--scenario", "counter"]
    text = runner.invoke(main, ["show", str(trace), *given]).stdout
    assert text.splitlines()[0].startswith(f"counter {shown} seed 5")
    md = runner.invoke(main, ["show", str(trace), "--format", "markdown", *given]).stdout
    assert "- config: cas=false workers=2 increments=7\n" in md
    page = runner.invoke(main, ["show", str(trace), "--format", "html", *given]).stdout
    assert "<code>cas=false workers=2 increments=7</code>" in page
    # Without --scenario nothing is imported to show a trace: the header's (sorted) order.
    bare = runner.invoke(main, ["show", str(trace)]).stdout
    assert bare.splitlines()[0].startswith("counter [cas=false increments=7 workers=2] seed 5")


def test_dst_show_scenario_writes_a_users_config_in_its_declaration_order(
    tmp_path: Path,
) -> None:
    source = tmp_path / "pay.py"
    source.write_text(PAY, encoding="utf-8")
    runner = CliRunner()
    run = runner.invoke(main, ["run", str(source), "-c", "keyed=false", "-c", "clients=2",
                               "--seed", "0", "--no-shrink", "--out", str(tmp_path / "t")])
    assert "FAIL pay [keyed=false clients=2]:" in run.stdout, run.output
    [trace] = sorted((tmp_path / "t").glob("pay-*.jsonl"))
    given = runner.invoke(main, ["show", str(trace), "--scenario", str(source)]).stdout
    assert given.splitlines()[0].startswith("pay [keyed=false clients=2] seed 0")
    # Without --scenario its file is not run to show the trace: the header's order.
    assert json.loads(trace.read_text().splitlines()[0])["config"] == {"clients": 2,
                                                                       "keyed": False}
    bare = runner.invoke(main, ["show", str(trace)]).stdout
    assert bare.splitlines()[0].startswith("pay [clients=2 keyed=false] seed 0")
