"""Every SQLite connection dst opens is closed when its command ends, however it ends.

Python 3.13 warns (``ResourceWarning: unclosed database``) about a connection left to
the garbage collector, and the suite turns warnings into errors; which test then fails
depends on when the collector runs.  So this checks closing itself, on every Python:
each connection opened during a command must be closed by the time it returns, on its
success and on its error paths.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from dst.cli import main
from dst.runtime import SQLiteStore


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[sqlite3.Connection]]:
    """Every connection ``sqlite3.connect`` makes while the test runs."""
    made: list[sqlite3.Connection] = []
    connect = sqlite3.connect

    def tracked(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        made.append(conn)
        return conn

    monkeypatch.setattr(sqlite3, "connect", tracked)
    yield made


def _still_open(made: list[sqlite3.Connection]) -> list[sqlite3.Connection]:
    left = []
    for conn in made:
        try:
            conn.execute("SELECT 1")
        except sqlite3.ProgrammingError:  # closed
            continue
        left.append(conn)
    return left


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def test_a_run_and_dst_runs_close_the_results_database(
        tmp_path: Path, opened: list[sqlite3.Connection]) -> None:
    assert invoke("run", "counter", "-c", "cas=false", "--seeds", "30", "--out",
                  str(tmp_path)).exit_code == 1
    assert invoke("run", "counter", "--seeds", "30", "--out", str(tmp_path),
                  "--resume").exit_code == 0
    assert invoke("runs", "--out", str(tmp_path)).exit_code == 0
    assert opened and not _still_open(opened)


def test_a_database_that_is_not_one_is_refused_and_closed(
        tmp_path: Path, opened: list[sqlite3.Connection]) -> None:
    (tmp_path / "results.sqlite").write_bytes(b"not a database, " * 100)
    refused = invoke("run", "counter", "--seeds", "5", "--out", str(tmp_path))
    assert refused.exit_code == 2 and "cannot use the results database" in refused.stderr
    refused = invoke("runs", "--out", str(tmp_path))
    assert refused.exit_code == 2
    assert opened and not _still_open(opened)


def test_a_database_whose_tables_differ_is_refused_and_closed(
        tmp_path: Path, opened: list[sqlite3.Connection]) -> None:
    # The tables exist, so opening works; recording this run in them does not.
    with closing(sqlite3.connect(tmp_path / "results.sqlite")) as db:
        db.execute("CREATE TABLE runs (x TEXT)")
        db.commit()
    refused = invoke("run", "counter", "--seeds", "5", "--out", str(tmp_path))
    assert refused.exit_code == 2 and "cannot use the results database" in refused.stderr
    assert opened and not _still_open(opened)


def test_a_store_that_refuses_its_file_closes_its_connection(
        tmp_path: Path, opened: list[sqlite3.Connection]) -> None:
    (tmp_path / "store.db").write_bytes(b"not a database, " * 100)
    with pytest.raises(sqlite3.DatabaseError):
        SQLiteStore(tmp_path / "store.db")
    with SQLiteStore(tmp_path / "fine.db"):
        pass
    assert len(opened) == 2 and not _still_open(opened)
