"""The small form: ``@dst.test`` on an ``async def`` is a scenario pytest runs.

The decorated bodies below are module-level (so that ``FILE.py::NAME`` finds them) and
not named ``test_*`` (so that this file's pytest run calls them only where a test
says so, expecting them to fail).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import trio
from click.testing import CliRunner, Result

import dst
from dst import FaultPlan
from dst.cli import main
from dst.errors import UsageError
from dst.testing import check_pinned, check_seeds
from dst.trace.codec import read_trace
from tests.conftest import CHILD_PYTEST_ADDOPTS
from tests.test_junit_schemas import _both as both_junit_schemas


async def bump_twice(lock: trio.Lock | None) -> int:
    """Two tasks each read a counter, reach a checkpoint, and write it plus one."""
    count = 0

    async def bump() -> None:
        nonlocal count
        if lock is not None:
            await lock.acquire()
        seen = count
        await trio.sleep(0)
        count = seen + 1
        if lock is not None:
            lock.release()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(bump)
        nursery.start_soon(bump)
    return count


@dst.test(seeds=300)
async def race_unlocked() -> None:
    count = await bump_twice(None)
    assert count == 2, f"lost update: count is {count}"


@dst.test(seeds=300)
async def race_locked() -> None:
    count = await bump_twice(trio.Lock())
    assert count == 2, f"lost update: count is {count}"


@dst.test(seeds=300)
async def store_race(env: dst.Env) -> None:
    async def bump() -> None:
        n = await env.store.get("n") or 0
        assert isinstance(n, int)
        await env.store.put("n", n + 1)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(bump)
        nursery.start_soon(bump)
    assert await env.store.get("n") == 2


async def put_within(env: dst.Env, seconds: float) -> None:
    with trio.move_on_after(seconds):
        await env.store.put("x", 1)
    assert await env.store.get("x") == 1, "the put was cut by its timeout"


@dst.test(seeds=300, faults=FaultPlan(max_slow=1))
async def put_under_timeout(env: dst.Env, faults: FaultPlan) -> None:
    assert faults.max_slow == 1, f"the body runs under {faults}"
    await put_within(env, 5)


@dst.test(seeds=300)
async def put_under_timeout_without_faults(env: dst.Env, faults: FaultPlan) -> None:
    assert faults == FaultPlan(), f"the body runs under {faults}"
    await put_within(env, 5)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def _failure(body: object) -> str:
    with pytest.raises(pytest.fail.Exception) as failed:
        body()  # type: ignore[operator]
    return str(failed.value)


def _replay_line(message: str) -> str:
    line = next(x for x in message.splitlines() if x.strip().startswith("replay: "))
    return line.split("replay: ", 1)[1]


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_check_then_act_race_between_two_tasks_is_found_and_replays_identically(
        here: Path) -> None:
    message = _failure(race_unlocked)
    first = message.splitlines()[0]
    assert first.startswith("race_unlocked: assert violated (seed ")
    assert "lost update: count is 1 (test_small_form.py:" in first
    assert "sched     -> race" not in message and "-> test/bump" in message  # the interleaving
    replay = _replay_line(message)
    argv = shlex.split(replay)
    assert argv[:2] == ["dst", "replay"] and argv[3] == "--scenario"
    assert argv[4].endswith("tests/test_small_form.py::race_unlocked")
    trace = argv[2]
    assert trace.startswith(f"traces/failures/{__name__}.race_unlocked-")  # module.test-seed
    assert (here / trace).is_file()
    again = invoke(*argv[1:])
    assert again.exit_code == 1, again.output
    assert again.stdout.startswith("identical: "), again.output
    alone = invoke("replay", trace)  # a trace is untrusted: the file it names is not run
    assert alone.exit_code == 2 and not alone.stdout, alone.output
    assert "tests/test_small_form.py::race_unlocked (the file it was recorded from: dst runs " \
        "no code a trace names)" in alone.stderr, alone.stderr
    header = read_trace(trace).header
    assert header["scenario"] == "race_unlocked"
    assert header["scenario_file"].endswith("tests/test_small_form.py")


def test_a_failing_trace_shrinks_and_is_pinned_by_the_test_s_name(here: Path) -> None:
    _, _, trace, _, test = shlex.split(_replay_line(_failure(store_race)))
    shrunk = invoke("shrink", trace, "--scenario", test, "--budget", "5s", "-o", "min.jsonl")
    assert shrunk.exit_code == 1, shrunk.output
    assert "assert violated" in shrunk.stdout
    again = invoke("replay", "min.jsonl", "--scenario", test)
    assert again.exit_code == 1 and again.stdout.startswith("identical: "), again.output
    unnamed = invoke("pin", trace, "--name", "store-race")  # the header's file is not run
    assert unnamed.exit_code == 2 and "--scenario" in unnamed.stderr, unnamed.output
    pinned = invoke("pin", trace, "--name", "store-race", "--scenario", test)
    assert pinned.exit_code == 0, pinned.output
    assert check_pinned("traces/regressions/store-race.jsonl").endswith(
        "(assert violated again)")


def test_the_locked_version_passes_every_seed(here: Path) -> None:
    race_locked()
    assert not (here / "traces").exists()


def test_the_same_seed_gives_the_same_trace_byte_for_byte(here: Path) -> None:
    texts = []
    for _ in range(2):
        trace = shlex.split(_replay_line(_failure(race_unlocked)))[2]
        texts.append((here / trace).read_bytes())
    assert texts[0] == texts[1]
    seed = read_trace(trace).header["seed"]
    others = []
    for out in ("a", "b"):  # the scenario the decorator built, run as any scenario
        with pytest.raises(AssertionError):
            check_seeds(race_unlocked.scenario, [seed], out=out)  # type: ignore[attr-defined]
        others.append((here / out / f"race_unlocked-{seed}.jsonl").read_bytes())
    assert others[0] == others[1]


def test_the_faults_parameter_is_the_plan_the_run_is_under(here: Path) -> None:
    """A timer fires before runnable work only as a slow fault: none in the default plan."""
    put_under_timeout_without_faults()
    message = _failure(put_under_timeout)
    assert "the put was cut by its timeout" in message
    assert "SLOW: timer@5.000 fired while other work could run" in message


def test_the_env_parameter_is_the_process_env_with_a_durable_store(here: Path) -> None:
    message = _failure(store_race)
    assert "assert await env.store.get(\"n\") == 2 (test_small_form.py:" in message
    assert "-> test/bump@main.get(n)" in message or "-> test/bump#2@main.get(n)" in message
    # pytest's explanation of the bare assert is told beside the story, not recorded.
    assert message.rstrip().endswith("the assertion, as pytest explains it:\n    assert 1 == 2")


def test_an_exception_other_than_an_assertion_is_an_uncaught_error(here: Path) -> None:
    @dst.test(seeds=3)
    async def raises() -> None:
        missing: dict[str, int] = {}
        missing["missing"]

    message = _failure(raises)
    assert "NoUncaughtError violated" in message.splitlines()[0]
    assert "test raised KeyError: 'missing'" in message


def test_bare_decorator_runs_the_default_seeds(here: Path) -> None:
    @dst.test
    async def passes() -> None:
        await trio.sleep(0)

    passes()
    assert passes.__name__ == "passes"
    assert passes.scenario.name == "passes"  # type: ignore[attr-defined]


def _one_line_usage_error(make: object) -> str:
    with pytest.raises(UsageError) as err:
        make()  # type: ignore[operator]
    text = str(err.value)
    assert "\n" not in text
    return text


def test_a_plain_function_is_refused_in_one_line() -> None:
    def not_async() -> None:
        pass

    text = _one_line_usage_error(lambda: dst.test(seeds=5)(not_async))  # type: ignore[arg-type]
    assert text.startswith("@dst.test decorates an 'async def' test function, not a plain "
                           "function not_async; make it 'async def not_async(...)'")


def test_a_parameter_a_dst_test_cannot_give_is_refused_in_one_line() -> None:
    async def wants_db(env: dst.Env, db: object) -> None:
        pass

    text = _one_line_usage_error(lambda: dst.test(wants_db))
    assert text == ("wants_db asks for db, which a dst test cannot give; it may ask "
                    "for env, faults by name (and needs no other parameter); pytest "
                    "fixtures and @pytest.mark.parametrize cannot reach a simulated run: "
                    "loop over the values in the body, or write a Scenario with a switch "
                    "(docs/scenarios.md)")


def test_a_parametrized_test_is_refused_saying_what_to_write_instead() -> None:
    async def per_size(n: int) -> None:
        pass

    marked = pytest.mark.parametrize("n", [1, 2])(per_size)
    for make in (lambda: dst.test(seeds=5)(marked), lambda: pytest.mark.parametrize(
            "n", [1, 2])(dst.test(seeds=5)(per_size))):
        text = _one_line_usage_error(make)
        assert text.startswith("per_size asks for n, which a dst test cannot give;"), text
        assert "loop over the values in the body, or write a Scenario with a switch" in text


def test_a_test_method_is_refused_saying_to_make_it_a_module_level_function() -> None:
    def make() -> object:
        class TestInClass:
            @dst.test(seeds=5)
            async def test_in_class(self) -> None:
                pass

        return TestInClass

    text = _one_line_usage_error(make)
    assert text.startswith("test_in_class asks for self, which a dst test cannot give;"), text
    assert text.endswith("; a dst test is a module-level function: move it out of its class "
                         "(the class's setup does not run in a simulated run)")


def test_bad_settings_are_refused_in_one_line_and_the_decorator_is_no_test() -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"seeds": 0}, "@dst.test(seeds=...) is a count of 1 or more"),
        ({"seeds": [1, -2]}, "@dst.test(seeds=...) lists seeds, integers 0 or more, not -2"),
        ({"seeds": "x"}, "@dst.test(seeds=...) is a count of 1 or more or the seeds "
                         "themselves (seeds=500, seeds=range(100, 200)), not 'x'"),
        ({"seeds": []}, "@dst.test(seeds=[]) gives no seed to run; give a count "
                        "(seeds=500) or at least one seed"),
        ({"seeds": range(0)}, "@dst.test(seeds=range(0, 0)) gives no seed to run"),
        ({"faults": {"max_crashes": 1}}, "@dst.test(faults=...) is a dst.FaultPlan(...)"),
        ({"max_steps": 0}, "@dst.test(max_steps=...) is a step count of 1 or more"),
        ({"seed_timeout": 0}, "@dst.test(seed_timeout=...) is a number of seconds above 0"),
    ]
    for settings, says in cases:
        text = _one_line_usage_error(lambda s=settings: dst.test(**s))
        assert text.startswith(says), text
    assert dst.test.__test__ is False  # type: ignore[attr-defined]  # pytest collects it not


@dst.test(seeds=3, max_steps=200)
async def never_finishes() -> None:
    async def poll() -> None:
        while True:
            await trio.sleep(1)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(poll)
    raise AssertionError("never reached")


def test_a_body_that_never_finishes_fails_naming_the_seed_the_bound_and_what_to_do(
        here: Path) -> None:
    message = _failure(never_finishes)
    first = message.splitlines()[0]
    assert first.startswith("never_finishes: Unfinished violated (seed 0, the 1st seed run; "
                            "step 200, "), first
    assert first.endswith("the test body had not finished after 200 steps, the test's bound: "
                          "make the body finish (a loop that never ends? a task never "
                          "cancelled?), or raise @dst.test(max_steps=...)"), first
    _, _, trace, _, test = shlex.split(_replay_line(message))
    again = invoke("replay", trace, "--scenario", test)
    assert again.exit_code == 1 and "(Unfinished violated again)" in again.stdout, again.output
    shrunk = invoke("shrink", trace, "--scenario", test, "--budget", "2s", "-o", "min.jsonl")
    assert shrunk.exit_code == 1, shrunk.output  # the body's decisions, the story's end told
    assert "  story (201 lines, 200 steps; the last 40 shown):\n    162  " in shrunk.stdout


def test_dst_run_of_a_body_that_never_finishes_reports_it_failed_not_passed(
        here: Path) -> None:
    ran = invoke("run", f"{__file__}::never_finishes", "--seeds", "2", "--workers", "1",
                 "--no-shrink")
    assert ran.exit_code == 1, ran.output
    assert "2 failed (Unfinished x2)" in ran.stdout, ran.output
    assert "VIOLATED Unfinished: the test body had not finished after 200 steps" in ran.stdout
    # The decisions are the story (nothing was logged), its end told: the bound's 200.
    assert "  story (201 lines, 200 steps; the last 40 shown):\n    162  " in ran.stdout


@dst.test(seeds=3)
async def skips_on_some_seeds(env: dst.Env) -> None:
    await trio.sleep(0)
    if env.rng.random() < 0.5:
        pytest.skip("not on this seed")


@dst.test(seeds=3)
async def always_skips() -> None:
    await trio.sleep(0)
    pytest.skip("needs a real GPU")


def test_dst_run_counts_a_seed_whose_body_skips_as_skipped_not_passed(here: Path) -> None:
    argv = ("run", f"{__file__}::skips_on_some_seeds", "--seeds", "20", "--workers", "1")
    ran = invoke(*argv)
    assert ran.exit_code == 0, ran.output  # the other seeds passed
    doc = json.loads(invoke(*argv, "--json").stdout)
    skipped = doc["skipped"]
    assert 0 < skipped < 20 and doc["skip_reasons"] == {"not on this seed": skipped}, doc
    assert f": 20 runs ({skipped} skipped), 0 failed, " in ran.stdout, ran.stdout
    assert f"\n{skipped} seeds skipped by pytest.skip() in the test body (" in ran.stdout
    assert "): not on this seed; a skipped seed tested nothing and is not counted as " \
           "passed\n" in ran.stdout, ran.stdout


def test_dst_run_of_a_body_that_skips_on_every_seed_exits_5_saying_nothing_was_tested(
        here: Path) -> None:
    ran = invoke("run", f"{__file__}::always_skips", "--seeds", "4", "--workers", "1",
                 "--junit", "run.xml", "--summary-md", "run.md")
    assert ran.exit_code == 5, ran.output
    assert ": 4 runs (4 skipped), 0 failed, " in ran.stdout
    assert "4 seeds skipped by pytest.skip() in the test body (0, 1, 2, ...): needs a real " \
           "GPU;" in ran.stdout, ran.stdout
    assert ran.stderr.strip().splitlines() == [
        f"error: {__file__}::always_skips: every seed skipped (pytest.skip(): needs a real "
        "GPU), so nothing was tested; run it where it applies, or drop the skip"], ran.stderr
    # CI sees the run's test case skipped, not passed; the Markdown report says why.
    root = ET.parse(here / "run.xml").getroot()
    both_junit_schemas(root)
    [suite] = root.iter("testsuite")
    [case] = suite.iter("testcase")
    assert suite.get("skipped") == "1" and suite.get("failures") == "0", suite.attrib
    skipped = case.find("skipped")
    assert skipped is not None and "needs a real GPU" in (skipped.get("message") or "")
    report = (here / "run.md").read_text(encoding="utf-8")
    assert report.startswith("### dst run always\\_skips: nothing tested, every one of 4 "
                             "seeds skipped\n"), report
    assert "\n**Nothing tested:** 4 seeds skipped by pytest\\.skip() in the test body" in \
        report, report


def test_a_story_outside_pytest_tells_the_interleaving_of_a_body_that_logs_nothing(
        here: Path) -> None:
    _, _, trace, _, test = shlex.split(_replay_line(_failure(race_unlocked)))
    for args in (("show", trace), ("shrink", trace, "--scenario", test, "--budget", "5s")):
        told = invoke(*args)
        assert re.search(r"\n +1 +00:00:00.000 +sched +-> test/bump", told.stdout), (
            args, told.output)


def test_same_named_tests_in_two_files_keep_their_own_traces_and_replay_lines(
        tmp_path: Path) -> None:
    code = readme_example()[0].replace("test_two_bumps_make_two", "test_same")
    for part in ("a", "b"):
        where = tmp_path / "tests" / part
        where.mkdir(parents=True)
        (where / f"test_same_{part}.py").write_text(
            code.replace("lost update", f"lost in {part}"), encoding="utf-8")
    skips = tmp_path / "tests" / "test_skips.py"
    skips.write_text("import pytest\nimport trio\nimport dst\n\n\n@dst.test(seeds=3)\n"
                     "async def test_skips():\n    await trio.sleep(0)\n"
                     "    pytest.skip('not here')\n", encoding="utf-8")
    done = _pytest(tmp_path, "-rs", "tests")
    assert "2 failed, 1 skipped" in done.stdout, done.stdout + done.stderr
    # A pytest.skip() in the body skips the test, reported at the user's line.
    assert "SKIPPED [1] tests/test_skips.py:9: not here" in done.stdout, done.stdout
    replays = [line.split("replay: ", 1)[1] for line in done.stdout.splitlines()
               if line.strip().startswith("replay: ")]
    assert sorted(shlex.split(r)[2] for r in replays) == [
        "traces/failures/test_same_a.test_same-1.jsonl",
        "traces/failures/test_same_b.test_same-1.jsonl"], replays
    for replay in replays:
        again = subprocess.run([sys.executable, "-m", "dst", *shlex.split(replay)[1:]],
                               cwd=tmp_path, capture_output=True, text=True, timeout=300,
                               check=False)
        assert again.returncode == 1 and again.stdout.startswith("identical: "), again.stdout


def _pytest(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTHONHASHSEED")}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *CHILD_PYTEST_ADDOPTS.split(), *args],
                          cwd=cwd, capture_output=True, text=True, env=env, timeout=300,
                          check=False)


@dst.test(seeds=3, seed_timeout=0.5)
async def spins_without_await() -> None:
    async def spin() -> None:
        while True:
            pass

    async with trio.open_nursery() as nursery:
        nursery.start_soon(spin)


def test_a_seed_stuck_in_a_loop_without_await_is_stopped_and_the_test_fails(here: Path) -> None:
    message = _failure(spins_without_await)
    assert message == ("spins_without_await: seed 0 ran for more than 0.5s of wall-clock time "
                       "without finishing, so it was stopped: a loop without await, or a call "
                       "that blocks, in the body? (raise @dst.test(seed_timeout=...) if it is "
                       "only slow)")
    race_locked()  # the process goes on testing


def test_a_mark_under_the_decorator_is_the_test_s_mark() -> None:
    @dst.test(seeds=3)
    @pytest.mark.xfail(reason="a known race", strict=True)
    async def marked() -> None:
        assert await bump_twice(None) == 2

    assert [(m.name, m.kwargs) for m in marked.pytestmark] == [  # type: ignore[attr-defined]
        ("xfail", {"reason": "a known race", "strict": True})]


def test_a_test_s_seed_timeout_is_dst_run_s() -> None:
    from dst.runner.workers import SEED_TIMEOUT
    from dst.small import SEED_TIMEOUT as SMALL_SEED_TIMEOUT

    assert SMALL_SEED_TIMEOUT == SEED_TIMEOUT


def test_dst_list_of_a_file_of_dst_tests_lists_each_as_file_and_name() -> None:
    listed = invoke("list", __file__)
    assert listed.exit_code == 0, listed.output
    names = [line.split(": ", 1)[0] for line in listed.stdout.splitlines()
             if not line.startswith(" ")]
    assert f"{__file__}::race_unlocked" in names and f"{__file__}::store_race" in names, names
    assert all(name.startswith(f"{__file__}::") for name in names), names
    one = invoke("list", f"{__file__}::never_finishes")
    assert one.stdout.startswith(f"{__file__}::never_finishes: the dst test never_finishes\n"
                                 "    invariants: assert, Unfinished\n"), one.output


README = Path(__file__).resolve().parent.parent / "README.md"


def readme_example() -> tuple[str, str]:
    """The Quick start's ``@dst.test`` example and the pytest output shown under it."""
    quick = README.read_text(encoding="utf-8").split("## Quick start", 1)[1]
    code, shown = re.search(r"```python\n(.*?)```\n```\n\$ pytest -q test_counter.py\n(.*?)```",
                            quick, flags=re.S).groups()  # type: ignore[union-attr]
    return code, shown


_RACE = """\
        seen = count
        await trio.sleep(0)  # a checkpoint: dst chooses which task runs next
        count = seen + 1
"""
_LOCKED = """\
        async with lock:
            seen = count
            await trio.sleep(0)
            count = seen + 1
"""


def test_plain_pytest_from_another_directory_fails_with_the_story_and_a_replay_that_runs(
        tmp_path: Path) -> None:
    tests = tmp_path / "proj" / "tests"
    tests.mkdir(parents=True)
    code, shown = readme_example()
    assert len(code.strip().splitlines()) <= 20 and _RACE in code  # short, and a race
    locked = code.replace("test_two_bumps_make_two", "test_bumps_under_a_lock").replace(
        "    count = 0\n", "    count = 0\n    lock = trio.Lock()\n").replace(_RACE, _LOCKED)
    (tests / "test_counter.py").write_text(code + "\n\n" + locked, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTHONHASHSEED")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "proj/tests/test_counter.py"],
        cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300, check=False)
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "1 failed, 1 passed" in out  # the race found, the locked version passing
    # What the README shows, from the failure's first line to pytest's explanation, as run
    # from another directory (the paths then start with proj/tests/).
    told = shown.split("_\n", 1)[1].split("\ndst: ", 1)[0]
    told = told.replace("--scenario test_counter.py", "--scenario proj/tests/test_counter.py")
    assert told in out, out
    replay = _replay_line(out)
    assert replay.endswith(" --scenario proj/tests/test_counter.py::test_two_bumps_make_two")
    argv = shlex.split(replay)
    again = subprocess.run([sys.executable, "-m", "dst", *argv[1:]], cwd=tmp_path,
                           capture_output=True, text=True, timeout=300, check=False)
    assert again.returncode == 1, again.stdout + again.stderr
    assert again.stdout.startswith("identical: "), again.stdout + again.stderr
