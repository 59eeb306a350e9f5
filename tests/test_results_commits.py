"""The results database commits without an fsync each time, and loses nothing on exit.

It runs in SQLite's write-ahead-log mode with ``synchronous=NORMAL``: a commit is
in the file at once (another connection sees it), and the log is copied into the
database when the run closes it, so the database file alone holds every run.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

from dst.runner.results import ResultsDB

LIMIT = 120


def test_a_finished_run_is_in_the_database_file_alone(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DST_")}
    for seed in ("0", "1"):
        done = subprocess.run([sys.executable, "-m", "dst", "run", "counter", "--seed", seed,
                               "--out", str(tmp_path / "out")], capture_output=True, text=True,
                              timeout=LIMIT, cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["results.sqlite"]
    copy = tmp_path / "copy.sqlite"
    shutil.copy(tmp_path / "out" / "results.sqlite", copy)
    with closing(sqlite3.connect(copy)) as db:
        assert db.execute("SELECT seeds, done, status FROM runs ORDER BY id").fetchall() == [
            ("0..0", 1, "done"), ("1..1", 1, "done")]
        assert db.execute("SELECT start, stop FROM chunks ORDER BY start").fetchall() == [
            (0, 1), (1, 2)]


def test_a_commit_is_seen_by_another_connection_before_the_database_is_closed(
    tmp_path: Path,
) -> None:
    with ResultsDB(tmp_path) as db:
        run_id = db.start_run("k", "counter", {}, "random", "0..9", None, "dst run", 0)
        with closing(sqlite3.connect(tmp_path / "results.sqlite")) as other:
            assert other.execute("PRAGMA journal_mode").fetchone() == ("wal",)
            assert other.execute("SELECT id, status FROM runs").fetchall() == [
                (run_id, "running")]
        with ResultsDB(tmp_path, create=False) as reader:  # as `dst runs` opens it
            assert [r.status for r in reader.runs()] == ["running"]
