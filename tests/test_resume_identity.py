"""``dst run --resume`` reuses only seeds done by the same run: the same scenario file and
name, the same code in that file, config, strategy and fault plan; otherwise it says so in
one line and runs every seed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from dst.cli import main

from .test_trace_names import SWITCHED


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def run_json(*args: str) -> tuple[Result, dict[str, Any]]:
    result = invoke("run", *args, "--no-shrink", "--json")
    assert result.exit_code in (0, 1), result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return result, doc


def small_test(body: str) -> str:
    return f"import dst\n\n\n@dst.test(seeds=20)\nasync def test_pay():\n    {body}\n"


def test_resume_does_not_take_another_files_test_of_the_same_name_for_done(
        tmp_path: Path) -> None:
    (tmp_path / "test_ok.py").write_text(small_test("assert True"), encoding="utf-8")
    (tmp_path / "test_bug.py").write_text(small_test('assert False, "bug"'), encoding="utf-8")
    out = str(tmp_path / "out")
    _, ok = run_json(str(tmp_path / "test_ok.py"), "--seeds", "20", "--out", out)
    assert ok["failed"] == 0
    told, bug = run_json(str(tmp_path / "test_bug.py"), "--seeds", "20", "--resume",
                         "--out", out)
    assert told.exit_code == 1
    assert (bug["runs"], bug["resumed"], bug["failed"]) == (20, 0, 20)
    [line] = told.stderr.splitlines()
    assert line.startswith("--resume: no earlier run of test_pay with these settings in ")
    assert "another file" in line and line.endswith("; running every seed")


def test_a_resumed_run_tells_its_own_files_failure_and_replays_its_own_trace(
        tmp_path: Path) -> None:
    for name in ("one", "two"):
        (tmp_path / f"test_{name}.py").write_text(small_test(f'assert False, "bug {name}"'),
                                                  encoding="utf-8")
    out = str(tmp_path / "out")
    invoke("run", str(tmp_path / "test_one.py"), "--seeds", "20", "--no-shrink", "--out", out)
    two = invoke("run", str(tmp_path / "test_two.py"), "--seeds", "20", "--resume",
                 "--no-shrink", "--out", out)
    assert two.exit_code == 1
    assert "bug two" in two.stdout and "bug one" not in two.stdout
    replays = [line for line in two.stdout.splitlines() if "replay: dst replay" in line]
    assert replays and all("test_two.test_pay-" in line and "test_two.py" in line
                           for line in replays)
    again = invoke("run", str(tmp_path / "test_two.py"), "--seeds", "20", "--resume",
                   "--no-shrink", "--out", out)
    assert "bug two" in again.stdout and "bug one" not in again.stdout
    assert "(20 done earlier, resumed)" in again.stdout and again.stderr == ""


def test_resume_runs_every_seed_again_after_the_scenario_file_is_edited(
        tmp_path: Path) -> None:
    test = tmp_path / "test_pay.py"
    test.write_text(small_test("assert True"), encoding="utf-8")
    out = str(tmp_path / "out")
    run_json(str(test), "--seeds", "20", "--out", out)
    test.write_text(small_test('assert False, "now broken"'), encoding="utf-8")
    told, doc = run_json(str(test), "--seeds", "20", "--resume", "--out", out)
    assert (doc["resumed"], doc["failed"]) == (0, 20)
    assert "(the nearest recorded one has other source code)" in told.stderr




def test_resume_of_another_config_or_strategy_says_which_and_runs_every_seed(
        tmp_path: Path) -> None:
    source = tmp_path / "sw.py"
    source.write_text(SWITCHED, encoding="utf-8")
    out = str(tmp_path / "out")
    run_json(str(source), "-c", "n=1", "--seeds", "5", "--out", out)
    told, doc = run_json(str(source), "-c", "n=2", "--seeds", "5", "--resume", "--out", out)
    assert doc["resumed"] == 0
    assert told.stderr.startswith("--resume: no earlier run of sw [n=2 label=plain] with these "
                                  "settings")
    assert "(the nearest recorded one has another config)" in told.stderr
    told, doc = run_json(str(source), "-c", "n=1", "--seeds", "5", "--strategy", "swarm",
                         "--resume", "--out", out)
    assert doc["resumed"] == 0 and "another strategy" in told.stderr
    told, doc = run_json(str(source), "-c", "n=1", "--seeds", "5", "--resume", "--out", out)
    assert doc["resumed"] == 5 and told.stderr == ""


def test_resume_in_a_directory_without_that_scenario_says_there_is_none(tmp_path: Path) -> None:
    source = tmp_path / "sw.py"
    source.write_text(SWITCHED, encoding="utf-8")
    told, doc = run_json(str(source), "--seeds", "3", "--resume", "--out",
                         str(tmp_path / "out"))
    assert doc["runs"] == 3 and doc["resumed"] == 0
    assert told.stderr == (f"--resume: no earlier run of sw [n=0 label=plain] in "
                           f"{tmp_path / 'out' / 'results.sqlite'}; running every seed\n")
