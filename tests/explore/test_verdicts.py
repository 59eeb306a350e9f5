"""What `dst explore` says it proved is what it proved."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from dst.cli import main

HERE = Path(__file__).parent


def explore(*args: str, tmp: Path) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(main, ["explore", *args, "--out", str(tmp), "--json"])
    assert result.exit_code in (0, 1, 5), result.output
    return result.exit_code, json.loads(result.stdout)


def test_a_crash_the_plan_allows_is_explored_without_a_flag(tmp_path: Path) -> None:
    code, doc = explore(str(HERE / "crash_between.py"), tmp=tmp_path)
    assert code == 1 and doc["checks"]["BothOrNeither"]["verdict"] == "violated"
    assert doc["bounds"]["crashes"] == 1


def test_a_bound_below_the_plan_is_named_on_the_proof(tmp_path: Path) -> None:
    code, doc = explore(str(HERE / "crash_between.py"), "--crashes", "0", tmp=tmp_path)
    assert code == 0 and doc["checks"]["BothOrNeither"]["verdict"] == "holds"
    assert "0 crashes (the plan allows 1)" in doc["statement"]


def test_an_eventually_cut_before_its_deadline_is_not_checked(tmp_path: Path) -> None:
    code, doc = explore(str(HERE / "late.py"), "--no-por", "--max-steps", "3", tmp=tmp_path)
    check = doc["checks"]["Flagged"]
    assert check["verdict"] == "not checked" and check["proof"] is False
    assert "before its deadline" in check["caveat"]
    # Long enough runs reach the deadline, and then it holds.
    code, doc = explore(str(HERE / "late.py"), "--no-por", "--max-steps", "40", tmp=tmp_path)
    assert code == 0 and doc["checks"]["Flagged"]["verdict"] == "holds"


def test_an_eventually_is_never_proven_under_reduction(tmp_path: Path) -> None:
    _, doc = explore(str(HERE / "late.py"), "--max-steps", "40", tmp=tmp_path)
    assert doc["por"] is True and doc["checks"]["Flagged"]["verdict"] == "not checked"
    assert "--no-por" in doc["checks"]["Flagged"]["caveat"]


def test_a_stopped_search_says_the_depth_it_covered(tmp_path: Path) -> None:
    _, doc = explore("counter", "-c", "increments=3", "--max-schedules", "300",
                        tmp=tmp_path)
    assert doc["proof"] is False and doc["stopped"] == "max_schedules"
    assert doc["complete_depth"] is not None and doc["complete_depth"] >= 8
    assert f"every schedule of up to {doc['complete_depth']} steps ran" in doc["statement"]


def test_check_reduction_passes_on_the_hidden_state_suite(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, [
        "explore", str(HERE / "crash_between.py"), "--check-reduction",
        "--out", str(tmp_path)])
    assert result.exit_code == 1, result.output
    assert "same verdicts and shortest violations" in result.output
