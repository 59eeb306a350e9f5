"""A Dask worker stopped while one of its seeds never finishes exits promptly.

A closing worker waits for the task in its thread, up to Dask's close timeout
(30 s): a seed that loops without ``await`` kept a SIGTERM'd worker alive that long,
then longer than anyone waited (it was killed).  dst's watchdog stops the chunk after
its current seed once the worker is closing and interrupts a seed that goes on
(``dst/runner/cluster_worker.py``).  Every port the scheduler and worker open stays on
the address they are given (``docs/cluster.md``).
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dst.runner.cluster import connect, run_on_cluster
from dst.runner.cluster_worker import CLOSE_GRACE, START_WORKER, binding
from tests.test_cluster import STARTUP, _free_port, needs_dask

#: Seed 3 never awaits again; the others finish at once.
SPIN = '''
from dst import Scenario

scenario = Scenario("spin", doc="seed 3 never awaits again")


async def spin(env, seed):
    await env.store.put("x", 1)
    if seed == 3:
        while True:
            pass


@scenario.setup
def setup(sim, config):
    sim.store("db")
    sim.process("p", lambda env: spin(env, sim.seed), stores=["db"])
'''


def _dask(tmp: Path, name: str, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    with (tmp / f"{name}.log").open("wb") as log:
        return subprocess.Popen([sys.executable, "-m", "dask", *args], cwd=tmp, env=env,
                                stdout=log, stderr=subprocess.STDOUT)


def _listening(pid: int) -> set[str]:
    """The local addresses of the TCP sockets process ``pid`` listens on (Linux)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            found = re.fullmatch(r"socket:\[(\d+)\]", os.readlink(fd))
        except OSError:
            continue
        if found:
            inodes.add(found.group(1))
    addresses = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                addresses.add(fields[1].split(":")[0])
    return addresses


@needs_dask
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_worker_stopped_during_a_seed_that_never_ends_exits_promptly(
        tmp_path: Path) -> None:
    (tmp_path / "spin.py").write_text(SPIN, encoding="utf-8")
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    # The commands of docs/cluster.md, on the loopback address.
    scheduler = _dask(tmp_path, "scheduler", "scheduler", "--host", "127.0.0.1", "--port",
                      str(port), "--dashboard-address", "127.0.0.1:0")
    worker = None
    state = random.getstate()
    try:
        # Dask's retries draw their jitter from the global generator while the
        # scheduler starts; no simulation ran.
        client = connect(address, timeout=STARTUP)
        try:
            worker = _dask(tmp_path, "worker", "worker", address, "--nthreads", "1",
                           "--no-nanny", "--host", "127.0.0.1",
                           "--dashboard-address", "127.0.0.1:0",
                           "--local-directory", str(tmp_path))
            client.wait_for_workers(1, timeout=STARTUP)
        finally:
            client.close()
            random.setstate(state)
        # Every port on the address given: none on 0.0.0.0 (00000000) or ::.
        for pid in (scheduler.pid, worker.pid):
            listening = _listening(pid)
            assert listening and listening <= {"0100007F"}, (pid, listening)

        summary = run_on_cluster(address, str(tmp_path / "spin.py"), {}, range(10),
                                 seed_timeout=2.0)
        assert summary.stalled and "seed 3" in summary.stalled  # it is still spinning

        began = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=10 + CLOSE_GRACE)
        except subprocess.TimeoutExpired:
            pytest.fail("the worker did not exit within 12s of SIGTERM: "
                        + (tmp_path / "worker.log").read_text(errors="replace")[-2000:])
        assert time.monotonic() - began < 10 + CLOSE_GRACE
    finally:
        for proc in (worker, scheduler):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(30)


def test_the_worker_command_dst_prints_binds_the_worker_to_its_own_address() -> None:
    assert binding("tcp://10.0.0.7:40341") == " --host 10.0.0.7 --dashboard-address 10.0.0.7:0"
    assert binding("tcp://[::1]:40341") == " --host ::1 --dashboard-address [::1]:0"
    assert binding(None) == binding("not an address") == ""
    line = START_WORKER.format(hash_seed=0, address="tcp://10.0.0.5:8786",
                               binding=binding("tcp://10.0.0.7:1"))
    assert line == ("PYTHONHASHSEED=0 dask worker tcp://10.0.0.5:8786 --nthreads 1 --no-nanny "
                    "--host 10.0.0.7 --dashboard-address 10.0.0.7:0")
