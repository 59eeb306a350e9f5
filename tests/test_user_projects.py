"""dst in a user's project laid out as pytest projects are: the replay line pytest
prints runs as printed, from where pytest ran, with no PYTHONPATH to set.

A test file imports its project's packages from the directories pytest put on
``sys.path`` (``pythonpath`` of the ini file, the basedir of the file and of its
conftests); dst loads a ``--scenario`` file with the same directories
(``dst.project``).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CHILD_PYTEST_ADDOPTS

COUNTER = '''
import trio


class Counter:
    def __init__(self):
        self.count = 0

    async def bump(self):
        seen = self.count
        await trio.sleep(0)
        self.count = seen + 1
'''

TEST = '''
import trio
import dst
from mypkg.counter import Counter


@dst.test(seeds=20)
async def test_counter_from_package():
    c = Counter()
    async with trio.open_nursery() as n:
        n.start_soon(c.bump)
        n.start_soon(c.bump)
    assert c.count == 2, f"lost update: {c.count}"
'''


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if not k.startswith("PYTEST_") and k != "PYTHONPATH"}


def _pytest(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                           *CHILD_PYTEST_ADDOPTS.split(), *args], cwd=cwd,
                          capture_output=True, text=True, check=False, env=_env(), timeout=300)


def _dst(cwd: Path, line: str) -> subprocess.CompletedProcess[str]:
    """``line`` (``dst ...``, as printed) run in ``cwd``, with no PYTHONPATH."""
    argv = shlex.split(line)
    assert argv[0] == "dst", line
    return subprocess.run([sys.executable, "-m", "dst", *argv[1:]], cwd=cwd,
                          capture_output=True, text=True, check=False, env=_env(),
                          timeout=300)


def _printed_replay(out: str) -> str:
    # pytest 9.2 repeats a failure's whole message in the short summary, so the
    # same line may be printed twice; it must never name two different replays.
    found = set(re.findall(r"replay: (dst replay .*)", out))
    assert len(found) == 1, out
    return found.pop()


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")


def test_the_replay_line_of_a_src_layout_with_pytest_pythonpath_runs_as_printed(
        tmp_path: Path) -> None:
    _write(tmp_path, {"pyproject.toml": '[tool.pytest.ini_options]\npythonpath = ["src"]\n',
                      "src/mypkg/__init__.py": "", "src/mypkg/counter.py": COUNTER,
                      "tests/test_pkg.py": TEST})
    ran = _pytest(tmp_path)
    assert "1 failed" in ran.stdout, ran.stdout + ran.stderr
    line = _printed_replay(ran.stdout)
    assert "--scenario tests/test_pkg.py::test_counter_from_package" in line
    again = _dst(tmp_path, line)
    assert again.returncode == 1, again.stderr
    assert again.stdout.startswith("identical: "), again.stdout


@pytest.mark.parametrize("layout", ["tests package", "pythonpath ."])
def test_the_replay_line_of_pytest_run_inside_tests_runs_as_printed(
        tmp_path: Path, layout: str) -> None:
    files = {"mypkg/__init__.py": "", "mypkg/counter.py": COUNTER, "tests/test_pkg.py": TEST}
    if layout == "tests package":  # pytest puts the project root on sys.path itself
        files |= {"tests/__init__.py": "", "pytest.ini": "[pytest]\n"}
    else:
        files |= {"pyproject.toml": '[tool.pytest.ini_options]\npythonpath = ["."]\n'}
    _write(tmp_path, files)
    ran = _pytest(tmp_path / "tests")
    assert "1 failed" in ran.stdout, ran.stdout + ran.stderr
    line = _printed_replay(ran.stdout)
    again = _dst(tmp_path / "tests", line)
    assert again.returncode == 1, again.stderr
    assert again.stdout.startswith("identical: "), again.stdout
