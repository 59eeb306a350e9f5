"""Ctrl-C early in `dst run`: while its workers start, before any result, is a clean stop.

Whenever Ctrl-C lands, `dst run` stops, keeps every finished seed, prints the summary
and the command that continues, and exits 130; the continuation then runs every seed
not recorded, and none that is.  The moments here come before the first result: as
the run is recorded, and inside the start of the first and of the second worker (a
launcher sends the Ctrl-C from the start itself, so the moment is exact).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import closing
from functools import partial
from pathlib import Path

import pytest

from dst.runner.results import ResultsDB

#: Generous: each command takes a second or two on an idle machine.
LIMIT = 60
#: Enough that the seeds cannot all finish while the test waits to press Ctrl-C, even when a
#: loaded machine holds it back for a moment (two workers run 400 in a fifth of a second).
SEEDS = 3000

NOTED = '''
from dst import Env, Scenario, Sim

scenario = Scenario("noted", doc="notes every seed it runs")


async def worker(env: Env) -> None:
    for i in range(6):
        await env.store.put("x", i)


@scenario.setup
def setup(sim: Sim, config: dict) -> object:
    with open({log!r}, "a") as fh:
        fh.write(f"{{sim.seed}}\\n")
    sim.process("worker", worker, stores=["db"])
    return sim.seed


@scenario.invariant("Fine")
def fine(seed) -> bool:
    return True
'''

#: ``dst`` itself, with Ctrl-C sent to itself from inside the Nth process start
#: (``SIGINT_AT_START``): the moment a worker is being started, exactly.
LAUNCHER = '''
import multiprocessing.process
import os
import signal

from dst.cli import main

nth = int(os.environ["SIGINT_AT_START"])
real_start = multiprocessing.process.BaseProcess.start
starts = 0


def start(self):
    global starts
    starts += 1
    if starts == nth:
        os.kill(os.getpid(), signal.SIGINT)
    real_start(self)


multiprocessing.process.BaseProcess.start = start
main()
'''

INTERRUPTED = "interrupted: the seeds finished so far are recorded; continue with: "


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DST_")}
    env["PYTHONHASHSEED"] = "0"  # what dst pins: no re-execution, the launcher stays
    env.update(extra)
    return env


def _runs_recorded(out: Path) -> int:
    try:
        with closing(sqlite3.connect(out / "results.sqlite")) as db:
            return int(db.execute("SELECT count(*) FROM runs").fetchone()[0])
    except sqlite3.Error:
        return 0


def _ran(log: Path) -> list[int]:
    """Seeds run so far, in the order they ran, then forget them."""
    if not log.exists():
        return []
    seeds = [int(s) for s in log.read_text().split()]
    log.unlink()
    return seeds


def _done(tmp_path: Path) -> set[int]:
    with ResultsDB(tmp_path / "out") as db:  # every run of one key: the file's, as dst run made it
        keys = {row.run_key for row in db.runs()}
        return {s for key in keys for a, b in db.done_ranges(key) for s in range(a, b)}


def _check_interrupted(proc: subprocess.CompletedProcess[str]) -> list[str]:
    """Exit 130, the summary, and the command that continues; return its arguments."""
    assert proc.returncode == 130, proc.stdout[-2000:] + proc.stderr
    assert "Traceback" not in proc.stderr and "error:" not in proc.stderr, proc.stderr
    assert any(line.startswith("noted []: ") and " runs" in line
               for line in proc.stdout.splitlines()), proc.stdout
    [line] = [line for line in proc.stdout.splitlines() if line.startswith(INTERRUPTED)]
    again = shlex.split(line[len(INTERRUPTED):])
    assert again == ["dst", "run", "noted.py", "--seeds", str(SEEDS), "--workers", "2",
                     "--no-shrink", "--out", "out", "--resume"], line
    return again[2:]


def _interrupt_on_start(tmp_path: Path, args: list[str],
                        nth: int) -> subprocess.CompletedProcess[str]:
    (tmp_path / "launch.py").write_text(LAUNCHER, encoding="utf-8")
    return subprocess.run([sys.executable, "launch.py", "run", *args], cwd=tmp_path,
                          env=_env(SIGINT_AT_START=str(nth)), capture_output=True, text=True,
                          timeout=LIMIT)


def _interrupt_once_recorded(tmp_path: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    """Ctrl-C as soon as this invocation's row is in the runs table: before any result."""
    out = tmp_path / "out"
    before = _runs_recorded(out)
    proc = subprocess.Popen([sys.executable, "-m", "dst", "run", *args], cwd=tmp_path,
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        began = time.monotonic()
        while _runs_recorded(out) == before:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() - began < LIMIT, "the run was never recorded"
            time.sleep(0.005)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=LIMIT)
    finally:
        proc.kill()
        proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX signals, fork")
def test_ctrl_c_while_workers_start_stops_cleanly_and_resume_loses_and_repeats_nothing(
    tmp_path: Path,
) -> None:
    log = tmp_path / "ran.txt"
    (tmp_path / "noted.py").write_text(NOTED.format(log=str(log)), encoding="utf-8")
    args = ["noted.py", "--seeds", str(SEEDS), "--workers", "2", "--no-shrink", "--out", "out"]

    # Three early moments in a row, each continuing the one before with the command
    # it printed: inside the first worker's start, inside the second's, and as soon as
    # the run is recorded (before any worker has a result).
    moments: list[Callable[[list[str]], subprocess.CompletedProcess[str]]] = [
        partial(_interrupt_on_start, tmp_path, nth=1),
        partial(_interrupt_on_start, tmp_path, nth=2),
        partial(_interrupt_once_recorded, tmp_path)]
    for interrupt in moments:
        recorded = _done(tmp_path) if (tmp_path / "out").exists() else set()
        proc = interrupt(args)
        args = _check_interrupted(proc)
        now = _ran(log)
        assert not set(now) & recorded, "a seed recorded earlier ran again"
        assert len(now) == len(set(now)), "a seed ran twice in one invocation"
        assert _done(tmp_path) <= recorded | set(now), "a seed is recorded that never ran"
        assert _done(tmp_path) != set(range(SEEDS)), "the run ended before Ctrl-C"

    recorded = _done(tmp_path)
    with ResultsDB(tmp_path / "out") as db:
        assert [row.status for row in db.runs()] == ["interrupted"] * 3
    final = subprocess.run([sys.executable, "-m", "dst", "run", *args, "--json"],
                           cwd=tmp_path, env=_env(), capture_output=True, text=True,
                           timeout=LIMIT)
    assert final.returncode == 0, final.stderr
    doc = json.loads(final.stdout)
    after = _ran(log)
    assert not set(after) & recorded  # nothing recorded ran again
    assert sorted(after) == sorted(set(range(SEEDS)) - recorded)  # the rest, each once
    assert (doc["runs"], doc["resumed"], doc["interrupted"]) == (SEEDS, len(recorded), False)
    assert _done(tmp_path) == set(range(SEEDS))
