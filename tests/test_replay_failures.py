"""What the commands that re-run a trace say when it cannot be replayed as it was: a
scenario whose setup or check raises is one line, exit 4, as in ``dst run``; a trace of
one ``@dst.test`` among several gets a replay line that names it; a divergence of a
trace recorded under a random hash seed says so first."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from dst.cli import main
from dst.trace.codec import read_trace
from dst.trace.model import Trace
from tests.test_readme import readme_scenario


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


TESTS = '''
import trio
import dst


@dst.test(seeds=20)
async def test_always_passes():
    await trio.sleep(0)


@dst.test(seeds=50)
async def test_race():
    count = 0

    async def bump():
        nonlocal count
        seen = count
        await trio.sleep(0)
        count = seen + 1

    async with trio.open_nursery() as n:
        n.start_soon(bump)
        n.start_soon(bump)
    assert count == 2, f"lost update: count is {count}"
'''


@pytest.fixture
def bank_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A failing trace of the README's bank scenario, from ``dst run``, cwd at tmp_path."""
    monkeypatch.chdir(tmp_path)
    Path("bank.py").write_text(readme_scenario(), encoding="utf-8")
    done = invoke("run", "bank.py", "-c", "locked=false", "--seeds", "60", "--out", "out",
                  "--json")
    assert done.exit_code == 1, done.output
    return Path(json.loads(done.stdout)["groups"][0]["traces"][0])


def _broken(check_body: str, setup_raises: bool = False) -> str:
    """bank.py with its first invariant's body replaced (or its setup raising)."""
    text = readme_scenario()
    if setup_raises:
        text = re.sub(r"(@scenario\.setup\ndef \w+\([^)]*\)[^:]*:\n)",
                      r"\1    raise KeyError('teller')\n", text, count=1)
    else:
        text = re.sub(r"(@scenario\.invariant\([^)]*\)\ndef \w+\([^)]*\)[^:]*:\n)",
                      rf"\1    {check_body}\n", text, count=1)
    assert text != readme_scenario()
    return text


@pytest.mark.parametrize(("setup_raises", "said"), [
    (False, "error: invariant NoOverdraft of bank raised ZeroDivisionError: division by zero "
            "at broken.py:"),
    (True, "error: setup of bank raised KeyError: 'teller' at broken.py:"),
])
@pytest.mark.parametrize("command", ["replay", "shrink", "pin"])
def test_a_scenario_that_raises_as_a_trace_replays_is_one_line_exit_4(
        bank_trace: Path, command: str, setup_raises: bool, said: str) -> None:
    Path("broken.py").write_text(_broken("return 1/0", setup_raises), encoding="utf-8")
    extra = {"shrink": ["-o", "small.jsonl"], "pin": ["--dir", "pins"]}.get(command, [])
    done = invoke(command, str(bank_trace), "--scenario", "broken.py", *extra)
    assert done.exit_code == 4, done.output
    assert done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(said), done.stderr
    seed = read_trace(bank_trace).header["seed"]
    assert done.stderr.rstrip().endswith(
        f"then check with: dst run broken.py -c locked=false --seed {seed}")
    assert not Path("small.jsonl").exists() and not Path("pins").exists()


def _replay_lines(text: str) -> list[str]:
    return re.findall(r"dst replay [^<\n]*", text)


def test_a_trace_of_one_dst_test_among_several_replays_as_every_command_prints_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("test_several.py").write_text(TESTS, encoding="utf-8")
    done = invoke("run", "test_several.py::test_race", "--seeds", "10", "--out", "out",
                  "--json")
    assert done.exit_code == 1, done.output
    path = json.loads(done.stdout)["groups"][0]["traces"][0]
    assert read_trace(path).header["scenario_file"] == "test_several.py"
    lines = []
    for fmt in ("markdown", "html"):
        shown = invoke("show", path, "--format", fmt)
        assert shown.exit_code == 0, shown.output
        lines += _replay_lines(shown.stdout)
    # The traces dst explore and dst check write say where their scenario lives too.
    explored = invoke("explore", "test_several.py::test_race", "--out", "explored", "--json")
    assert explored.exit_code == 1, explored.output
    checked = invoke("check", "test_several.py::test_race", "--out", "checked")
    assert checked.exit_code == 1, checked.output
    others = [*Path("explored").glob("*.jsonl"), *Path("checked").glob("*.jsonl")]
    assert {p.parent.name for p in others} == {"explored", "checked"}, others
    for other in others:
        shown = invoke("show", str(other), "--format", "markdown")
        assert _replay_lines(shown.stdout) == [
            f"dst replay {other} --scenario test_several.py::test_race"], shown.stdout
        again = invoke("replay", str(other), "--scenario", "test_several.py::test_race")
        assert again.exit_code == 1, again.output
    shrunk = invoke("shrink", path, "--scenario", "test_several.py::test_race",
                    "-o", "small.jsonl")
    assert shrunk.exit_code == 1, shrunk.output
    lines += _replay_lines(shrunk.stdout)
    assert lines == [f"dst replay {path} --scenario test_several.py::test_race"] * 2 + [
        "dst replay small.jsonl --scenario test_several.py::test_race"], lines
    for line in lines:
        again = invoke(*shlex.split(line)[1:])
        assert again.exit_code == 1 and again.stdout.startswith("identical: "), again.output


def _diverging(trace: Trace, tmp_path: Path, hash_seed: int | str | None) -> Path:
    """``trace`` recorded under ``hash_seed`` ("unrecorded": from before the field), its
    first decision's choices reordered (as another hash seed reorders a set of strings)."""
    records = [dict(r) for r in trace.records]
    first = next(r for r in records if r["type"] == "decision" and len(r["enabled"]) > 1)
    first["enabled"] = list(reversed(first["enabled"]))
    path = tmp_path / f"hash-{hash_seed}.jsonl"
    header = {**trace.header, "hash_seed": hash_seed}
    if hash_seed == "unrecorded":
        del header["hash_seed"]
    path.write_text(Trace(header, records, trace.footer).text(), encoding="utf-8")
    return path


def test_a_divergence_of_a_trace_from_a_random_hash_seed_says_so_first(
        bank_trace: Path, tmp_path: Path) -> None:
    trace = read_trace(bank_trace)
    random = invoke("replay", str(_diverging(trace, tmp_path, None)), "--scenario", "bank.py")
    assert random.exit_code == 3, random.output
    cause = random.stdout.splitlines()[1]
    assert cause.startswith(
        "  likely cause: the trace was recorded under a random hash seed (its header says "
        "hash_seed: null), so code that iterates a set of strings may take another order "
        "here; rerun the test under PYTHONHASHSEED=0 to get a trace that replays; "
        "otherwise the code under test"), cause
    # A trace from before hash seeds were recorded does not say it was a random one.
    old = invoke("replay", str(_diverging(trace, tmp_path, "unrecorded")), "--scenario",
                 "bank.py")
    assert old.exit_code == 3, old.output
    assert "hash seed" not in old.stdout
    assert old.stdout.splitlines()[1].startswith("  likely cause: the code under test")


@pytest.mark.parametrize("given", ["abc", "-1", "3x"])
@pytest.mark.parametrize("command", [["run", "counter"], ["explore", "counter"]])
def test_a_seed_that_is_not_one_is_refused_saying_what_a_seed_is(
        command: list[str], given: str) -> None:
    done = invoke(*command, "--seed", given)
    assert done.exit_code == 2 and done.stderr.count("\n") == 1, done.output
    assert f"{given!r} is not a seed: a seed is a whole number, 0 or more (e.g. --seed 3)" \
        in done.stderr
    assert "integer range" not in done.stderr
    if command[0] == "run":
        assert "for several seeds give --seed-range A:B or --seeds N" in done.stderr


def test_a_missing_absolute_scenario_path_is_reported_where_it_was_looked_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "here").mkdir()
    (tmp_path / "here" / "bank.py").write_text(readme_scenario(), encoding="utf-8")
    typo = invoke("run", str(tmp_path / "here" / "bnak.py"))
    assert typo.exit_code == 2
    assert typo.stderr == (f"error: no scenario file {tmp_path}/here/bnak.py (no such file in "
                           f"{tmp_path}/here); did you mean {tmp_path}/here/bank.py?\n")
    nowhere = invoke("run", str(tmp_path / "gone" / "bank.py"))
    assert nowhere.exit_code == 2
    assert nowhere.stderr == (f"error: no scenario file {tmp_path}/gone/bank.py (no directory "
                              f"{tmp_path}/gone)\n")
    assert "working directory" not in typo.stderr + nowhere.stderr


NET = '''
import asyncio
from dst import Scenario


scenario = Scenario("reset", doc="a handler reads from a connection the peer reset")


async def handle(env):
    raise ConnectionResetError(104, "Connection reset by peer")


@scenario.setup
def setup(sim, config):
    sim.process("pay", handle, runtime="asyncio")
'''


def test_an_uncaught_error_names_its_line_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("reset.py").write_text(NET, encoding="utf-8")
    done = invoke("run", "reset.py", "--seeds", "1", "--out", "out", "--json")
    assert done.exit_code == 1, done.output
    path = json.loads(done.stdout)["groups"][0]["traces"][0]
    (violation,) = [r for r in read_trace(path).records if r["type"] == "violation"]
    assert violation["frames"] and violation["frames"][-1] in violation["message"]
    for fmt in ("text", "markdown"):
        shown = invoke("show", path, "--format", fmt).stdout.replace("\\", "")
        told = [line for line in shown.splitlines() if "VIOLATED NoUncaughtError" in line]
        assert told and all(line.count(violation["frames"][-1]) == 1 for line in told), told


def _story(text: str) -> list[str]:
    """The story lines a command printed, without their numbers and steps."""
    return [" ".join(line.split()[1:]) for line in text.splitlines()
            if re.match(r"\s+\d+\s+\d\d:\d\d:\d\d\.\d{3}\s", line)]


def test_dst_shrink_tells_event_fields_in_the_order_dst_show_and_dst_run_do(
        bank_trace: Path) -> None:
    shrunk = invoke("shrink", str(bank_trace), "--scenario", "bank.py", "-o", "small.jsonl")
    assert shrunk.exit_code == 1, shrunk.output
    shown = invoke("show", "small.jsonl")
    told = _story(shrunk.stdout)
    assert any("teller=" in line for line in told), told
    assert told == _story(shown.stdout)
    seed = read_trace(bank_trace).header["seed"]
    run = invoke("run", "bank.py", "-c", "locked=false", "--seed", str(seed), "--out", "again")
    assert set(_story(run.stdout)) >= {line for line in told if "teller=" in line}


@pytest.mark.parametrize("setup_raises", [False, True])
def test_explore_check_and_show_of_a_scenario_that_raises_say_one_line_too(
        bank_trace: Path, setup_raises: bool) -> None:
    Path("broken.py").write_text(_broken("return 1/0", setup_raises), encoding="utf-8")
    for command in (["explore", "broken.py", "-c", "locked=false", "--out", "x"],
                    ["check", "broken.py", "--out", "x"]):
        done = invoke(*command)
        assert done.exit_code == 4, done.output
        assert done.stderr.count("\n") == 1 and "broken.py:" in done.stderr, done.stderr
        assert "Traceback" not in done.output
    shown = invoke("show", str(bank_trace), "--format", "markdown", "--scenario", "broken.py")
    assert shown.exit_code == 0, shown.output  # show runs nothing: its replay line is kept
    assert f"dst replay {bank_trace} --scenario broken.py" in shown.stdout.replace("\\", "")
