"""A scenario file named in a test is found beside that test, from whatever directory
pytest runs in: ``check_seeds``, ``@pytest.mark.dst`` and ``dst.hypothesis.runs``.

Exercised as a user meets it: a small project in a temporary directory, its tests run by
pytest in a process of its own, started from a directory that is not the tests' own.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dst.errors import UsageError
from dst.registry import near
from tests.test_pytest_plugin import BANK

TESTS = '''
import pytest
from hypothesis import given, settings

from dst.hypothesis import runs
from dst.testing import check_seeds


def test_check_seeds_finds_the_file_beside_the_test():
    check_seeds("bank.py", seeds=20)


@pytest.mark.dst("bank.py", seeds=20)
def test_the_marker_finds_the_file_beside_the_test():
    pass


@settings(max_examples=5, database=None, deadline=None)
@given(runs("bank.py"))
def test_runs_finds_the_file_beside_the_test(run):
    assert run.passed, run.explain()


def test_a_failure_names_a_replay_that_runs_from_here(tmp_path):
    with pytest.raises(AssertionError) as failed:
        check_seeds("buggy/bank.py", seeds=50, out=tmp_path)
    replay = next(line for line in str(failed.value).splitlines() if "replay:" in line)
    with open({replay_file!r}, "w", encoding="utf-8") as fh:
        fh.write(replay.split("replay: ", 1)[1])
'''


def _project(root: Path) -> Path:
    tests = root / "proj" / "tests"
    (tests / "buggy").mkdir(parents=True)
    (tests / "bank.py").write_text(BANK.format(locked=True), encoding="utf-8")
    (tests / "buggy" / "bank.py").write_text(BANK.format(locked=False), encoding="utf-8")
    (tests / "test_bank.py").write_text(
        textwrap.dedent(TESTS).replace("{replay_file!r}", repr(str(root / "replay.txt"))),
        encoding="utf-8")
    return tests


def _pytest(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONHASHSEED="0")
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                           *args], cwd=cwd, capture_output=True, text=True, env=env,
                          check=False, timeout=300)


def test_scenario_files_are_found_beside_the_test_from_another_directory(
        tmp_path: Path) -> None:
    _project(tmp_path)
    done = _pytest(tmp_path, "proj/tests")  # from the project's parent
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 passed" in done.stdout, done.stdout
    # The failing seed's replay line names the file as seen from where pytest ran,
    # and runs as it is, from there.
    replay = (tmp_path / "replay.txt").read_text(encoding="utf-8")
    assert "--scenario proj/tests/buggy/bank.py" in replay, replay
    argv = shlex.split(replay)
    assert argv[0] == "dst"
    again = subprocess.run([sys.executable, "-m", "dst", *argv[1:]], cwd=tmp_path,
                           capture_output=True, text=True, check=False, timeout=120)
    assert again.returncode == 1 and again.stdout.startswith("identical: "), again.stderr

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = _pytest(elsewhere, str(tmp_path / "proj" / "tests"))  # from a sibling
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_file_not_beside_the_test_is_still_found_in_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    anchor = tmp_path / "tests" / "test_x.py"
    anchor.parent.mkdir()
    (anchor.parent / "beside.py").write_text("", encoding="utf-8")
    (tmp_path / "elsewhere.py").write_text("", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert near("beside.py", anchor) == str(anchor.parent / "beside.py")
    assert near("elsewhere.py", anchor) == "elsewhere.py"  # then the working directory
    with pytest.raises(UsageError) as nowhere:
        near("besid.py", anchor)
    assert str(nowhere.value) == ("no scenario file besid.py beside tests/test_x.py or in the "
                                  f"working directory {tmp_path}; did you mean beside.py?")
    assert near("counter", anchor) == "counter"  # a shipped name
    assert near("pkg.module", anchor) == "pkg.module"  # a module
    assert near("/abs/x.py", anchor) == "/abs/x.py"
    assert near("beside.py", None) == "beside.py"
