"""``dst pin`` of a trace that does not replay against the code here says so, with the
first difference and what to do: record a new trace with ``dst run``, or pin this one
against the code it was recorded with - not the advice for a trace pinned already."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from dst.cli import main
from dst.errors import DivergenceError
from dst.testing import pin_trace
from dst.trace.codec import read_trace
from tests.test_readme import readme_scenario


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


@pytest.fixture
def renamed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, int]:
    """A failing trace of the README's bank scenario, and ``renamed.py``: that scenario
    with one log event renamed since; cwd at tmp_path."""
    monkeypatch.chdir(tmp_path)
    Path("bank.py").write_text(readme_scenario(), encoding="utf-8")
    text, n = re.subn(r'log\.info\("paid out"', 'log.info("paid"', readme_scenario())
    assert n == 1
    Path("renamed.py").write_text(text, encoding="utf-8")
    done = invoke("run", "bank.py", "-c", "locked=false", "--seeds", "60", "--out", "out",
                  "--json")
    assert done.exit_code == 1, done.output
    trace = Path(json.loads(done.stdout)["groups"][0]["traces"][0])
    return trace, int(read_trace(trace).header["seed"])


def _says_it_was_not_pinned_and_what_to_do(said: str, trace: Path, seed: int) -> None:
    assert said.startswith(f"{trace} does not replay against this code, so it was not "
                           "pinned (a pin must reproduce its bug exactly): diverged at step "), said
    assert '"event":"paid out"' in said and '"event":"paid"' in said, said
    assert said.endswith(f"; record a new trace of the bug with dst run renamed.py -c "
                         f"locked=false --seed {seed} (the seed it came from) and pin that "
                         "one, or pin this trace against the code it was recorded with"), said
    assert "--dst-fixed" not in said and "since the trace was pinned" not in said


def test_dst_pin_of_a_trace_that_no_longer_replays_says_to_record_a_new_one(
        renamed: tuple[Path, int]) -> None:
    trace, seed = renamed
    done = invoke("pin", str(trace), "--scenario", "renamed.py", "--dir", "pins")
    assert done.exit_code == 3, done.output
    assert done.stdout == "" and done.stderr.count("\n") == 1, done.output
    assert done.stderr.startswith("error: ")
    _says_it_was_not_pinned_and_what_to_do(done.stderr[len("error: "):].rstrip(), trace, seed)
    assert not Path("pins").exists()


def test_pin_trace_refuses_it_with_the_same_advice(renamed: tuple[Path, int]) -> None:
    trace, seed = renamed
    with pytest.raises(DivergenceError) as refused:
        pin_trace(trace, directory="pins", scenario="renamed.py")
    _says_it_was_not_pinned_and_what_to_do(str(refused.value), trace, seed)
    assert not Path("pins").exists()
