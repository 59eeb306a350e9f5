"""A check that returns something other than True, False or a message string is an error
in the scenario, told like a check that raises: one line naming the check, where it is
defined and what to return instead, exit 4 - in every command, and from ``check_seeds``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from dst.cli import main
from dst.errors import ScenarioError
from dst.testing import check_seeds
from tests.test_readme import readme_scenario


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def _bank(answer: str) -> str:
    """The README's bank scenario with its invariant returning ``answer``."""
    text, n = re.subn(r"(\n    return )paid <= 100 or .*\n", rf"\g<1>{answer}\n", readme_scenario())
    assert n == 1
    return text


def _decorator_line(text: str, decorator: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if line.startswith(decorator))


@pytest.fixture
def bank_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A failing trace of the README's bank scenario; cwd at tmp_path, where
    ``answers42.py`` is that scenario with its invariant returning 42."""
    monkeypatch.chdir(tmp_path)
    Path("bank.py").write_text(readme_scenario(), encoding="utf-8")
    Path("answers42.py").write_text(_bank("42"), encoding="utf-8")
    done = invoke("run", "bank.py", "-c", "locked=false", "--seeds", "60", "--out", "out",
                  "--json")
    assert done.exit_code == 1, done.output
    return Path(json.loads(done.stdout)["groups"][0]["traces"][0])


def _told_as_the_scenarios_error(done: Result, check: str, line: int, answer: str) -> None:
    assert done.exit_code == 4, done.output
    assert done.stdout == "" and done.stderr.count("\n") == 1, done.output
    assert done.stderr.startswith(
        f"error: {check} (defined at answers42.py:{line}) returned {answer}"), done.stderr
    assert "True when it holds, and False or a message string" in done.stderr, done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.output


@pytest.mark.parametrize("command", [
    ["run", "answers42.py", "--seeds", "3", "--out", "x"],
    ["explore", "answers42.py", "--out", "x"],
    ["check", "answers42.py", "--out", "x"],
    ["replay", "TRACE", "--scenario", "answers42.py"],
    ["pin", "TRACE", "--scenario", "answers42.py", "--dir", "pins"],
])
def test_an_invariant_returning_a_number_is_the_scenarios_error_in_every_command(
        bank_trace: Path, command: list[str]) -> None:
    done = invoke(*[str(bank_trace) if a == "TRACE" else a for a in command])
    line = _decorator_line(_bank("42"), "@scenario.invariant")
    _told_as_the_scenarios_error(done, "invariant NoOverdraft", line, "42 (int)")
    assert not Path("pins").exists()


def test_check_seeds_raises_the_scenarios_error_for_an_invariant_returning_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("answers_none.py").write_text(_bank("None"), encoding="utf-8")
    with pytest.raises(ScenarioError) as raised:
        check_seeds(str(tmp_path / "answers_none.py"), 3)
    message = str(raised.value)
    assert message.startswith("invariant NoOverdraft (defined at answers_none.py:")
    assert "returned None (it returned nothing) (seed 0)" in message


ENDING = '''
from typing import Any

from dst import Env, Scenario, Sim

scenario = Scenario("ending", doc="one write, checked at the end and eventually")


async def write(env: Env) -> None:
    await env.store.put("x", 1)


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> Any:
    store = sim.store("db")
    sim.process("w", write, stores=["db"])
    return store


@scenario.at_end("Written")
def written(store: Any) -> Any:
    return ENDS


@scenario.eventually("SoonWritten", within=5)
def soon(store: Any) -> Any:
    return SOON
'''


@pytest.mark.parametrize(("ends", "soon", "check", "decorator", "answer"), [
    ("[1]", "True", "end-of-run check Written", "@scenario.at_end", "[1] (list)"),
    ("True", "0", "eventually property SoonWritten", "@scenario.eventually", "0 (int)"),
])
def test_end_of_run_and_eventually_checks_returning_other_answers_are_the_scenarios_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ends: str, soon: str, check: str,
        decorator: str, answer: str) -> None:
    monkeypatch.chdir(tmp_path)
    text = ENDING.replace("ENDS", ends).replace("SOON", soon)
    Path("answers42.py").write_text(text, encoding="utf-8")
    done = invoke("run", "answers42.py", "--seeds", "3", "--out", "x")
    _told_as_the_scenarios_error(done, check, _decorator_line(text, decorator), answer)


@pytest.mark.parametrize(("ends", "soon", "said"), [
    ("'not yet'", "True", "not yet"),
    ("True", "False", "SoonWritten did not hold"),
])
def test_checks_answering_false_or_a_message_still_fail_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ends: str, soon: str, said: str) -> None:
    monkeypatch.chdir(tmp_path)
    Path("answers42.py").write_text(ENDING.replace("ENDS", ends).replace("SOON", soon),
                                    encoding="utf-8")
    done = invoke("run", "answers42.py", "--seeds", "3", "--out", "x")
    assert done.exit_code == 1, done.output
    assert said in done.stdout, done.stdout


@pytest.mark.parametrize("command", [
    ["run", "answers42.py", "--seeds", "2", "--out", "x"],
    ["explore", "answers42.py", "--out", "x"],
])
def test_a_fingerprint_returning_a_value_with_no_stable_text_names_where_it_is_defined(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    text = _bank("True").replace('@scenario.invariant("NoOverdraft")', (
        "@scenario.fingerprint\ndef state(account: Any) -> Any:\n    return object()\n\n\n"
        '@scenario.invariant("NoOverdraft")'))
    Path("answers42.py").write_text(text, encoding="utf-8")
    done = invoke(*command)
    assert done.exit_code == 4, done.output
    assert done.stdout == "" and done.stderr.count("\n") == 1, done.output
    line = _decorator_line(text, "@scenario.fingerprint")
    assert done.stderr.startswith(f"error: the fingerprint of bank (defined at answers42.py:{line})"
                                  " returned a value with no stable text ("), done.stderr
