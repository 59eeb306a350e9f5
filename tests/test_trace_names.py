"""A kept trace's file name is unique to what produced it: the scenario (a ``@dst.test`` by
its module too), a config other than the default, a strategy other than random, the seed;
so that no run overwrites another's trace, and every printed replay line names a trace that
holds the run it tells."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from dst.cli import main
from dst.registry import load
from dst.runner.names import trace_stem
from dst.testing import SeedFailed, check_seeds
from dst.trace.codec import read_trace

#: Fails every seed, naming its n: a trace of one config is told apart by its message.
SWITCHED = '''
from dst import Scenario

scenario = Scenario("sw", doc="fails, naming its n")
scenario.switch("n", 0, doc="a number")
scenario.switch("label", "plain", doc="a word")


async def main(env):
    await env.store.put("x", 1)


@scenario.setup
def setup(sim, config):
    sim.process("p", main, stores=["db"])
    return config["n"]


@scenario.at_end("Named")
def named(n):
    return f"n is {n}"
'''

RACE = '''
import trio
import dst


@dst.test(seeds=20)
async def test_race():
    c = [0]

    async def bump():
        s = c[0]
        await trio.sleep(0)
        c[0] = s + 1

    async with trio.open_nursery() as n:
        n.start_soon(bump)
        n.start_soon(bump)
    assert c[0] == 2, "lost update in file {which}"
'''


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


@pytest.fixture
def in_tmp(tmp_path: Path) -> Iterator[Path]:
    """Run in ``tmp_path``: the printed replay lines are relative to it, as a user's are."""
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(here)


def replayed(stdout: str) -> list[str]:
    """The traces the printed replay lines name."""
    return [line.split("dst replay ", 1)[1].split()[0] for line in stdout.splitlines()
            if "replay: dst replay " in line]


def test_check_seeds_of_two_configs_writes_two_traces_each_of_its_own_config(
        tmp_path: Path) -> None:
    source = tmp_path / "sw.py"
    source.write_text(SWITCHED, encoding="utf-8")
    paths = {}
    for n in (1, 2):
        with pytest.raises(SeedFailed) as failed:
            check_seeds(str(source), seeds=5, n=n, out=tmp_path / "out")
        paths[n] = failed.value.path
        assert f"dst replay {failed.value.path}" in str(failed.value)
    assert paths[1].name == "sw-n=1-0.jsonl" and paths[2].name == "sw-n=2-0.jsonl"
    for n, path in paths.items():
        assert read_trace(path).header["config"]["n"] == n


def test_the_default_config_of_a_scenario_file_keeps_its_plain_name(tmp_path: Path) -> None:
    source = tmp_path / "sw.py"
    source.write_text(SWITCHED, encoding="utf-8")
    with pytest.raises(SeedFailed) as failed:
        check_seeds(str(source), seeds=5, out=tmp_path)
    assert failed.value.path.name == "sw-0.jsonl"
    done = invoke("run", str(source), "--seeds", "3", "--no-shrink", "--out",
                  str(tmp_path / "run"))
    assert [p.name for p in (tmp_path / "run").glob("*.jsonl")] == ["sw-0.jsonl"], done.output


def test_a_resumed_run_replays_the_trace_of_its_own_config_not_the_last_written(
        in_tmp: Path) -> None:
    (in_tmp / "tests").mkdir()
    (in_tmp / "tests" / "sw.py").write_text(SWITCHED, encoding="utf-8")
    for args in (["-c", "n=1"], ["-c", "n=2"], ["-c", "n=1", "--resume"]):
        done = invoke("run", "tests/sw.py", *args, "--seeds", "5", "--no-shrink")
        assert done.exit_code == 1, done.output
    [trace] = replayed(done.stdout)
    assert trace == "traces/failures/sw-n=1-0.jsonl"
    header = read_trace(trace).header
    assert header["config"]["n"] == 1
    assert invoke("show", trace).stdout.startswith("sw [label=plain n=1] ")


def test_two_files_each_holding_test_race_keep_two_traces_each_replaying_its_own(
        in_tmp: Path) -> None:
    for which in ("a", "b"):
        (in_tmp / f"test_{which}.py").write_text(RACE.format(which=which), encoding="utf-8")
    traces = {}
    for which in ("a", "b"):
        done = invoke("run", f"test_{which}.py", "--seeds", "20", "--no-shrink")
        assert done.exit_code == 1, done.output
        [traces[which]] = replayed(done.stdout)
    assert Path(traces["a"]).name.startswith("test_a.test_race-")
    assert Path(traces["b"]).name.startswith("test_b.test_race-")
    for which, trace in traces.items():
        again = invoke("replay", trace, "--scenario", f"test_{which}.py", "--json")
        assert again.exit_code == 1 and json.loads(again.stdout)["identical"], again.output


def test_dst_run_names_a_dst_test_in_a_package_as_pytest_does(in_tmp: Path) -> None:
    (in_tmp / "tests").mkdir()
    (in_tmp / "tests" / "__init__.py").write_text("", encoding="utf-8")
    (in_tmp / "tests" / "test_pkg.py").write_text(RACE.format(which="pkg"), encoding="utf-8")
    done = invoke("run", "tests/test_pkg.py", "--seeds", "20", "--no-shrink")
    [trace] = replayed(done.stdout)
    assert Path(trace).name.startswith("tests.test_pkg.test_race-")


def test_another_strategy_is_named_in_the_trace(tmp_path: Path) -> None:
    source = tmp_path / "sw.py"
    source.write_text(SWITCHED, encoding="utf-8")
    invoke("run", str(source), "-c", "n=3", "--strategy", "swarm", "--seeds", "2",
           "--no-shrink", "--out", str(tmp_path))
    assert [p.name for p in tmp_path.glob("*.jsonl")] == ["sw-n=3-swarm-0.jsonl"]


def test_a_config_a_file_name_cannot_show_is_named_by_a_short_digest(tmp_path: Path) -> None:
    source = tmp_path / "sw.py"
    source.write_text(SWITCHED, encoding="utf-8")
    scenario = load(str(source))
    spaced = trace_stem(scenario, {"n": 0, "label": "two words"})
    slashed = trace_stem(scenario, {"n": 0, "label": "a/b"})
    assert spaced.startswith("sw-cfg") and slashed.startswith("sw-cfg") and spaced != slashed
    assert trace_stem(scenario, {"n": 0, "label": "plain"}) == "sw"
    assert trace_stem(scenario, {"n": 2, "label": "x"}) == "sw-n=2-label=x"
    assert trace_stem(scenario, {"n": 0, "label": "plain"}, strategy="pct:d=3") == "sw-pct.d=3"


def test_two_scenario_files_of_one_name_keep_their_traces_apart_across_resume(
        in_tmp: Path) -> None:
    for where in ("a", "b"):
        (in_tmp / where).mkdir()
        (in_tmp / where / "sw.py").write_text(SWITCHED, encoding="utf-8")
    first = {}
    for where in ("a", "b", "a", "b"):
        resume = ["--resume"] if where in first else []
        done = invoke("run", f"{where}/sw.py", "--seeds", "3", "--no-shrink", *resume)
        assert done.exit_code == 1, done.output
        [trace] = replayed(done.stdout)
        assert first.setdefault(where, trace) == trace  # a resumed run names the same trace
        assert read_trace(trace).header["scenario_file"] == f"{where}/sw.py"
    assert first["a"] == "traces/failures/sw-0.jsonl"  # the first keeps the plain name
    assert first["b"] != first["a"] and Path(first["b"]).name.startswith("sw-f")
