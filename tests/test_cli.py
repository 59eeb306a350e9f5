"""The command line as a user meets it: list, run, replay, show, and their JSON."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import dst.cli
import dst.commands.run
from dst.cli import main


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def run_json(*args: str) -> tuple[int, dict[str, Any]]:
    result = invoke("run", *args, "--json")
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(result.stdout)


# -- list ------------------------------------------------------------------------


def test_list_json_describes_switches_invariants_and_planted_bugs() -> None:
    result = invoke("list", "--json")
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    by_name = {s["name"]: s for s in doc["scenarios"]}
    assert {"counter", "ping"} <= set(by_name)
    for s in doc["scenarios"]:
        assert isinstance(s["doc"], str) and s["doc"]
        assert isinstance(s["invariants"], list)
        for w in s["switches"]:
            assert {"name", "default", "choices"} <= set(w)
            if w["choices"] is not None:
                assert w["default"] in w["choices"]
        for bug in s["planted_bugs"]:
            assert set(bug["config"]) <= {w["name"] for w in s["switches"]}
            assert set(bug["breaks"]) <= set(s["invariants"]) | set(s["end_checks"])
    cas = next(w for w in by_name["counter"]["switches"] if w["name"] == "cas")
    assert cas == {"name": "cas", "default": True, "choices": [False, True], "doc": cas["doc"]}
    assert by_name["counter"]["planted_bugs"][0]["config"] == {"cas": False}
    assert by_name["counter"]["planted_bugs"][0]["breaks"] == ["NoLostIncrement"]


def test_list_names_a_shipped_scenario_whose_library_is_not_installed_and_lists_the_rest(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "scenarios.agent_openai", raising=False)
    monkeypatch.setitem(sys.modules, "h11", None)  # as if dst[agents] were not installed
    listed = invoke("list")
    assert listed.exit_code == 0, listed.output
    assert "counter: " in listed.stdout
    assert "agent_openai: not here: it imports h11, which is not installed (pip install " \
        "'dst[agents]' installs what the shipped agents use)" in listed.stdout.splitlines()
    doc = json.loads(invoke("list", "--json").stdout)
    assert {"name": "agent_openai", "needs": "h11"} in doc["unavailable"]
    assert "agent_openai" not in {s["name"] for s in doc["scenarios"]}
    assert "counter" in {s["name"] for s in doc["scenarios"]}


def test_running_a_shipped_scenario_whose_library_is_not_installed_says_what_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "scenarios.agent_openai", raising=False)
    monkeypatch.setitem(sys.modules, "h11", None)
    ran = invoke("run", "agent_openai", "--seeds", "1")
    assert ran.exit_code == 2
    assert ran.stderr.strip() == ("error: scenario agent_openai imports h11, which is not "
                                  "installed: pip install 'dst[agents]' installs what the "
                                  "shipped agents use")


def test_list_shows_each_switch_with_its_default_and_allowed_values() -> None:
    result = invoke("list")
    assert result.exit_code == 0
    assert "-c cas=true" in result.stdout
    assert "planted bug: -c cas=false breaks NoLostIncrement" in result.stdout
    assert "planted bug: -c dedup=false breaks AtMostOnce" in result.stdout


# -- run -------------------------------------------------------------------------


def test_the_default_counter_passes_and_exits_0(tmp_path: Path) -> None:
    result = invoke("run", "counter", "--seeds", "200", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "counter [cas=true workers=2 increments=7]: 200 runs, 0 failed" in result.stdout
    assert list(tmp_path.glob("*.jsonl")) == []


def test_run_json_reports_each_failing_seed_its_invariants_and_trace(tmp_path: Path) -> None:
    code, doc = run_json("counter", "-c", "cas=false", "--seeds", "200", "--out", str(tmp_path))
    assert code == 1
    assert doc["scenario"] == "counter"
    assert doc["config"] == {"cas": False, "workers": 2, "increments": 7}
    assert doc["runs"] == 200
    assert isinstance(doc["seconds"], float)
    assert doc["failures"], "the lost update must be found"
    for f in doc["failures"]:
        assert f["violated"] == ["NoLostIncrement"]
        assert Path(f["trace"]).is_file()
    # Traces of failing seeds only: one file per failure, none for the passing seeds.
    written = {p.name for p in tmp_path.glob("*.jsonl")}
    assert written == {f"counter-cas=false-{f['seed']}.jsonl" for f in doc["failures"]}
    assert len(doc["failures"]) < 200


def _replay_lines(stdout: str) -> list[str]:
    return [line.split("replay: ", 1)[1] for line in stdout.splitlines()
            if line.strip().startswith("replay: ")]


@pytest.mark.parametrize(("scenario", "switch"), [("counter", "cas=false"),
                                                  ("ping", "dedup=false")])
def test_every_printed_replay_command_reproduces_its_failure(
    tmp_path: Path, scenario: str, switch: str
) -> None:
    result = invoke("run", scenario, "-c", switch, "--seeds", "60", "--out", str(tmp_path))
    assert result.exit_code == 1, result.output
    commands = _replay_lines(result.stdout)
    assert commands, result.stdout
    for command in commands:
        argv = shlex.split(command)
        assert argv[:2] == ["dst", "replay"]
        replayed = invoke(*argv[1:])
        assert replayed.exit_code == 1, replayed.output
        assert replayed.stdout.startswith("identical: ")
        assert "violated again" in replayed.stdout


def test_the_first_failure_is_told_as_a_story_in_the_runtimes_own_words(
    tmp_path: Path,
) -> None:
    result = invoke("run", "counter", "-c", "cas=false", "--seeds", "20", "--out", str(tmp_path))
    assert result.exit_code == 1
    out = result.stdout
    assert out.startswith("FAIL counter [cas=false workers=2 increments=7]: "
                          "NoLostIncrement violated (seed ")
    assert "  story (" in out and "read counter" in out and "VIOLATED NoLostIncrement" in out
    assert "failed (NoLostIncrement x" in out.splitlines()[-1]


def test_workers_find_the_same_failures_as_one_process(tmp_path: Path) -> None:
    _, one = run_json("ping", "-c", "dedup=false", "--seeds", "120", "--out", str(tmp_path / "a"))
    _, two = run_json("ping", "-c", "dedup=false", "--seeds", "120", "--workers", "2",
                      "--out", str(tmp_path / "b"))
    assert [(f["seed"], f["violated"]) for f in one["failures"]] == \
        [(f["seed"], f["violated"]) for f in two["failures"]]


def test_check_determinism_replays_every_seed_identically(tmp_path: Path) -> None:
    result = invoke("run", "ping", "--seeds", "40", "--check-determinism", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "determinism: 40 of 40 seeds replayed identically" in result.stdout


def test_for_a_duration_stops_and_summarises(tmp_path: Path) -> None:
    code, doc = run_json("counter", "--for", "1s", "--out", str(tmp_path))
    assert code == 0
    assert doc["runs"] > 0 and doc["failures"] == []


def test_for_a_duration_bounds_a_seed_range_too(tmp_path: Path) -> None:
    code, doc = run_json("counter", "--for", "1s", "--seeds", "100000", "--out", str(tmp_path))
    assert code == 0
    assert 0 < doc["runs"] < 100_000


# -- resume ----------------------------------------------------------------------


NOTED_SCENARIO = '''
from typing import Any

from dst import Env, Scenario, Sim

scenario = Scenario("noted", doc="notes every seed it runs; every seventh fails")


async def worker(env: Env) -> None:
    await env.store.get("x")


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> Any:
    with open({log!r}, "a") as fh:  # seen by the test whichever worker ran the seed
        fh.write(f"{{sim.seed}}\\n")
    sim.process("worker", worker, stores=["db"])
    return sim.seed


@scenario.invariant("NotSeventh")
def not_seventh(seed: Any) -> bool | str:
    return seed % 7 != 0 or "a seventh seed"
'''


def test_resume_runs_only_the_seeds_not_done_and_reports_the_combined_results(
    tmp_path: Path,
) -> None:
    from dst.runner.results import ResultsDB

    log = tmp_path / "executed.txt"
    source = tmp_path / "noted.py"
    source.write_text(NOTED_SCENARIO.format(log=str(log)), encoding="utf-8")

    def executed() -> list[int]:
        seeds = sorted(int(line) for line in log.read_text().split()) if log.exists() else []
        log.unlink(missing_ok=True)
        return seeds

    out = str(tmp_path / "out")
    # Every failing trace kept, so that the failures listed are every failing seed.
    args = (str(source), "--keep-traces", "all", "--out", out)
    _, first = run_json(*args, "--seed-range", "0:300")  # then "interrupted"
    assert executed() == list(range(300))
    _, resumed = run_json(*args, "--seeds", "500", "--resume")
    assert executed() == list(range(300, 500))  # only the new seeds ran
    assert resumed["runs"] == 500 and resumed["resumed"] == 300

    _, fresh = run_json(*args[:-1], str(tmp_path / "fresh"), "--seeds", "500")
    executed()
    assert [f["seed"] for f in resumed["failures"]] == [f["seed"] for f in fresh["failures"]]
    assert {f["seed"] for f in first["failures"]} < {f["seed"] for f in resumed["failures"]}

    with ResultsDB(out) as db:
        key = db.runs()[0].run_key  # the scenario file, its source, config, strategy
    with ResultsDB(out) as db:
        assert db.done_ranges(key) == [(0, 500)]
        assert [f.seed for f in db.failures_within(key, 0, None)] == \
            [f["seed"] for f in fresh["failures"]]

    _, again = run_json(*args, "--seeds", "500", "--resume")
    assert executed() == [] and again["runs"] == 500


def test_without_resume_every_seed_runs_again(tmp_path: Path) -> None:
    args = ("counter", "--seeds", "50", "--out", str(tmp_path))
    run_json(*args)
    _, doc = run_json(*args)
    assert doc["resumed"] == 0 and doc["runs"] == 50


def test_resume_of_another_config_starts_afresh(tmp_path: Path) -> None:
    run_json("counter", "--seeds", "50", "--out", str(tmp_path))
    _, doc = run_json("counter", "-c", "workers=3", "--seeds", "50", "--resume",
                      "--out", str(tmp_path))
    assert doc["resumed"] == 0


# -- progress --------------------------------------------------------------------


def test_no_progress_line_when_the_output_is_not_a_terminal(tmp_path: Path) -> None:
    result = invoke("run", "counter", "--seeds", "30", "--out", str(tmp_path))
    assert "\r" not in result.output and "seeds/s" not in result.stderr


def test_a_progress_line_on_a_terminal_but_never_with_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dst.commands.run, "interactive", lambda: True)
    shown = invoke("run", "counter", "--seeds", "30", "--out", str(tmp_path))
    assert "30/30 seeds" in shown.stderr and "/s" in shown.stderr
    quiet = invoke("run", "counter", "--seeds", "30", "--out", str(tmp_path), "--json")
    assert quiet.stderr == ""
    json.loads(quiet.stdout)


# -- replay of a user's own scenario file ----------------------------------------

USER_SCENARIO = '''
from dst import Env, Scenario, Sim

scenario = Scenario("tally", doc="two clerks add one each to a tally")


@scenario.setup
def setup(sim: Sim, config: dict) -> object:
    db = sim.store("db")

    def clerk(first: bool):
        async def main(env: Env) -> None:
            {extra}
            n = await env.store.get("n") or 0
            await env.store.put("n", n + 1)
            await env.store.put(f"done/{{env.name}}", 1)
        return main

    sim.process("clerk-1", clerk(True), stores=["db"])
    sim.process("clerk-2", clerk(False), stores=["db"])
    return db


@scenario.invariant("NoLostAdd")
def no_lost_add(db) -> bool | str:
    done = len(db.scan("done/"))
    return (db.peek("n") or 0) >= done or f"tally {{db.peek('n')}} after {{done}} adds"
'''


def test_a_changed_user_scenario_replays_as_diverged_at_the_right_step(
    tmp_path: Path,
) -> None:
    source = tmp_path / "tally.py"
    source.write_text(USER_SCENARIO.format(extra="pass"), encoding="utf-8")
    result = invoke("run", str(source), "--seeds", "40", "--out", str(tmp_path / "t"))
    assert result.exit_code == 1, result.output
    command = _replay_lines(result.stdout)[0]
    assert f"--scenario {source}" in command
    argv = shlex.split(command)[1:]
    same = invoke(*argv)
    assert same.exit_code == 1 and same.stdout.startswith("identical: "), same.output

    # One extra environment call, first thing clerk-1 does: the options offered
    # at step 1 differ, so the replay must stop there rather than later.
    extra = 'await env.store.get("warm-up") if first else None'
    source.write_text(USER_SCENARIO.format(extra=extra), encoding="utf-8")
    changed = invoke(*argv)
    assert changed.exit_code == 3, changed.output
    assert changed.stdout.startswith("diverged at step 1:"), changed.stdout
    assert "likely cause" in changed.stdout and "recorded by dst" not in changed.stdout
    as_json = json.loads(invoke(*argv, "--json").stdout)
    assert as_json["identical"] is False and as_json["divergence"].startswith("diverged at")

    # Recorded by another dst: the hint says so, with both versions.
    from dst.trace.codec import read_trace, write_trace

    trace = read_trace(argv[1])
    trace.header["dst_version"] = "0.0.9"
    write_trace(trace, argv[1])
    older = invoke(*argv)
    assert older.exit_code == 3, older.output
    assert "changed since the trace was recorded (recorded by dst 0.0.9 on Python " \
        in older.stdout, older.stdout


def test_a_replay_given_the_wrong_scenario_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "tally.py"
    source.write_text(USER_SCENARIO.format(extra="pass"), encoding="utf-8")
    _, doc = run_json(str(source), "--seeds", "40", "--out", str(tmp_path))
    trace = doc["failures"][0]["trace"]
    result = invoke("replay", trace, "--scenario", "counter")
    assert result.exit_code == 2
    assert "defines scenario 'counter'" in result.stderr


# -- show, python -m dst ---------------------------------------------------------


@pytest.fixture(scope="module")
def ping_trace(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("ping")
    _, doc = run_json("ping", "-c", "dedup=false", "--seeds", "30", "--out", str(out))
    return str(doc["failures"][0]["trace"])


def test_show_prints_a_timeline_of_step_time_actor_and_what_happened(ping_trace: str) -> None:
    result = invoke("show", ping_trace)
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].startswith("ping [attempts=4 crashes=1 dedup=false ")
    assert any("client" in line and "sent" in line for line in lines)
    assert any("VIOLATED AtMostOnce" in line for line in lines)
    assert lines[-1].startswith("verdict: fail (violated: AtMostOnce)")
    verbose = invoke("show", ping_trace, "-v").stdout
    assert "sched" in verbose and "sched" not in result.stdout


def test_show_markdown_is_a_table_and_can_go_to_a_file(ping_trace: str, tmp_path: Path) -> None:
    result = invoke("show", ping_trace, "--format", "markdown")
    assert result.exit_code == 0
    assert "| step | virtual time | actor | what happened |" in result.stdout
    out = tmp_path / "story.md"
    assert invoke("show", ping_trace, "--format", "markdown", "-o", str(out)).exit_code == 0
    assert out.read_text(encoding="utf-8") == result.stdout


def test_python_dash_m_dst_works_like_dst() -> None:
    done = subprocess.run([sys.executable, "-m", "dst", "--help"], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0
    assert "replay" in done.stdout and "Usage:" in done.stdout
    bad = subprocess.run([sys.executable, "-m", "dst", "run", "countr"], capture_output=True,
                         text=True, check=False)
    assert bad.returncode == 2
    assert bad.stderr.strip().startswith("error: ") and "did you mean counter?" in bad.stderr


RESTLESS_SCENARIO = '''
from typing import Any

from dst import Env, Scenario, Sim

scenario = Scenario("restless", doc="a poller that never rests", max_steps=25)


async def poller(env: Env) -> None:
    while True:
        await env.store.get("n")


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> Any:
    db = sim.store("db")
    sim.process("poller", poller, stores=["db"])
    return db


@scenario.at_end("NeverChecked")
def never_checked(db: Any) -> bool | str:
    return "an end-of-run check ran although the run never came to rest"
'''


def test_runs_cut_at_the_step_bound_are_counted_and_their_traces_kept(tmp_path: Path) -> None:
    """Their end-of-run checks never ran, so a summary that stayed silent would overstate."""
    source = tmp_path / "restless.py"
    source.write_text(RESTLESS_SCENARIO, encoding="utf-8")
    out = tmp_path / "out"
    result = invoke("run", str(source), "--seeds", "4", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "4 runs hit the step bound (25 steps) before the system came to rest" in result.stdout
    shown = result.stdout.split("see one with: dst show ", 1)[1].split()[0]
    assert Path(shown).exists()
    assert invoke("show", shown).exit_code == 0

    resumed = invoke("run", str(source), "--seeds", "6", "--out", str(out), "--resume",
                     "--json")
    assert json.loads(resumed.stdout)["bounded"] == 6
    # Counted seed by seed, so a narrower resumed range counts only its own seeds,
    # and the earlier runs' traces are still offered.
    part = invoke("run", str(source), "--seed-range", "2:5", "--out", str(out), "--resume")
    assert "3 runs hit the step bound" in part.stdout, part.stdout
    assert "see one with: dst show " in part.stdout


def test_a_results_database_from_before_the_bound_count_gains_its_table(tmp_path: Path) -> None:
    import sqlite3
    from contextlib import closing

    from dst.runner.results import ResultsDB

    with closing(sqlite3.connect(tmp_path / "results.sqlite")) as old:
        old.executescript(
            "CREATE TABLE chunks (run_key TEXT NOT NULL, start INTEGER NOT NULL, stop INTEGER "
            "NOT NULL, runs INTEGER NOT NULL, decisions INTEGER NOT NULL, PRIMARY KEY (run_key, "
            "start)); INSERT INTO chunks VALUES ('k', 0, 200, 200, 9000);")
        old.commit()
    with ResultsDB(tmp_path) as db:
        assert db.done_ranges("k") == [(0, 200)]
        assert db.bounded_within("k", 0, None) == []
        db.record_chunk("k", list(range(200, 400)), 9000, [], [(250, "k-250.jsonl")])
        assert db.bounded_within("k", 0, None) == [(250, "k-250.jsonl")]
        assert db.bounded_within("k", 0, 250) == []
