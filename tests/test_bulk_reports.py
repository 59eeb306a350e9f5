"""What a bulk run reports: Markdown for an issue, JUnit XML for CI, `dst runs`, progress."""

from __future__ import annotations

import json
import re
import shlex
import sqlite3
import subprocess
import sys
import xml.etree.ElementTree as ET
from contextlib import closing
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import dst.commands.run
from dst.cli import main
from dst.runner.bulk import BulkSummary
from dst.runner.progress import eta, status_line

TWO_BUGS = '''
from dst import Env, Scenario, Sim

scenario = Scenario("two", doc="seeds 0 mod 3 break Even, 1 mod 3 break Odd")


async def worker(env: Env) -> None:
    await env.store.put("x", 1)


@scenario.setup
def setup(sim: Sim, config: dict) -> object:
    sim.process("worker", worker, stores=["db"])
    return sim.seed


@scenario.invariant("Even")
def even(seed) -> bool | str:
    return seed % 3 != 0 or "an even third"


@scenario.invariant("Odd")
def odd(seed) -> bool | str:
    return seed % 3 != 1 or "an odd third"
'''

#: Code under test chooses every string it logs: here, Markdown, HTML, a terminal
#: hyperlink, a mention, a table break and a non-character (which XML forbids).
HOSTILE = '''
import structlog
from dst import Env, Scenario, Sim

log = structlog.get_logger()
scenario = Scenario("hostile", doc="logs what a reader must never see as markup")
TEXT = ("<img src=x onerror=alert(1)> **b** [x](http://evil) @admin | cell "
        "\\x1b]8;;http://evil\\x07click\\x1b]8;;\\x07 \\uffff `code`")


async def worker(env: Env) -> None:
    await env.store.put("x", 1)
    log.info(TEXT, note=TEXT)


@scenario.setup
def setup(sim: Sim, config: dict) -> object:
    db = sim.store("db")
    sim.process("worker", worker, stores=["db"])
    return db


@scenario.invariant("Never")
def never(db) -> bool | str:
    return db.peek("x") is None or "broken: " + TEXT
'''


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


# -- Markdown --------------------------------------------------------------------------


def test_summary_md_tells_each_group_its_seeds_story_and_a_replay_that_works(
    tmp_path: Path,
) -> None:
    md = tmp_path / "summary.md"
    done = invoke("run", "counter", "-c", "cas=false", "--seeds", "40", "--out",
                  str(tmp_path / "o"), "--summary-md", str(md), "--json")
    assert done.exit_code == 1, done.output
    doc = json.loads(done.stdout)
    [group] = doc["groups"]
    text = md.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert lines[0] == f"### dst run counter: {doc['failed']} failing seeds in 1 group"
    assert "- config: cas=false workers=2 increments=7" in lines
    assert f"| 1 | NoLostIncrement | {group['count']} | {group['first_seed']} | " \
           f"{group['shortest_seed']} ({group['shortest_steps']} steps) |" in lines
    assert any(line.startswith("**Shortest story** (") for line in lines)
    assert any(line.startswith("- dst 0\\.1\\.0 (Python ") for line in lines)
    replays = [line.strip() for line in lines if line.startswith("    dst replay ")]
    assert replays
    replayed = invoke(*shlex.split(replays[0])[1:])
    assert replayed.exit_code == 1 and replayed.stdout.startswith("identical: ")


def test_summary_md_of_a_passing_run_says_so(tmp_path: Path) -> None:
    md = tmp_path / "ok.md"
    done = invoke("run", "counter", "--seeds", "20", "--out", str(tmp_path / "o"),
                  "--summary-md", str(md))
    assert done.exit_code == 0, done.output
    assert md.read_text().startswith("### dst run counter: no failures in 20 seeds\n")


def test_reports_leave_nothing_a_trace_says_active(tmp_path: Path) -> None:
    source = _write(tmp_path, "hostile.py", HOSTILE)
    md, xml = tmp_path / "s.md", tmp_path / "j.xml"
    done = invoke("run", source, "--seeds", "3", "--out", str(tmp_path / "o"),
                  "--summary-md", str(md), "--junit", str(xml))
    assert done.exit_code == 1, done.output
    for line in md.read_text(encoding="utf-8").splitlines():
        bare = re.sub(r"\\.", "", line)  # what Markdown could still act on
        if line.startswith("    "):
            continue  # a code block: shown as it is
        for syntax in ("<", ">", "`", "](", "[", "**b", "@", "\x1b", "\x07", "http:"):
            assert syntax not in bare, (syntax, line)
    raw = xml.read_text(encoding="utf-8")
    assert "\x1b" not in raw and "\x07" not in raw and "\\x1b" in raw
    root = ET.fromstring(raw.encode("utf-8"))  # well-formed despite it all
    [failure] = root.iter("failure")
    assert "<img src=x" in (failure.text or "")  # as text, escaped by the XML itself


# -- JUnit --------------------------------------------------------------------------


def test_junit_has_a_failing_test_case_per_group_with_its_replay(
    tmp_path: Path,
) -> None:
    source = _write(tmp_path, "two.py", TWO_BUGS)
    xml = tmp_path / "junit.xml"
    done = invoke("run", source, "--seeds", "12", "--no-shrink", "--out", str(tmp_path / "o"),
                  "--junit", str(xml))
    assert done.exit_code == 1, done.output
    root = ET.parse(xml).getroot()
    assert root.tag == "testsuites"
    [suite] = root.findall("testsuite")
    assert (suite.get("tests"), suite.get("failures")) == ("2", "2")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ["two [] group 1", "two [] group 2"]
    # No group has a time of its own: the run's is the suite's, not each case's.
    assert [c.get("time") for c in cases] == ["0.000", "0.000"]
    assert float(suite.get("time") or 0) > 0
    assert {c.get("classname") for c in cases} == {"dst.two"}
    assert all(len(c.findall("failure")) == 1 for c in cases)
    failures = [f for c in cases for f in c.findall("failure")]
    assert sorted(f.get("type") for f in failures) == ["Even", "Odd"]
    for f in failures:
        message = f.get("message") or ""
        assert "violated in 4 seeds" in message
        command = message.split("replay: ", 1)[1]
        assert command.startswith("dst replay ") and f"--scenario {source}" in command
        assert invoke(*shlex.split(command)[1:]).exit_code == 1


def test_junit_of_a_passing_run_has_its_test_case_and_no_failure(tmp_path: Path) -> None:
    xml = tmp_path / "ok.xml"
    assert invoke("run", "counter", "--seeds", "10", "--out", str(tmp_path / "o"),
                  "--junit", str(xml)).exit_code == 0
    root = ET.parse(xml).getroot()
    [suite] = root.findall("testsuite")
    assert (suite.get("tests"), suite.get("failures")) == ("1", "0")
    assert list(root.iter("failure")) == [] and len(list(root.iter("testcase"))) == 1


def test_a_report_path_that_cannot_be_written_is_refused_before_any_seed(
    tmp_path: Path,
) -> None:
    done = invoke("run", "counter", "--seeds", "10", "--out", str(tmp_path / "o"),
                  "--junit", str(tmp_path / "no" / "such" / "dir.xml"))
    assert done.exit_code == 2 and done.stdout == ""
    assert done.stderr.startswith("error: cannot write --junit ") and "does not exist" in \
        done.stderr and done.stderr.count("\n") == 1
    assert not (tmp_path / "o" / "results.sqlite").exists() or "runs" not in done.stderr


# -- dst runs --------------------------------------------------------------------------


def test_dst_runs_lists_every_run_with_what_it_did(tmp_path: Path) -> None:
    out = str(tmp_path / "o")
    invoke("run", "counter", "--seeds", "30", "--out", out)
    invoke("run", "counter", "-c", "cas=false", "--seeds", "600", "-x", "--no-shrink",
           "--out", out)
    listed = invoke("runs", "--out", out)
    assert listed.exit_code == 0, listed.output
    header, first, second = listed.stdout.splitlines()
    assert header.split() == ["started", "scenario", "config", "strategy", "seeds", "done",
                              "failed", "groups", "time", "ended"]
    assert "counter" in first and "cas=true" in first and "0..29" in first
    assert first.split()[-5:-2] == ["30", "0", "0"] and first.endswith("done")
    assert "cas=false" in second and second.endswith("max-failures")
    doc = json.loads(invoke("runs", "--out", out, "--json").stdout)
    assert [(r["scenario"], r["done"], r["failed"], r["groups"], r["status"])
            for r in doc["runs"]] == [("counter", 30, 0, 0, "done"),
                                      ("counter", 1, 1, 1, "max-failures")]
    assert doc["runs"][1]["command"].endswith("--resume")


def test_dst_runs_tells_a_run_whose_process_is_gone_as_killed(tmp_path: Path) -> None:
    out = tmp_path / "o"
    invoke("run", "counter", "--seeds", "10", "--out", str(out))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    with closing(sqlite3.connect(out / "results.sqlite")) as db, db:  # closed, committed
        db.execute("UPDATE runs SET status = 'running', pid = ?", (int(gone.stdout),))
    doc = json.loads(invoke("runs", "--out", str(out), "--json").stdout)
    assert [r["status"] for r in doc["runs"]] == ["killed"]


def test_dst_runs_without_a_database_is_one_line(tmp_path: Path) -> None:
    done = invoke("runs", "--out", str(tmp_path / "nothing"))
    assert done.exit_code == 2 and done.stderr.startswith("error: no results database at ")
    assert done.stderr.count("\n") == 1


# -- progress --------------------------------------------------------------------------


def test_the_progress_line_tells_seeds_rate_groups_and_time_left() -> None:
    summary = BulkSummary(runs=500)
    assert status_line(summary, 1000, 0, 2.0, None) == \
        "500/1,000 seeds  250/s  0 failed  0:00:02  ETA 0:00:02"
    summary.count_failure(3, 7, ["Inv"], '[["Inv"],"m","a"]')
    summary.count_failure(9, 5, ["Inv"], '[["Inv"],"m","b"]')
    assert "2 groups (2 failed)" in status_line(summary, None, 0, 2.0, 30.0)
    assert status_line(summary, None, 0, 2.0, 30.0).endswith("ETA 0:00:30")
    assert eta(500, 0, None, 2.0, None) is None
    assert eta(500, 100, 1000, 2.0, 1.0) == 1.0  # --for ends it sooner than the rate would


def test_the_live_display_shows_on_a_terminal_and_never_with_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(dst.commands.run, "interactive", lambda: True)
    shown = invoke("run", "counter", "-c", "cas=false", "--seeds", "30", "--no-shrink",
                   "--out", str(tmp_path))
    assert "30/30 seeds" in shown.stderr and "1 group (" in shown.stderr
    quiet = invoke("run", "counter", "--seeds", "30", "--out", str(tmp_path), "--json")
    assert quiet.stderr == ""


ONE_STEP = '''
from dst import Env, Scenario, Sim

scenario = Scenario("one", doc="the first write breaks the check")


async def worker(env: Env) -> None:
    await env.store.put("x", 1)


@scenario.setup
def setup(sim: Sim, config: dict) -> object:
    db = sim.store("db")
    sim.process("worker", worker, stores=["db"])
    return db


@scenario.invariant("Unwritten")
def unwritten(db) -> bool | str:
    return not list(db.scan("x")) or "x was written"
'''


def test_counts_of_one_are_told_in_the_singular(tmp_path: Path) -> None:
    source = _write(tmp_path, "one.py", ONE_STEP)
    md = tmp_path / "summary.md"
    done = invoke("run", source, "--seeds", "1", "--out", str(tmp_path / "o"),
                  "--summary-md", str(md))
    assert done.exit_code == 1, done.output
    trace = next((tmp_path / "o").glob("one-0*.jsonl"))
    shown = invoke("show", str(trace), "--format", "markdown", "--scenario", source).stdout
    told = done.stdout + md.read_text(encoding="utf-8") + shown
    assert "(1 step)" in told and "1 step," in told, told
    assert re.search(r"\b1 (steps|lines|groups|runs)\b", told) is None, told
