"""Seeds on a Dask cluster: a real scheduler and two real workers on loopback.

The cluster tests start ``dask scheduler`` and two ``dask worker`` processes
(``--nthreads 1``, ``PYTHONHASHSEED=0``, as docs/cluster.md tells users to) and
run seeds of the shipped ``counter`` scenario through ``run_on_cluster``, the way
``dst run --cluster`` does: every chunk goes through a :class:`Recorder` into
a results database.  They skip where Dask distributed is not installed
(``pip install 'dst[cluster]'``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import pytest

from dst.errors import UsageError
from dst.registry import load
from dst.runner.bulk import CHUNK, BulkSummary, SeedOutcome
from dst.runner.cluster import connect, parse_address, run_on_cluster
from dst.runner.recorder import Recorder
from dst.runner.results import DB_NAME, run_key

HAVE_DISTRIBUTED = importlib.util.find_spec("distributed") is not None
needs_dask = pytest.mark.skipif(
    not HAVE_DISTRIBUTED, reason="Dask distributed is not installed (pip install 'dst[cluster]')")

#: Seeds of the killed-worker run: ten chunks, so that one worker still has
#: chunks to run after the other is killed.
SEEDS = 10 * CHUNK
#: counter with a blind put and one increment per worker: about half the seeds fail.
SWITCHES = {"cas": "false", "increments": "1"}
#: The checkout, for the local run to import this module from.
ROOT = Path(__file__).resolve().parents[1]
#: Generous: two cores shared with other work can take long to start a Python process.
STARTUP = 90.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Cluster:
    address: str
    workers: list[subprocess.Popen[bytes]]


def _dask(*args: str, env: dict[str, str], cwd: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "dask", *args], cwd=cwd, env=env,
                                stdout=out, stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    where = tmp_path_factory.mktemp("dask")
    address = f"tcp://127.0.0.1:{_free_port()}"
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    procs = [_dask("scheduler", "--host", "127.0.0.1", "--port", address.rsplit(":", 1)[1],
                   "--no-dashboard", env=env, cwd=where, log=where / "scheduler.log")]
    try:
        client = connect(address, timeout=STARTUP)
        try:
            for i in range(2):
                procs.append(_dask("worker", address, "--nthreads", "1", "--no-nanny",
                                   "--no-dashboard", "--death-timeout", "60",
                                   "--local-directory", str(where), env=env, cwd=where,
                                   log=where / f"worker-{i}.log"))
            client.wait_for_workers(2, timeout=STARTUP)
        finally:
            client.close()
        yield Cluster(address, procs[1:])
    finally:
        for proc in reversed(procs):
            proc.kill()
            proc.wait(30)


def outcome_row(o: SeedOutcome) -> list[object]:
    """What is compared of a seed, here and in the local run: all a run reports, and its
    trace byte for byte (by digest)."""
    digest = o.trace_text and hashlib.sha256(o.trace_text.encode()).hexdigest()
    return [o.seed, o.verdict, list(o.violated), o.steps, o.ended, o.signature, digest]


_LOCAL = """
import json, sys
from dst.registry import load
from dst.runner.bulk import run_bulk
from tests.test_cluster import outcome_row
rows = []
run_bulk("counter", load("counter").config(json.loads(sys.argv[1])), range(int(sys.argv[2])),
         workers=2, on_chunk=lambda summary, outcomes: rows.extend(map(outcome_row, outcomes)))
print(json.dumps(rows))
"""


def _local_run() -> list[list[object]]:
    """The same seeds on two local worker processes, under hash seed 0 as ``dst run``'s."""
    done = subprocess.run([sys.executable, "-c", _LOCAL, json.dumps(SWITCHES), str(SEEDS)],
                          env={**os.environ, "PYTHONHASHSEED": "0"}, cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    rows: list[list[object]] = json.loads(done.stdout)
    return rows


@needs_dask
def test_a_scenario_missing_on_the_workers_is_one_line_before_any_seed_runs(
        cluster: Cluster, tmp_path: Path) -> None:
    gone = tmp_path / "gone.py"
    with pytest.raises(UsageError) as info:
        run_on_cluster(cluster.address, str(gone), {}, range(10))
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("Dask worker tcp://127.0.0.1:")
    assert f"no scenario file {gone}" in message


@needs_dask
def test_workers_under_another_hash_seed_are_refused_with_how_to_start_them(
        cluster: Cluster) -> None:
    # The workers run under hash seed 0; a run that wants hash seed 1 must refuse them
    # rather than record traces that name the wrong hash seed.
    with pytest.raises(UsageError, match=r"start workers as `PYTHONHASHSEED=1 dask worker "
                                         + cluster.address):
        run_on_cluster(cluster.address, "counter", {}, range(10), hash_seed=1)


@needs_dask
def test_a_worker_killed_mid_run_loses_no_seed_and_each_is_recorded_once(
        cluster: Cluster, tmp_path: Path) -> None:
    config = load("counter").config(SWITCHES)
    key = run_key("counter", config, "random")
    recorder = Recorder(tmp_path, "counter", key)
    rows: list[list[object]] = []
    victim = cluster.workers[1]
    killed: list[int] = []

    def on_chunk(summary: BulkSummary, outcomes: list[SeedOutcome]) -> None:
        recorder.chunk_done(summary, outcomes)  # what `dst run` does with each chunk
        rows.extend(json.loads(json.dumps([outcome_row(o) for o in outcomes])))
        if not killed and summary.runs >= 2 * CHUNK:
            # The chunks in flight outnumber the workers: the victim is busy with one.
            os.kill(victim.pid, signal.SIGKILL)
            killed.append(victim.pid)

    try:
        # The deadline only turns a chunk lost for good into a failure instead of a hang.
        summary = run_on_cluster(cluster.address, "counter", config, range(SEEDS),
                                 on_chunk=on_chunk, summary=BulkSummary(keep_traces=False),
                                 deadline=time.monotonic() + 10 * STARTUP)
    finally:
        recorder.close()
    assert killed
    assert victim.wait(30) == -signal.SIGKILL
    assert (summary.runs, summary.not_run, summary.stalled) == (SEEDS, [], None)

    # Every seed exactly once: in what came back, and in the database, whose chunks
    # tile 0..SEEDS-1 without overlap.
    assert [r[0] for r in rows] == list(range(SEEDS))
    with closing(sqlite3.connect(tmp_path / DB_NAME)) as db:
        chunks = sorted(db.execute("SELECT start, stop, runs FROM chunks WHERE run_key = ?",
                                   (key,)))
    assert [c[0] for c in chunks] == [0, *[c[1] for c in chunks[:-1]]]
    assert (chunks[-1][1], sum(c[2] for c in chunks)) == (SEEDS, SEEDS)

    # What a local run of the same seeds gives, trace for trace.
    local = _local_run()
    assert rows == local
    failed = [r[0] for r in rows if r[1] == "fail"]
    assert 0 < len(failed) < SEEDS
    assert summary.failed == len(failed)


def test_a_cluster_address_that_is_not_tcp_host_port_is_refused_in_one_line() -> None:
    for bad in ("localhost:8786", "tcp://localhost", "http://h:8786", "tcp://h:0",
                "tcp://h:70000", "tcp://h:8786/x"):
        with pytest.raises(UsageError, match=r"is not a Dask scheduler address "
                                             r"tcp://HOST:PORT"):
            parse_address(bad)


def test_without_distributed_the_cluster_says_what_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import fails as if missing
    with pytest.raises(UsageError, match=r"pip install 'dst\[cluster\]'"):
        parse_address("tcp://127.0.0.1:8786")


@needs_dask
def test_an_unreachable_scheduler_is_one_line_saying_how_to_start_one() -> None:
    address = f"tcp://127.0.0.1:{_free_port()}"  # nothing listens there
    state = random.getstate()
    with pytest.raises(UsageError) as info:
        connect(address, timeout=1)
    # Dask's retries draw their jitter from the global generator; no simulation ran.
    random.setstate(state)
    message = str(info.value)
    assert message.startswith(f"cannot reach Dask scheduler at {address} (")
    assert message.endswith("; start one with `dask scheduler`")
    assert "\n" not in message


def _dst_json(*args: str, cwd: Path) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-m", "dst", *args, "--json"], cwd=cwd,
                          capture_output=True, text=True, timeout=10 * STARTUP)
    assert done.returncode in (0, 1), done.stderr
    doc: dict[str, object] = json.loads(done.stdout)
    return doc


@needs_dask
def test_dst_run_with_cluster_reports_what_a_local_run_of_the_same_seeds_does(
        cluster: Cluster, tmp_path: Path) -> None:
    switches = [a for k, v in SWITCHES.items() for a in ("-c", f"{k}={v}")]
    seeds = ["--seeds", str(2 * CHUNK)]
    there = _dst_json("run", "counter", *switches, *seeds, "--cluster", cluster.address,
                      "--out", str(tmp_path / "cluster"), cwd=tmp_path)
    here = _dst_json("run", "counter", *switches, *seeds, "--workers", "1",
                     "--out", str(tmp_path / "local"), cwd=tmp_path)
    assert (there["runs"], there["failed"]) == (here["runs"], here["failed"])

    def groups(doc: dict[str, object]) -> list[dict[str, object]]:
        listed = doc["groups"]
        assert isinstance(listed, list)
        # Where the kept traces are differs (two --out directories); nothing else may.
        return [{k: v for k, v in g.items() if k != "traces"} for g in listed]

    assert groups(there) == groups(here)
    assert 0 < int(str(there["failed"])) < 2 * CHUNK
    # The resume command keeps running on the cluster.
    listed = _dst_json("runs", "--out", str(tmp_path / "cluster"), cwd=tmp_path)
    assert f"--cluster {cluster.address}" in json.dumps(listed)
