"""The regression corpus and testing from pytest: check_seeds, dst pin, pinned traces, the
plugin that makes them tests, and dst check.

The plugin is exercised as a user meets it: pytest run in a fresh project directory, in
a process of its own, finding dst's plugin through its entry point.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from dst.cli import main
from dst.errors import UsageError
from dst.registry import load
from dst.runner.single import run_one
from dst.testing import check_pinned, check_seeds, pin_trace, read_pin
from dst.trace.codec import read_trace, write_trace
from dst.trace.model import Trace
from tests.conftest import CHILD_PYTEST_ADDOPTS

ROOT = Path(__file__).parent.parent
COUNTER = ROOT / "traces" / "counter-lost-update.jsonl"
PASSING = ROOT / "traces" / "ping-crash-drop-dup-pass.jsonl"

#: A bank whose two withdrawals race unless ``LOCKED``: the file is rewritten to fix it.
BANK = '''
import contextlib

import trio

from dst import Scenario

LOCKED = {locked}
scenario = Scenario("bank", doc="two withdrawals race on one account")


async def withdraw(env, lock, teller):
    async with lock:
        balance = await env.store.get("balance")
        if balance >= 80:
            await env.store.put("balance", balance - 80)
            await env.store.put(f"paid/{{teller}}", 80)


async def bank(env):
    lock = trio.Lock() if LOCKED else contextlib.nullcontext()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(withdraw, env, lock, "t1", name="t1")
        nursery.start_soon(withdraw, env, lock, "t2", name="t2")


@scenario.setup
def setup(sim, config):
    account = sim.store("account")
    account.put("balance", 100)
    sim.process("bank", bank, stores=["account"])
    return account


@scenario.invariant("NoOverdraft")
def no_overdraft(account):
    paid = sum(amount for _, amount in account.scan("paid/"))
    return paid <= 100 or f"paid out {{paid}} from 100"
'''


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def one_line_error(result: Result, code: int, *words: str) -> None:
    assert result.exit_code == code, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


@pytest.fixture
def bank(tmp_path: Path) -> Path:
    path = tmp_path / "bank.py"
    path.write_text(BANK.format(locked=False), encoding="utf-8")
    return path


def _failing_bank_trace(bank: Path, out: Path) -> Path:
    scenario = load(str(bank))
    for seed in range(50):
        result = run_one(scenario, scenario.config(), seed)
        if result.violated:
            return write_trace(result.trace(), out / f"bank-{seed}.jsonl")
    raise AssertionError("the unlocked bank never overdrew in 50 seeds")


# -- check_seeds -------------------------------------------------------------------------


def test_check_seeds_returns_a_summary_when_every_seed_passes() -> None:
    summary = check_seeds("counter", seeds=30)
    assert summary.runs == 30 and summary.bounded == ()
    assert str(summary) == "counter [cas=true workers=2 increments=7]: 30 runs, no violation"


def test_check_seeds_raises_at_the_first_failure_with_its_story_and_replay(
        tmp_path: Path) -> None:
    with pytest.raises(AssertionError) as failed:
        check_seeds("counter", seeds=range(5, 60), out=tmp_path, cas=False)
    message = str(failed.value)
    first = message.splitlines()[0]
    assert first.startswith("counter [cas=false workers=2 increments=7]: NoLostIncrement "
                            "violated (seed 5, the 1st seed run; step ")
    assert "  story (" in message and "VIOLATED NoLostIncrement" in message
    trace = tmp_path / "counter-cas=false-5.jsonl"
    assert message.splitlines()[-1] == f"  replay: dst replay {trace}"
    replayed = invoke("replay", str(trace))
    assert replayed.exit_code == 1 and replayed.stdout.startswith("identical:")


def test_check_seeds_of_a_scenario_object_names_its_file_to_replay(
        bank: Path, tmp_path: Path) -> None:
    with pytest.raises(AssertionError) as failed:
        check_seeds(load(str(bank)), seeds=50, out=tmp_path / "out")
    assert f"--scenario {bank}" in str(failed.value).splitlines()[-1]


def test_check_seeds_types_its_switches_as_a_trace_header_does() -> None:
    with pytest.raises(UsageError, match="switch cas of counter takes"):
        check_seeds("counter", seeds=1, cas="false")
    with pytest.raises(UsageError, match="no switch 'cass'"):
        check_seeds("counter", seeds=1, cass=False)


def test_check_seeds_switch_errors_name_the_switches_and_no_trace() -> None:
    with pytest.raises(UsageError) as unknown:
        check_seeds("counter", seeds=1, cass=False)
    assert str(unknown.value) == ("counter has no switch 'cass'; did you mean cas? switches: "
                                  "cas, increments, workers")
    with pytest.raises(UsageError) as typed:
        check_seeds("counter", seeds=1, cas="false")
    assert str(typed.value) == ("switch cas of counter takes true or false, not 'false' "
                                "(a string); give it a value of that type")


USAGE_ERRORS = '''
import pytest
from dst.testing import check_seeds


def test_check_seeds_of_a_missing_file():
    check_seeds("bnak.py", seeds=3)


@pytest.mark.dst("bnak.py", seeds=3)
def test_marker_of_a_missing_file():
    pass


@pytest.mark.dst("counter", seeds=3, workrs=2)
def test_marker_of_a_misspelt_switch():
    pass
'''


def test_usage_errors_in_a_test_are_one_line_without_dsts_frames(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "bank.py").write_text(BANK.format(locked=False), encoding="utf-8")
    (tests / "test_usage.py").write_text(USAGE_ERRORS, encoding="utf-8")
    ran = _pytest(tmp_path)
    assert "3 failed" in ran.stdout, ran.stdout
    where = (f"no scenario file bnak.py beside tests/test_usage.py or in the working "
             f"directory {tmp_path}; did you mean bank.py?")
    assert f"E       dst.errors.UsageError: {where}" in ran.stdout
    assert f"\n@pytest.mark.dst: {where}\n" in ran.stdout
    assert ("\n@pytest.mark.dst: counter has no switch 'workrs'; did you mean workers? "
            "switches: cas, increments, workers\n") in ran.stdout
    assert "dst/" not in ran.stdout.replace("tests/", ""), ran.stdout


# -- dst pin -----------------------------------------------------------------------------


def test_pin_copies_a_failing_trace_and_its_note_into_the_corpus(tmp_path: Path) -> None:
    corpus = tmp_path / "regressions"
    pinned = invoke("pin", str(COUNTER), "--note", "a blind put loses an increment",
                    "--dir", str(corpus))
    assert pinned.exit_code == 0, pinned.output
    assert pinned.stdout.startswith(f"pinned {corpus / 'counter-0.jsonl'}; note in ")
    assert (corpus / "counter-0.jsonl").read_bytes() == COUNTER.read_bytes()
    note = json.loads((corpus / "counter-0.json").read_text(encoding="utf-8"))
    assert note == {"note": "a blind put loses an increment", "scenario": None}
    again = invoke("pin", str(COUNTER), "--dir", str(corpus))
    assert again.exit_code == 0 and again.stdout.startswith("already pinned: ")


def test_pin_refuses_a_passing_trace_a_bad_name_and_a_taken_one(tmp_path: Path) -> None:
    corpus = str(tmp_path / "regressions")
    one_line_error(invoke("pin", str(PASSING), "--dir", corpus), 2, "passed",
                   "only a failing trace is pinned")
    one_line_error(invoke("pin", str(COUNTER), "--dir", corpus, "--name", "../up"), 2,
                   "not a plain file name")
    taken = ROOT / "traces" / "approval-lost-update.jsonl"
    assert invoke("pin", str(taken), "--dir", corpus, "--name", "mine").exit_code == 0
    one_line_error(invoke("pin", str(COUNTER), "--dir", corpus, "--name", "mine"), 2,
                   "already holds another trace")
    assert not (tmp_path / "up.jsonl").exists()


def test_pin_refuses_a_trace_that_does_not_replay_identically(tmp_path: Path) -> None:
    lines = COUNTER.read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    records[0]["config"]["workers"] = 3  # the same choices cannot fit another system
    edited = Trace(records[0], records[1:-1],
                   {k: v for k, v in records[-1].items() if k != "type"})
    path = tmp_path / "edited.jsonl"
    path.write_text(edited.text(), encoding="utf-8")
    one_line_error(invoke("pin", str(path), "--dir", str(tmp_path / "r")), 3,
                   "diverged at step", "not pinned")
    assert not (tmp_path / "r").exists()


def test_pin_of_a_users_scenario_keeps_where_it_lives_for_any_working_directory(
        bank: Path, tmp_path: Path) -> None:
    trace = _failing_bank_trace(bank, tmp_path / "failures")
    corpus = tmp_path / "project" / "traces" / "regressions"
    one_line_error(invoke("pin", str(trace), "--dir", str(corpus)), 2,
                   "not a shipped one", "--scenario")
    pinned = invoke("pin", str(trace), "--dir", str(corpus), "--scenario", str(bank),
                    "--name", "bank-overdraft", "--note", "check-then-act race")
    assert pinned.exit_code == 0, pinned.output
    note = json.loads((corpus / "bank-overdraft.json").read_text(encoding="utf-8"))
    assert note == {"note": "check-then-act race", "scenario": "../../../bank.py"}
    pin = read_pin(corpus / "bank-overdraft.jsonl")
    assert Path(pin.scenario or "").resolve() == bank.resolve()
    assert "identical" in check_pinned(pin)
    report = invoke("show", str(pin.path), "--format", "markdown").stdout.splitlines()
    assert f"    dst replay {pin.path} --scenario {pin.scenario}" in report


# -- pinned traces: identical, or fixed --------------------------------------------------


def test_a_pinned_trace_that_still_reproduces_is_identical_and_not_fixed(
        tmp_path: Path) -> None:
    records = len(read_trace(COUNTER).records)
    assert check_pinned(COUNTER) == (f"{COUNTER}: identical, {records} records replayed byte "
                                     "for byte (NoLostIncrement violated again)")
    with pytest.raises(AssertionError, match=re.escape(
            "still fails after the fix: NoLostIncrement violated (7 of 7 recorded choices")):
        check_pinned(COUNTER, fixed=True, out=tmp_path)
    assert read_trace(tmp_path / "counter-lost-update-after-fix.jsonl").violated == [
        "NoLostIncrement"]


def test_after_the_fix_a_pin_diverges_and_passes_following_its_choices(
        bank: Path, tmp_path: Path) -> None:
    trace = _failing_bank_trace(bank, tmp_path / "failures")
    pin, _ = pin_trace(trace, directory=tmp_path / "regressions", scenario=str(bank))
    bank.write_text(BANK.format(locked=True), encoding="utf-8")  # the fix
    with pytest.raises(AssertionError, match=r"diverged at step \d+.*changed since the "
                                             "trace was pinned"):
        check_pinned(pin)
    assert "passes after the fix (" in check_pinned(pin, fixed=True)


HASH_ORDERED = '''
import structlog
from dst import Scenario

log = structlog.get_logger()
scenario = Scenario("ordered", doc="logs the order of a set of strings")


async def main(env):
    log.info("first", name=next(iter({"a", "b", "c", "d"})))
    await env.store.put("done", 1)


@scenario.setup
def setup(sim, config):
    sim.store("s")
    sim.process("p", main, stores=["s"])
'''

#: Run under PYTHONHASHSEED=2, where {"a", "b", "c", "d"} iterates in another order than 0.
UNDER_ANOTHER_SEED = '''
import sys
from dst.registry import load
from dst.runner.single import replay_trace
from dst.testing import check_pinned, read_pin
from dst.trace.codec import read_trace

pin = read_pin(sys.argv[1])
plain = replay_trace(load(pin.scenario), read_trace(pin.path)).divergence
print("plain:", "diverged" if plain else "identical")
print("pinned:", check_pinned(pin))
'''


def test_a_pin_recorded_under_another_hash_seed_is_replayed_under_it(tmp_path: Path) -> None:
    (tmp_path / "ordered.py").write_text(HASH_ORDERED, encoding="utf-8")
    recorded = subprocess.run(
        [sys.executable, "-c", "import sys; from dst.registry import load; from "
         "dst.runner.single import run_one; s = load(sys.argv[1]); "
         "sys.stdout.write(run_one(s, s.config(), 0).trace().text())",
         str(tmp_path / "ordered.py")],
        capture_output=True, text=True, check=False, env=dict(os.environ, PYTHONHASHSEED="0"))
    assert recorded.returncode == 0, recorded.stderr
    pinned = tmp_path / "ordered-0.jsonl"
    pinned.write_text(recorded.stdout, encoding="utf-8")
    pinned.with_suffix(".json").write_text('{"note": "", "scenario": "ordered.py"}',
                                           encoding="utf-8")
    assert read_trace(pinned).header["hash_seed"] == 0
    done = subprocess.run([sys.executable, "-c", UNDER_ANOTHER_SEED, str(pinned)],
                          capture_output=True, text=True, check=False,
                          env=dict(os.environ, PYTHONHASHSEED="2"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "plain: diverged", f"pinned: {pinned}: identical, 2 records replayed byte for byte "
                           "(no invariant violated again)"]


# -- the plugin --------------------------------------------------------------------------


def test_the_plugin_is_registered_for_pytest() -> None:
    plugins = {e.name: e.value for e in entry_points(group="pytest11")}
    assert plugins.get("dst") == "dst.pytest_plugin"


MARKED = '''
import pytest


def test_plain():
    pass


@pytest.mark.dst("counter", seeds=20)
def test_counter_holds():
    pass


@pytest.mark.dst(scenario="counter", seeds=range(3, 20), cas=False)
def test_counter_with_a_blind_put():
    pass
'''


def _pytest(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A plain pytest in ``project``, none of this session's settings passed on; langsmith's
    plugin is left out as everywhere in these tests (conftest.CHILD_PYTEST_ADDOPTS)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                           *CHILD_PYTEST_ADDOPTS.split(), "-rf", *args], cwd=project,
                          capture_output=True, text=True, check=False, env=env)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project with a test file and one pinned trace in traces/regressions."""
    root = tmp_path / "project"
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test_marked.py").write_text(MARKED, encoding="utf-8")
    pin_trace(COUNTER, directory=root / "traces" / "regressions")
    return root


def test_pinned_traces_are_tests_and_marked_tests_run_their_seeds(project: Path) -> None:
    listed = _pytest(project, "--co")
    assert "traces/regressions/counter-0.jsonl::identical" in listed.stdout, listed.stdout
    ran = _pytest(project)
    assert ran.returncode == 1, ran.stdout
    assert "1 failed, 3 passed" in ran.stdout
    assert "FAILED tests/test_marked.py::test_counter_with_a_blind_put" in ran.stdout
    assert "NoLostIncrement violated (seed 3, the 1st seed run" in ran.stdout
    assert "replay: dst replay traces/failures/counter-cas=false-3.jsonl" in ran.stdout
    assert (project / "traces" / "failures" / "counter-cas=false-3.jsonl").is_file()


def test_dst_fixed_requires_a_pinned_trace_to_pass_after_its_fix(project: Path) -> None:
    ran = _pytest(project, "--dst-fixed", "traces/regressions")
    assert ran.returncode == 1
    assert "traces/regressions/counter-0.jsonl: still fails after the fix: " \
           "NoLostIncrement violated" in ran.stdout
    assert "1 failed" in ran.stdout


def test_a_path_given_runs_just_that_path(project: Path) -> None:
    listed = _pytest(project, "--co", "tests/test_marked.py")
    assert "counter-0.jsonl" not in listed.stdout
    assert "3 tests collected" in listed.stdout


def test_the_dst_traces_ini_option_says_where_pins_are(project: Path) -> None:
    corpus = project / "corpus"
    corpus.mkdir()
    (corpus / "approval.jsonl").write_bytes(
        (ROOT / "traces" / "approval-lost-update.jsonl").read_bytes())
    (project / "pytest.ini").write_text(
        textwrap.dedent("""
            [pytest]
            dst_traces = corpus
        """), encoding="utf-8")
    listed = _pytest(project, "--co")
    assert "corpus/approval.jsonl::identical" in listed.stdout, listed.stdout
    assert "counter-0.jsonl" not in listed.stdout



def test_pins_outside_the_rootdir_run_when_their_directory_or_file_is_given(
        project: Path) -> None:
    (project / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    sub = project / "sub" / "traces" / "regressions"
    pin_trace(COUNTER, directory=sub)
    (sub / "notes.jsonl").write_text('{"not": "a trace"}\n', encoding="utf-8")
    ran = _pytest(project / "sub", "traces/regressions")
    assert "1 passed" in ran.stdout, ran.stdout
    one = _pytest(project / "sub", "traces/regressions/counter-0.jsonl")
    assert "1 passed" in one.stdout, one.stdout
    listed = _pytest(project / "sub", "--co", "traces/regressions")
    assert "notes.jsonl" not in listed.stdout and "1 test collected" in listed.stdout


def test_pin_says_where_pytest_looks_when_the_corpus_is_elsewhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    away = invoke("pin", str(COUNTER))
    assert away.exit_code == 0, away.output
    assert "pytest replays it on every run" not in away.stdout
    assert (f"a plain pytest run here collects pins from {tmp_path / 'traces' / 'regressions'}"
            in away.stdout), away.stdout
    assert "replay it with `pytest traces/regressions`" in away.stdout
    monkeypatch.chdir(tmp_path)
    home = invoke("pin", str(COUNTER))
    assert home.exit_code == 0, home.output
    assert home.stdout.rstrip().endswith("; pytest replays it on every run"), home.stdout


# -- dst check ---------------------------------------------------------------------------


def test_check_holds_for_a_shipped_scenario_row_by_row() -> None:
    checked = invoke("check", "counter", "--seeds", "60")
    assert checked.exit_code == 0, checked.output
    lines = checked.stdout.splitlines()
    assert lines[0].startswith("counter: ok    default [cas=true workers=2 increments=7]: "
                               "no violation in 60 seeds (")
    assert lines[1].startswith("counter: ok    planted bug cas=false (breaks NoLostIncrement):"
                               " found, NoLostIncrement by seed 0 (")
    assert lines[2].startswith("counter: 2 of 2 rows hold (")


BROKEN_PROMISES = '''
from dst import Scenario

scenario = Scenario("promises", doc="a default that fails and a bug that is never found")
scenario.switch("bug", False, doc="does nothing at all")
scenario.planted_bug({"bug": True}, breaks=["Elsewhere"], doc="not really a bug")


async def main(env):
    await env.store.put("x", 1)


@scenario.setup
def setup(sim, config):
    store = sim.store("s")
    sim.process("p", main, stores=["s"])
    return store


@scenario.invariant("Never")
def never(store):
    return store.peek("x") is None or "x was written"
'''


def test_check_fails_when_the_default_fails_or_a_planted_bug_is_lost(tmp_path: Path) -> None:
    path = tmp_path / "promises.py"
    path.write_text(BROKEN_PROMISES, encoding="utf-8")
    out = tmp_path / "out"
    checked = invoke("check", str(path), "--seeds", "5", "--out", str(out))
    assert checked.exit_code == 1, checked.output
    lines = checked.stdout.splitlines()
    assert lines[0].startswith("promises: FAIL  default [bug=false]: Never violated in seed 0")
    assert lines[0].endswith(f"replay: dst replay {out / 'promises-0.jsonl'} "
                             f"--scenario {path}")
    assert lines[1].startswith("promises: LOST  planted bug bug=true (breaks Elsewhere): "
                               "Elsewhere not broken in 5 seeds; broke only Never")
    assert lines[2].startswith("promises: 0 of 2 rows hold")


def test_check_of_a_scenario_whose_setup_raises_is_a_broken_scenario(tmp_path: Path) -> None:
    path = tmp_path / "broken.py"
    path.write_text(BROKEN_PROMISES.replace('store = sim.store("s")', "store = {}['s']"),
                    encoding="utf-8")
    one_line_error(invoke("check", str(path), "--seeds", "3"), 4, "setup of promises raised",
                   "KeyError")



#: A project for pytest's import modes: a scenario file a test imports and marks, and a
#: failing @dst.test whose trace is pinned; conftest reports every module of the tests/
#: files and which of tests/ is on sys.path, once the session is over.
MODES = {
    "tests/tally.py": '''
import trio

from dst import Scenario

RUNS = {"n": 0}
scenario = Scenario("tally", doc="counts its runs in the module that holds it")


@scenario.setup
def setup(sim, config):
    RUNS["n"] += 1

    async def main(env):
        await trio.sleep(0)

    sim.process("p", main)
    return RUNS
''',
    "tests/test_modes.py": '''
import sys

import pytest
import trio

import dst

BROKEN = True


def _tally():
    return next(m for m in list(sys.modules.values())
                if (getattr(m, "__file__", "") or "").endswith("tally.py"))


@pytest.mark.dst("tally.py", seeds=3)
def test_marked_seeds_run_in_the_module_the_test_sees():
    assert _tally().RUNS["n"] == 3


@dst.test(seeds=1)
async def test_pinned():
    await trio.sleep(0)
    assert not BROKEN, "pinned"
''',
    "tests/conftest.py": '''
import json
import os
import sys


def pytest_sessionfinish(session):
    here = os.path.dirname(os.path.abspath(__file__))
    modules = sorted(name for name, m in list(sys.modules.items())
                     if os.path.dirname(os.path.abspath(getattr(m, "__file__", None) or "/"))
                     == here and not name.endswith("conftest"))
    with open(os.path.join(here, "..", "modules.json"), "w") as f:
        json.dump({"modules": modules, "tests_on_path": here in sys.path}, f)
''',
}


@pytest.mark.parametrize("mode", ["prepend", "importlib"])
def test_the_plugin_imports_scenario_and_test_files_as_the_import_mode_pytest_runs_in(
        tmp_path: Path, mode: str) -> None:
    """A marked test's scenario file and a pinned @dst.test's file are imported once, as
    pytest imports them under --import-mode (the module the tests see, with its state),
    and importlib mode puts nothing of the tests' directory on sys.path."""
    for name, text in MODES.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    first = _pytest(tmp_path, f"--import-mode={mode}", "tests/test_modes.py::test_pinned")
    [failed] = (tmp_path / "traces" / "failures").glob("*test_pinned-0.jsonl")
    assert first.returncode == 1 and f"replay: dst replay traces/failures/{failed.name} " \
        "--scenario tests/test_modes.py::test_pinned" in first.stdout, first.stdout
    pin_trace(failed, directory=tmp_path / "traces" / "regressions",
              scenario=str(tmp_path / "tests" / "test_modes.py") + "::test_pinned")
    ran = _pytest(tmp_path, f"--import-mode={mode}",
                  "--deselect", "tests/test_modes.py::test_pinned")
    assert ran.returncode == 0 and "2 passed, 1 deselected" in ran.stdout, ran.stdout
    seen = json.loads((tmp_path / "modules.json").read_text(encoding="utf-8"))
    expected = ["tally", "test_modes"] if mode == "prepend" else \
        ["tests.tally", "tests.test_modes"]
    assert seen == {"modules": expected, "tests_on_path": mode == "prepend"}, seen
