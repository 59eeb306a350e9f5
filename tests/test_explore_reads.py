"""What dst explore reads of Python state: code objects, and nothing of an earlier search."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from dst.cli import main
from dst.explore.memory import MET

RACE = '''
import trio
import dst
{extra}

@dst.test(seeds=20)
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
    assert count == 2, f"lost update: count is {{count}}"
'''

#: A module global whose state no reader can take: a generator suspended in a for loop.
UNREADABLE = '''
def _numbers():
    for i in range(3):
        yield i


NUMBERS = _numbers()
next(NUMBERS)
'''


def _explore(ref: str) -> dict[str, object]:
    done = CliRunner().invoke(main, ["explore", ref, "--out", "explored", "--json"])
    assert done.exit_code == 1, done.output  # the lost update is found
    found: dict[str, object] = json.loads(done.stdout)
    return found


def test_a_dst_test_is_explored_with_reduction_though_its_wrapper_holds_code(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The small form keeps the body's code object; a code object is immutable, so it
    is read as where it was compiled, and the search keeps its reduction."""
    monkeypatch.chdir(tmp_path)
    Path("test_race.py").write_text(RACE.format(extra=""), encoding="utf-8")
    assert _explore("test_race.py::test_race")["no_reduction"] is None


def test_a_search_reads_nothing_an_earlier_search_left(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("test_unreadable.py").write_text(RACE.format(extra=UNREADABLE), encoding="utf-8")
    Path("test_plain.py").write_text(RACE.format(extra=""), encoding="utf-8")
    first = _explore("test_unreadable.py::test_race")
    assert first["no_reduction"] is not None  # its own module cannot be read
    # A search stopped (at a violation, or an unreadable state) between meeting a
    # module and reading it leaves the module's name with the writer.
    unreadable = next(name for name in sys.modules if name.endswith("test_unreadable"))
    MET.add(unreadable)
    assert _explore("test_plain.py::test_race")["no_reduction"] is None
