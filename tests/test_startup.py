"""Start-up: a command imports what it uses, and the hash seed costs one re-execution at most.

``dst --help`` lists every command without importing one (``dst.commands.COMMANDS``),
``dst run --help`` loads no kernel, and no command loads the specs, the explorer or
a command it does not run; a run or replay of a scenario that logs with structlog
imports structlog but not what structlog uses only later (rich, asyncio).  ``dst``
re-executes itself under hash seed 0 only when it
does not run under it already, before it imports the command line, and never twice.
``dst.testing`` runs everything in a process under hash seed 0 and says in one line
what it ran otherwise in one that is not.  What these cost in time is measured in
benchmarks/bench_startup.py, never asserted here.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import click
import pytest

import dst.commands
from dst import launcher, testing
from dst.cli import main
from tests.conftest import CHILD_PYTEST_ADDOPTS

ROOT = Path(__file__).parent.parent
PINNED = ROOT / "traces" / "counter-lost-update.jsonl"
LIMIT = 120

#: Runs the dst program in this interpreter (under the hash seed it was started with, so
#: with PYTHONHASHSEED=0 it never re-executes) and reports what it imported.
PROBE = '''
import contextlib, io, json, sys
sys.argv = ["dst", *json.loads(sys.argv[1])]
out = io.StringIO()
code = None
with contextlib.redirect_stdout(out):
    try:
        from dst.launcher import main
        main()
    except SystemExit as exc:
        code = exc.code
import gc
sys.__stdout__.write(json.dumps({"code": code, "stdout": out.getvalue(),
                                 "modules": sorted(sys.modules),
                                 "frozen": gc.get_freeze_count()}))
'''

#: Never imported by a command that does not use them.
NEVER = ("dst.specs", "dst.commands.conformance", "dst.commands.explore", "dst.commands.check",
         "dst.commands.table", "dst.explore.exhaustive", "hypothesis", "dst.hypothesis")
#: Imported by structlog, which the counter scenario logs with, only to be used later:
#: rich (with pygments and importlib.metadata) renders an exception, asyncio serves
#: structlog's async methods; structlog imported after dst takes them on first use.
UNUSED_BY_A_RUN = ("rich", "pygments", "asyncio", "importlib.metadata")
#: Not imported by listing the commands or by a command's --help.
NOT_FOR_HELP = ("rich", "structlog", "trio", "dst.sim.kernel", "dst.scenario", "dst.registry",
                "dst.runner.bulk", "dst.testing")


def _env(**changes: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONHASHSEED", "PYTHONPROFILEIMPORTTIME") and not k.startswith("DST_")}
    for key, value in changes.items():
        if value is not None:
            env[key] = value
    return env


def probe(tmp_path: Path, *args: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(list(args))],
                          capture_output=True, text=True, timeout=LIMIT, cwd=tmp_path,
                          env=_env(PYTHONHASHSEED="0"))
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def _imported(modules: object, names: tuple[str, ...]) -> list[str]:
    assert isinstance(modules, list)
    return [m for m in modules if any(m == n or m.startswith(n + ".") for n in names)]


# -- what each command imports ------------------------------------------------------------


def test_help_lists_every_command_without_importing_one(tmp_path: Path) -> None:
    shown = probe(tmp_path, "--help")
    assert shown["code"] == 0
    listed = str(shown["stdout"]).split("Commands:\n", 1)[1].splitlines()
    assert [line.split()[0] for line in listed] == sorted({"list", "replay", "show",
                                                           *dst.commands.COMMANDS})
    assert _imported(shown["modules"], ("dst.commands.",)) == []
    assert _imported(shown["modules"], (*NEVER, *NOT_FOR_HELP)) == []


@pytest.mark.parametrize("command", ["run", "replay", "runs", "show", "list"])
def test_a_commands_help_imports_no_kernel(tmp_path: Path, command: str) -> None:
    shown = probe(tmp_path, command, "--help")
    assert shown["code"] == 0
    assert str(shown["stdout"]).startswith("Usage: dst " + command)
    assert _imported(shown["modules"], (*NEVER, *NOT_FOR_HELP)) == []


def test_replay_imports_what_a_replay_needs_and_no_other_command(tmp_path: Path) -> None:
    done = probe(tmp_path, "replay", str(PINNED))
    assert done["code"] == 1  # identical, and the recorded violation happened again
    assert str(done["stdout"]).startswith("identical: ")
    assert _imported(done["modules"], (*NEVER, "dst.commands.", "dst.runner.bulk",
                                       "dst.explore", "dst.runner.progress",
                                       "multiprocessing", *UNUSED_BY_A_RUN)) == []
    assert "structlog" in done["modules"]  # the counter scenario logs with it


def test_run_imports_no_specs_explorer_shrinker_or_junit_writer(tmp_path: Path) -> None:
    done = probe(tmp_path, "run", "counter", "--seed", "0", "--out", str(tmp_path / "out"))
    assert done["code"] == 0
    assert "1 run, 0 failed" in str(done["stdout"])
    assert _imported(done["modules"], (*NEVER, "dst.commands.shrink", "dst.explore.shrink",
                                       "dst.runner.cluster", "xml.etree", "dst.commands.pin",
                                       *UNUSED_BY_A_RUN)) == []
    assert "structlog" in done["modules"]


@pytest.mark.parametrize("args", [["replay", str(PINNED)], ["run", "counter", "--seed", "0"]])
def test_the_program_moves_its_start_up_out_of_the_collectors_way(
    tmp_path: Path, args: list[str],
) -> None:
    """A replay or a run of the ``dst`` program freezes what its start-up made
    (``gc.freeze``) before the seeds run; ``--help`` runs none and freezes nothing."""
    # What the interpreter itself freezes as it starts (375 objects on 3.12, none on
    # 3.11 and 3.13): --help must add nothing to it.
    bare = int(subprocess.run([sys.executable, "-c", "import gc; print(gc.get_freeze_count())"],
                              capture_output=True, text=True, check=True).stdout)
    assert probe(tmp_path, *args)["frozen"] > bare + 10_000
    assert probe(tmp_path, "run", "--help")["frozen"] == bare


def test_dst_called_from_python_leaves_the_callers_objects_to_the_collector() -> None:
    import gc

    before = gc.get_freeze_count()
    assert launcher._PROGRAM == [False]
    launcher.started()
    assert gc.get_freeze_count() == before


def test_a_scenario_that_does_not_log_with_structlog_runs_without_it(tmp_path: Path) -> None:
    (tmp_path / "quiet.py").write_text(
        "from typing import Any\n\nfrom dst import Env, Scenario, Sim\n\n"
        "scenario = Scenario('quiet', doc='a process that stores one value')\n\n\n"
        "@scenario.setup\ndef setup(sim: Sim, config: dict[str, Any]) -> Any:\n"
        "    db = sim.store('db')\n\n"
        "    async def main(env: Env) -> None:\n        await env.store.put('n', 1)\n\n"
        "    sim.process('worker', main, stores=['db'])\n    return db\n", encoding="utf-8")
    done = probe(tmp_path, "run", "quiet.py", "--seed", "0", "--out", str(tmp_path / "out"))
    assert done["code"] == 0
    assert "1 run, 0 failed" in str(done["stdout"])
    assert _imported(done["modules"], ("structlog", *UNUSED_BY_A_RUN)) == []


def test_the_commands_table_agrees_with_the_commands() -> None:
    """Each row is the first paragraph of its command's help: the line `dst --help` shows
    is the one the command would give at any terminal width."""
    modules = {info.name for info in pkgutil.iter_modules(dst.commands.__path__)
               if hasattr(importlib.import_module(f"dst.commands.{info.name}"), "command")}
    assert set(dst.commands.COMMANDS) == modules
    for name, summary in dst.commands.COMMANDS.items():
        real = dst.commands.load(name)
        assert real.name == name
        stand_in = click.Command(name, help=summary)
        for limit in range(10, 130):
            assert stand_in.get_short_help_str(limit) == real.get_short_help_str(limit), \
                (name, limit)


def test_a_command_is_imported_when_it_runs() -> None:
    ctx = click.Context(main)
    command = main.get_command(ctx, "runs")
    assert command is not None and command is dst.commands.load("runs")
    assert main.get_command(ctx, "no-such-command") is None


# -- the re-execution under hash seed 0 ---------------------------------------------------


def _console_script(tmp_path: Path) -> Path:
    """The ``dst`` script pip writes for pyproject's entry point."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    module, attr = scripts["project"]["scripts"]["dst"].split(":")
    assert (module, attr) == ("dst.launcher", "main")  # nothing heavy before the re-execution
    script = tmp_path / "bin" / "dst"
    script.parent.mkdir(exist_ok=True)
    script.write_text(f"#!{sys.executable}\nimport sys\nfrom {module} import {attr}\n"
                      f"if __name__ == '__main__':\n    sys.exit({attr}())\n", encoding="utf-8")
    return script


def started(tmp_path: Path, program: list[str], *args: str,
            hash_seed: str | None) -> tuple[subprocess.CompletedProcess[str], int, int]:
    """Run ``program ARGS`` under ``hash_seed``; how often dst.launcher and dst.cli were
    imported, across every interpreter the command started as (one per execution)."""
    done = subprocess.run([*program, *args], capture_output=True, text=True, timeout=LIMIT,
                          cwd=tmp_path, env=_env(PYTHONHASHSEED=hash_seed,
                                                 PYTHONPROFILEIMPORTTIME="1"))
    names = [line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
             if line.startswith("import time:")]
    done.stderr = "\n".join(line for line in done.stderr.splitlines()
                            if not line.startswith("import time:"))
    return done, names.count("dst.launcher"), names.count("dst.cli")


@pytest.mark.parametrize("how", ["python -m dst", "dst"])
def test_dst_reexecutes_once_when_the_hash_seed_is_not_0_and_never_when_it_is(
    tmp_path: Path, how: str,
) -> None:
    program = ([sys.executable, "-m", "dst"] if how == "python -m dst"
               else [sys.executable, str(_console_script(tmp_path))])
    outputs = []
    for hash_seed, executions in ((None, 2), ("7", 2), ("0", 1)):
        done, launched, cli = started(tmp_path, program, "run", "counter", "-c", "cas=false",
                                      "--seed", "0", "--out", f"out{hash_seed}",
                                      hash_seed=hash_seed)
        assert done.returncode == 1, done.stdout + done.stderr
        assert (launched, cli) == (executions, 1), hash_seed  # dst.cli once, after the exec
        header = json.loads((tmp_path / f"out{hash_seed}" / "counter-cas=false-0.jsonl")
                            .read_text()
                            .splitlines()[0])
        assert header["hash_seed"] == 0
        outputs.append(done.stdout.splitlines()[0])
    assert len(set(outputs)) == 1
    helped, _, _ = started(tmp_path, program, "--help", hash_seed=None)
    assert helped.stdout.startswith(f"Usage: {how} "), helped.stdout  # the name typed


def test_replay_reexecutes_under_the_hash_seed_its_trace_records(tmp_path: Path) -> None:
    trace = tmp_path / "under-5.jsonl"
    record = ("from dst.registry import load\n"
              "from dst.runner.single import run_one\n"
              "from dst.trace.codec import write_trace\n"
              "s = load('counter')\n"
              f"write_trace(run_one(s, s.config(), 0).trace(), {str(trace)!r})\n")
    subprocess.run([sys.executable, "-c", record], check=True, timeout=LIMIT, cwd=tmp_path,
                   env=_env(PYTHONHASHSEED="5"))
    assert json.loads(trace.read_text(encoding="utf-8").splitlines()[0])["hash_seed"] == 5
    for path, hash_seed, executions in ((PINNED, "0", 1), (PINNED, None, 2), (trace, "5", 1),
                                        (trace, "0", 2)):
        done, launched, cli = started(tmp_path, [sys.executable, "-m", "dst"], "replay",
                                      str(path), hash_seed=hash_seed)
        assert done.stdout.startswith("identical: "), done.stdout + done.stderr
        assert (launched, cli) == (executions, 1), (path.name, hash_seed)


def test_a_python_that_ignores_the_hash_seed_is_refused_after_one_try(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-E", "-m", "dst", "run", "counter", "--seed", "0"],
                          capture_output=True, text=True, timeout=LIMIT, cwd=tmp_path,
                          env=_env())
    assert done.returncode == 2
    assert done.stderr.startswith("error: python ignores PYTHONHASHSEED here (started with -E")
    assert len(done.stderr.splitlines()) == 1 and done.stdout == ""


@pytest.mark.parametrize(("argv", "trace"), [
    (["replay", "t.jsonl"], "t.jsonl"),
    (["replay", "--scenario", "bank.py", "t.jsonl"], "t.jsonl"),
    (["replay", "--scenario=bank.py", "--json", "t.jsonl"], "t.jsonl"),
    (["replay", "t.jsonl", "--scenario", "bank.py"], "t.jsonl"),
    (["replay", "--", "-t.jsonl"], "-t.jsonl"),
    (["replay", "--json"], None),
    (["run", "replay"], None),
    (["--help"], None),
    ([], None),
])
def test_the_launcher_finds_the_trace_of_a_replay(argv: list[str], trace: str | None) -> None:
    assert launcher._replayed_trace(argv) == trace


# -- dst.testing under hash seed 0 and under another ----------------------------------------


def test_hash_seed_note_says_what_ran_away_from_this_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(testing, "_AWAY", {"pins": 0, "seeds": 0})
    assert testing.hash_seed_note() is None
    monkeypatch.setattr(testing, "_AWAY", {"pins": 2, "seeds": 1500})
    monkeypatch.setattr(testing, "current_hash_seed", lambda: None)
    note = testing.hash_seed_note()
    assert note == ("dst: this process runs under a random hash seed, the dst command under 0: "
                    "2 pinned traces replayed in a child interpreter each, under the hash seed "
                    "they were recorded under; 1,500 seeds run in this process under its hash "
                    "seed, as their traces record; under PYTHONHASHSEED=0 pytest, seeds and "
                    "pins recorded under 0 run in this process, as in dst")
    monkeypatch.setattr(testing, "current_hash_seed", lambda: 0)
    monkeypatch.setattr(testing, "_AWAY", {"pins": 1, "seeds": 0})
    assert testing.hash_seed_note() == ("dst: 1 pinned trace replayed in a child interpreter, "
                                        "under the hash seed it was recorded under")


def test_pytest_runs_pins_and_seeds_in_process_under_hash_seed_0(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "traces" / "regressions").mkdir(parents=True)
    shutil.copy(PINNED, project / "traces" / "regressions" / "counter.jsonl")
    (project / "test_seeds.py").write_text(
        "from dst.testing import check_seeds\n\n\n"
        "def test_counter():\n    check_seeds('counter', seeds=20)\n", encoding="utf-8")
    for hash_seed in ("0", None):
        done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                               *CHILD_PYTEST_ADDOPTS.split()], cwd=project,
                              capture_output=True, text=True, timeout=LIMIT,
                              env={k: v for k, v in _env(PYTHONHASHSEED=hash_seed).items()
                                   if not k.startswith("PYTEST_")})
        assert done.returncode == 0, done.stdout + done.stderr
        assert "2 passed" in done.stdout
        notes = [line for line in done.stdout.splitlines() if line.startswith("dst: ")]
        if hash_seed == "0":
            assert notes == []  # nothing in a child interpreter, nothing under another seed
        else:
            assert notes == [
                "dst: this process runs under a random hash seed, the dst command under 0: "
                "1 pinned trace replayed in a child interpreter, under the hash seed it "
                "was recorded under; 20 seeds run in this process under its hash seed, as "
                "their traces record; under PYTHONHASHSEED=0 pytest, seeds and pins recorded "
                "under 0 run in this process, as in dst"]
