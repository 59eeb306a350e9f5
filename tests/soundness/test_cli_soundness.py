"""The command as a user meets it across processes: one seed is one trace on any machine,
the determinism check sees hash order, broken scenarios and hung seeds are one line and
exit 4, Ctrl-C stops cleanly with the command that continues, and --out is checked first.

Most cases run ``python -m dst`` in a child process, as a user would, with a time
limit, so that a regression fails the test instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from contextlib import closing
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from dst.cli import main
from dst.trace.model import current_hash_seed

#: Generous bound on a child process: each case takes a few seconds when it is right.
LIMIT = 120

#: Logs which of four strings a set yields first: "d" under hash seeds 0 and 1,
#: "c" under 2 and 5.  Its end check always fails, so every seed keeps its trace.
SET_ORDER = '''
import structlog
from dst import Scenario

log = structlog.get_logger()
scenario = Scenario("setorder", doc="logs the first string of a set")
scenario.switch("fail", True, doc="an end check that always fails, to keep each trace")


@scenario.setup
def setup(sim, config):
    async def worker(env):
        await env.store.get("x")
        log.info("order", first=next(iter({"a", "b", "c", "d"})))

    sim.process("worker", worker, stores=["db"])
    return config["fail"]


@scenario.at_end("Kept")
def kept(fail):
    return not fail or "failing on purpose, so that the trace is written"
'''


def _env(**changes: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def dst(cwd: Path, *args: str, hash_seed: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m dst ARGS`` in ``cwd``, started under ``PYTHONHASHSEED=hash_seed``."""
    return subprocess.run([sys.executable, "-m", "dst", *args], capture_output=True, text=True,
                          timeout=LIMIT, cwd=cwd, env=_env(PYTHONHASHSEED=hash_seed))


def _write(path: Path, source: str) -> Path:
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


def _one_error_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: ") and "Traceback" not in stderr, stderr
    return lines[0]


# -- 1. a seed means the same trace in every process -------------------------------------


def test_a_seed_gives_the_same_trace_bytes_whatever_hash_seed_the_caller_has(
    tmp_path: Path,
) -> None:
    _write(tmp_path / "order.py", SET_ORDER)
    traces = []
    for caller in ("1", "2"):  # the set starts with "d" under one, "c" under the other
        out = f"out{caller}"
        done = dst(tmp_path, "run", "order.py", "--seed", "0", "--out", out, hash_seed=caller)
        assert done.returncode == 1, done.stderr
        traces.append((tmp_path / out / "setorder-0.jsonl").read_bytes())
    assert traces[0] == traces[1]
    header = json.loads(traces[0].splitlines()[0])
    assert header["hash_seed"] == 0


def _trace_under(tmp_path: Path, hash_seed: int) -> Path:
    """A failing trace of SET_ORDER recorded through the library under ``hash_seed``."""
    _write(tmp_path / "order.py", SET_ORDER)
    path = tmp_path / f"recorded-{hash_seed}.jsonl"
    code = ("from dst.registry import load\n"
            "from dst.runner.single import run_one\n"
            "from dst.trace.codec import write_trace\n"
            "s = load('order.py')\n"
            f"write_trace(run_one(s, s.config(), 0).trace(), {str(path)!r})\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=LIMIT, cwd=tmp_path,
                   env=_env(PYTHONHASHSEED=str(hash_seed)))
    return path


def test_replay_runs_under_the_hash_seed_the_trace_was_recorded_under(tmp_path: Path) -> None:
    path = _trace_under(tmp_path, 5)  # "c" first under 5, "d" under the caller's 0
    assert json.loads(path.read_text().splitlines()[0])["hash_seed"] == 5
    done = dst(tmp_path, "replay", path.name, "--scenario", "order.py", hash_seed="0")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.startswith("identical: "), done.stdout


def test_a_replay_in_a_process_under_another_hash_seed_is_refused_with_the_way_out(
    tmp_path: Path,
) -> None:
    recorded = 7 if current_hash_seed() != 7 else 8
    path = _trace_under(tmp_path, recorded)
    result = CliRunner().invoke(main, ["replay", str(path), "--scenario",
                                       str(tmp_path / "order.py")])
    assert result.exit_code == 2, result.output
    line = _one_error_line(result.stderr)
    assert f"PYTHONHASHSEED={recorded} dst replay {path}" in line, line


# -- 2. --check-determinism sees hash order -----------------------------------------------


@pytest.mark.parametrize("workers", ["1", "2"])
def test_check_determinism_reports_a_run_that_follows_the_order_of_a_set_of_strings(
    tmp_path: Path, workers: str,
) -> None:
    _write(tmp_path / "order.py", SET_ORDER)
    done = dst(tmp_path, "run", "order.py", "-c", "fail=false", "--seeds", "3",
               "--workers", workers, "--check-determinism", "--out", "out")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "NONDETERMINISTIC seed 0: record 2 differs in another process" in done.stdout
    assert '"first":"d"' in done.stdout and '"first":"c"' in done.stdout
    assert "determinism: 0 of 3 seeds replayed identically" in done.stdout


# -- 3. errors in the user's own code ------------------------------------------------------


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def _broken(result: Result, *fragments: str) -> str:
    """Exit 4, one line on stderr, no traceback: the scenario itself is broken."""
    assert result.exit_code == 4, (result.exit_code, result.output)
    assert isinstance(result.exception, SystemExit)
    line = _one_error_line(result.stderr)
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    return line


def test_a_scenario_file_with_a_syntax_error_names_its_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "bank.py", """
        from dst import Scenario
        scenario = Scenario("bank", doc="x")
        def withdraw(:
            pass
    """)
    _broken(invoke("run", str(path), "--out", str(tmp_path / "out")),
            f"scenario {path} failed to import: SyntaxError at {path}:4")


def test_a_scenario_file_whose_import_fails_names_its_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "bank.py", """
        from dst import Scenario
        import no_such_module_for_dst_tests
    """)
    _broken(invoke("run", str(path), "--out", str(tmp_path / "out")),
            f"ModuleNotFoundError at {path}:3", "no_such_module_for_dst_tests")


RAISING = '''
from dst import Scenario

scenario = Scenario("bank", doc="an invariant and a setup that raise")
scenario.switch("broken", "invariant", choices=["invariant", "setup"])


@scenario.setup
def setup(sim, config):
    if config["broken"] == "setup":
        raise KeyError("teller")
    db = sim.store("db")

    async def worker(env):
        await env.store.put("x", 1)

    sim.process("worker", worker, stores=["db"])
    return db


@scenario.invariant("NoOverdraft")
def no_overdraft(db):
    return 100 / (db.peek("x") or 0) > 0
'''


@pytest.mark.parametrize("workers", ["1", "2"])
def test_an_invariant_that_raises_is_one_line_naming_it_its_line_and_seed(
    tmp_path: Path, workers: str,
) -> None:
    path = _write(tmp_path / "bank.py", RAISING)
    line = _broken(invoke("run", str(path), "--seeds", "300", "--workers", workers,
                          "--out", str(tmp_path / "out")),
                   "invariant NoOverdraft", "ZeroDivisionError", f"at {path}:23", "fix the check")
    # Every seed raises; with two workers, whichever chunk reports first names its seed.
    seed = re.search(r"\(seed (\d+)\)", line)
    assert seed is not None and line.endswith(f"--seed {seed.group(1)}"), line


def test_a_setup_that_raises_is_one_line_naming_its_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "bank.py", RAISING)
    _broken(invoke("run", str(path), "-c", "broken=setup", "--seeds", "3",
                   "--out", str(tmp_path / "out")),
            "setup of bank raised KeyError: 'teller'", f"at {path}:11", "(seed 0)",
            f"dst run {path} -c broken=setup --seed 0")


def test_the_exit_status_of_a_broken_scenario_is_documented_in_help() -> None:
    shown = invoke("--help").stdout
    assert "4    the scenario itself is broken" in shown
    assert "130  interrupted by Ctrl-C" in shown


# -- 4. Ctrl-C -----------------------------------------------------------------------------


def _done_in(db: Path) -> int:
    """Seeds recorded as done so far (0 while the database or its tables are not there yet:
    in its write-ahead mode the file exists a moment before the run's schema is in it)."""
    if not db.exists():
        return 0
    with closing(sqlite3.connect(db)) as conn:
        try:
            return int(conn.execute("SELECT COALESCE(SUM(stop - start), 0) FROM chunks")
                       .fetchone()[0])
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc):
                raise
            return 0


@pytest.mark.parametrize("workers", ["1", "2"])
def test_ctrl_c_stops_cleanly_summarises_and_prints_the_command_that_continues(
    tmp_path: Path, workers: str,
) -> None:
    args = ["run", "counter", "-c", "cas=false", "--seeds", "10000000", "--workers", workers,
            "--out", "out"]
    proc = subprocess.Popen([sys.executable, "-m", "dst", *args], cwd=tmp_path, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    try:
        waited = 0
        while _done_in(tmp_path / "out" / "results.sqlite") == 0 and proc.poll() is None:
            assert waited < LIMIT * 10, "no chunk was recorded"
            time.sleep(0.1)
            waited += 1
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=LIMIT)
    finally:
        proc.kill()
    assert proc.returncode == 130, stdout[-2000:] + stderr
    assert "Traceback" not in stderr and stderr == "", stderr
    summary = [line for line in stdout.splitlines() if line.startswith("counter [")]
    assert len(summary) == 1 and " runs, " in summary[0], stdout[-2000:]
    runs = int(summary[0].split(": ", 1)[1].split(" runs")[0].replace(",", ""))
    assert runs == _done_in(tmp_path / "out" / "results.sqlite") > 0
    # --workers given is --workers repeated: the default is the machine's cores.
    again = f"dst run counter -c cas=false --seeds 10000000 --workers {workers} --out out --resume"
    assert f"interrupted: the seeds finished so far are recorded; continue with: {again}" \
        in stdout

    resumed = dst(tmp_path, "run", "counter", "-c", "cas=false", "--seeds", str(runs + 10),
                  "--out", "out", "--resume", "--json")
    doc = json.loads(resumed.stdout)
    assert (doc["resumed"], doc["runs"]) == (runs, runs + 10)


# -- 5. a worker that stops answering --------------------------------------------------------

HANGING = '''
import os
from dst import Scenario

scenario = Scenario("spin", doc="seed 3 spins without awaiting while a flag file exists")


@scenario.setup
def setup(sim, config):
    async def worker(env):
        await env.store.get("x")
        if sim.seed == 3 and os.path.exists({flag!r}):
            while True:  # nothing inside the run can preempt this
                pass

    sim.process("worker", worker, stores=["db"])
'''


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_seed_that_stops_answering_is_stopped_reported_and_left_for_resume(
    tmp_path: Path, workers: str,
) -> None:
    flag = tmp_path / "spin-now"
    flag.touch()
    _write(tmp_path / "spin.py", HANGING.format(flag=str(flag)))
    done = dst(tmp_path, "run", "spin.py", "--seeds", "10", "--workers", workers,
               "--seed-timeout", "1s", "--out", "out")
    assert done.returncode == 4, done.stdout + done.stderr
    line = _one_error_line(done.stderr)
    assert "seed 3 stopped answering" in line and "dst run spin.py --seed 3" in line, line
    assert "not run: seeds 0..9 were in flight" in done.stdout, done.stdout
    assert "--resume" in done.stdout

    flag.unlink()
    resumed = dst(tmp_path, "run", "spin.py", "--seeds", "10", "--out", "out", "--resume",
                  "--json")
    doc = json.loads(resumed.stdout)
    assert (doc["resumed"], doc["runs"]) == (0, 10)  # the seeds in flight were not recorded


def test_a_run_for_a_duration_does_not_wait_for_a_seed_that_never_finishes(
    tmp_path: Path,
) -> None:
    """The default seed timeout (60s) is beyond LIMIT: only --for can end this run in time."""
    flag = tmp_path / "spin-now"
    flag.touch()
    _write(tmp_path / "spin.py", HANGING.format(flag=str(flag)))
    done = dst(tmp_path, "run", "spin.py", "--seeds", "10", "--for", "1s", "--out", "out")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "not run: seeds 0..9 were in flight" in done.stdout, done.stdout


def test_a_worker_killed_by_the_code_under_test_is_reported_naming_the_seed(
    tmp_path: Path,
) -> None:
    path = _write(tmp_path / "quit.py", '''
        import os
        from dst import Scenario

        scenario = Scenario("quit", doc="seed 2 ends its own process")


        @scenario.setup
        def setup(sim, config):
            async def worker(env):
                await env.store.get("x")
                if sim.seed == 2:
                    os._exit(3)

            sim.process("worker", worker, stores=["db"])
    ''')
    done = dst(tmp_path, "run", path.name, "--seeds", "5", "--out", "out")
    assert done.returncode == 4, done.stdout + done.stderr
    line = _one_error_line(done.stderr)
    assert "seed 2: its worker process exited with status 3" in line, line


# -- 6. --out is checked before any seed runs -----------------------------------------------


def _refused_before_running(result: Result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    line = _one_error_line(result.stderr)
    for fragment in fragments:
        assert fragment in line, (fragment, line)


def test_an_out_that_is_a_file_is_refused_with_the_way_out(tmp_path: Path) -> None:
    target = tmp_path / "a-file"
    target.write_text("not a directory")
    _refused_before_running(invoke("run", "counter", "--out", str(target), "--json"),
                            f"--out {target} is a file", "give --out a directory")


def test_an_out_below_a_file_is_refused_with_the_way_out(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    target = tmp_path / "a-file" / "traces"
    _refused_before_running(invoke("run", "counter", "--out", str(target)),
                            f"--out {target} cannot be created", "give --out a directory")


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="permissions do not stop root")
def test_an_out_that_is_not_writable_is_refused_with_the_way_out(tmp_path: Path) -> None:
    target = tmp_path / "locked"
    target.mkdir()
    target.chmod(0o555)
    try:
        _refused_before_running(invoke("run", "counter", "--out", str(target)),
                                f"--out {target} is not writable", "give --out a directory")
    finally:
        target.chmod(0o755)


@pytest.mark.parametrize("command", [
    ["run", "counter", "--seeds", "1"],
    ["explore", "counter"],
    ["table", "counter", "--vary", "cas"],
    ["conformance", "approval"],
])
def test_every_command_with_an_out_refuses_a_file_in_one_line(
        tmp_path: Path, command: list[str]) -> None:
    target = tmp_path / "a-file"
    target.write_text("not a directory")
    _refused_before_running(invoke(*command, "--out", str(target)),
                            f"--out {target} is a file", "give --out a directory")


@pytest.mark.parametrize("command", [["explore", "counter"], ["table", "approval"]])
def test_a_switch_that_is_not_key_value_is_one_line(command: list[str]) -> None:
    result = invoke(*command, "-c", "cas")
    assert result.exit_code == 2, result.output
    assert "'cas' is not key=value" in _one_error_line(result.stderr)
