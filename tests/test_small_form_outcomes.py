"""``@dst.test``: asyncio bodies, and what pytest's outcome calls in a body mean.

The decorated bodies below are module-level (so that ``FILE.py::NAME`` finds them) and
not named ``test_*`` (so that this file's pytest run calls them only where a test
says so).
"""

from __future__ import annotations

import asyncio
import json
import shlex
from pathlib import Path

import pytest
import trio

import dst
from dst.errors import UsageError
from dst.small import partly_skipped
from tests.test_small_form import _failure, _pytest, _replay_line, here, invoke

__all__ = ["here"]  # the fixture, used by name below

#: Bodies that count the seeds they ran (the first failing seed must stop the test).
RAN: list[int] = []


@dst.test(seeds=300, runtime="asyncio")
async def aio_race_unlocked() -> None:
    count = [0]

    async def bump() -> None:
        seen = count[0]
        await asyncio.sleep(0)
        count[0] = seen + 1

    await asyncio.gather(bump(), bump())
    assert count[0] == 2, f"lost update: count is {count[0]}"


@dst.test(seeds=300, runtime="asyncio")
async def aio_race_locked(env: dst.Env, faults: dst.FaultPlan) -> None:
    count, lock = [0], asyncio.Lock()

    async def bump() -> None:
        async with lock:
            seen = count[0]
            await asyncio.sleep(0)
            count[0] = seen + 1

    async with asyncio.TaskGroup() as group:
        group.create_task(bump())
        group.create_task(bump())
    await env.store.put("count", count[0])  # env is the asyncio process's own
    assert await env.store.get("count") == 2
    assert faults == dst.FaultPlan()


@dst.test(seeds=5)
async def trio_body_awaits_asyncio() -> None:
    await trio.sleep(0)
    await asyncio.sleep(0)  # trio cannot run it


@dst.test(seeds=5, runtime="asyncio")
async def asyncio_body_awaits_trio() -> None:
    await asyncio.sleep(0)
    await trio.sleep(1)


@dst.test(seeds=5)
async def calls_pytest_fail() -> None:
    await trio.sleep(0)
    pytest.fail("the refund was paid twice")


@dst.test(seeds=5)
async def calls_pytest_xfail() -> None:
    await trio.sleep(0)
    pytest.xfail("known race, fixed in 2.0")


async def toss(env: dst.Env) -> None:
    """Skip the seed on heads (about half the seeds)."""
    await trio.sleep(0)
    if env.rng.random() < 0.5:
        pytest.skip("coin says skip")


@dst.test(seeds=40)
async def skips_or_xfails(env: dst.Env) -> None:
    await toss(env)
    pytest.xfail("known race")


@dst.test(seeds=50)
async def skips_on_some_seeds(env: dst.Env) -> None:
    await toss(env)


@dst.test(seeds=50)
async def skips_on_some_seeds_fails_on_the_others(env: dst.Env) -> None:
    await toss(env)
    raise AssertionError("bug on the path that runs")


@dst.test(seeds=3)
async def raises_in_a_task() -> None:
    async def charge() -> None:
        await trio.sleep(0)
        raise ValueError("card declined")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(charge)


@dst.test(seeds=3)
async def raises_in_the_body() -> None:
    await trio.sleep(0)
    raise ValueError("card declined")  # trio


@dst.test(seeds=3, runtime="asyncio")
async def aio_raises_in_the_body() -> None:
    await asyncio.sleep(0)
    raise ValueError("card declined")


@dst.test(seeds=2000)
async def fails_at_seed_1() -> None:
    RAN.append(1)
    assert len(RAN) < 2, "the second seed fails"


def test_an_asyncio_body_s_race_is_found_and_replays_identically(here: Path) -> None:
    message = _failure(aio_race_unlocked)
    first = message.splitlines()[0]
    assert first.startswith("aio_race_unlocked: assert violated (seed "), first
    assert "lost update: count is 1 (test_small_form_outcomes.py:" in first, first
    argv = shlex.split(_replay_line(message))
    again = invoke(*argv[1:])
    assert again.exit_code == 1 and again.stdout.startswith("identical: "), again.output


def test_an_asyncio_body_that_locks_passes_with_env_and_faults() -> None:
    aio_race_locked()


def test_dst_run_finds_the_asyncio_race_and_passes_its_locked_twin(here: Path) -> None:
    found = invoke("run", f"{__file__}::aio_race_unlocked", "--seeds", "100", "--workers", "1")
    assert found.exit_code == 1, found.output
    assert "VIOLATED assert: lost update: count is 1" in found.stdout, found.output
    replay = _replay_line(found.stdout)
    again = invoke(*shlex.split(replay)[1:])
    assert again.exit_code == 1 and again.stdout.startswith("identical: "), again.output
    twin = invoke("run", f"{__file__}::aio_race_locked", "--seeds", "100", "--workers", "1")
    assert twin.exit_code == 0 and ": 100 runs, 0 failed, " in twin.stdout, twin.output


def test_a_runtime_other_than_trio_or_asyncio_is_refused_in_one_line() -> None:
    with pytest.raises(UsageError, match=r"^@dst.test\(runtime=...\) is 'trio' \(the "
                                         r"default\) or 'asyncio', not 'curio'$"):
        dst.test(runtime="curio")


AWAITED = ("trio_body_awaits_asyncio: the test body awaited asyncio at "
           "test_small_form_outcomes.py:{line} in trio_body_awaits_asyncio, which a trio "
           'test cannot run; write @dst.test(runtime="asyncio") and make the body asyncio code')


def test_a_trio_body_awaiting_asyncio_fails_in_one_line_naming_the_runtime(
        here: Path) -> None:
    line = _line_of("await asyncio.sleep(0)  # trio cannot run it")
    assert _failure(trio_body_awaits_asyncio) == AWAITED.format(line=line)
    ran = invoke("run", f"{__file__}::trio_body_awaits_asyncio", "--seeds", "5",
                 "--workers", "1")
    assert ran.exit_code == UsageError.exit_code, ran.output
    assert ran.stderr.strip() == f"error: {AWAITED.format(line=line)}", ran.stderr
    assert not list(here.glob("traces/**/*.jsonl"))  # no finding, no trace


def test_an_asyncio_body_awaiting_trio_fails_in_one_line_naming_the_runtime(
        here: Path) -> None:
    assert _failure(asyncio_body_awaits_trio) == (
        "asyncio_body_awaits_trio: the test body awaited trio at test_small_form_outcomes.py:"
        f"{_line_of('await trio.sleep(1)')} in asyncio_body_awaits_trio, which an asyncio "
        'test cannot run; drop runtime="asyncio" (a trio test) or make the body asyncio code')
    assert not list(here.glob("traces/**/*.jsonl"))


def test_pytest_fail_in_the_body_is_a_violation_told_at_the_user_s_line(here: Path) -> None:
    message = _failure(calls_pytest_fail)
    first = message.splitlines()[0]
    assert first.startswith("calls_pytest_fail: assert violated (seed 0, "), first
    assert first.endswith("): the refund was paid twice (test_small_form_outcomes.py:"
                          f"{_line_of('pytest.fail(')} in calls_pytest_fail)"), first
    assert "NoUncaughtError" not in message and "(outcomes.py:" not in message, message
    again = invoke(*shlex.split(_replay_line(message))[1:])
    assert again.exit_code == 1 and again.stdout.startswith("identical: "), again.output


def test_pytest_xfail_in_the_body_xfails_the_test_and_dst_run_counts_it_xfailed(
        here: Path) -> None:
    with pytest.raises(pytest.xfail.Exception, match=r"known race, fixed in 2\.0"):
        calls_pytest_xfail()
    ran = invoke("run", f"{__file__}::calls_pytest_xfail", "--seeds", "5", "--workers", "1")
    assert ran.exit_code == 5, ran.output  # nothing tested, as every seed skipping
    assert ": 5 runs (5 xfailed), 0 failed, " in ran.stdout, ran.output
    assert "\n5 seeds xfailed by pytest.xfail() in the test body (0, 1, 2, ...): known race, " \
           "fixed in 2.0; an xfailed seed tested nothing and is not counted as passed\n" \
           in ran.stdout, ran.output
    assert "skip" not in ran.stdout, ran.output
    assert ran.stderr.strip() == (
        f"error: {__file__}::calls_pytest_xfail: every seed xfailed (pytest.xfail(): known "
        "race, fixed in 2.0), so nothing was tested; run it where it applies, or drop the "
        "xfail"), ran.stderr
    doc = json.loads(invoke("run", f"{__file__}::calls_pytest_xfail", "--seeds", "5",
                            "--workers", "1", "--json").stdout)
    assert (doc["skipped"], doc["skip_reasons"]) == (0, {}), doc
    assert (doc["xfailed"], doc["xfail_reasons"]) == (5, {"known race, fixed in 2.0": 5}), doc


def test_dst_run_tells_skipped_and_xfailed_seeds_of_one_test_apart(here: Path) -> None:
    ran = invoke("run", f"{__file__}::skips_or_xfails", "--seeds", "40", "--workers", "1",
                 "--json")
    doc = json.loads(ran.stdout)
    skipped, xfailed = doc["skipped"], doc["xfailed"]
    assert 0 < skipped < 40 and skipped + xfailed == 40, doc
    assert doc["skip_reasons"] == {"coin says skip": skipped}, doc
    assert doc["xfail_reasons"] == {"known race": xfailed}, doc
    ran = invoke("run", f"{__file__}::skips_or_xfails", "--seeds", "40", "--workers", "1")
    assert ran.exit_code == 5, ran.output
    assert f": 40 runs ({skipped} skipped, {xfailed} xfailed), 0 failed, " in ran.stdout, \
        ran.output
    assert (f"\n{skipped} seed{'s' * (skipped != 1)} skipped by pytest.skip() in the test "
            f"body: coin says skip; {xfailed} seed{'s' * (xfailed != 1)} xfailed by "
            "pytest.xfail() in the test body: known race; first seeds (0, 1, 2, ...); a "
            "skipped or xfailed seed tested nothing") in ran.stdout, ran.output
    assert "every seed skipped (pytest.skip(): coin says skip) or xfailed (pytest.xfail(): " \
           "known race), so nothing was tested" in ran.stderr, ran.stderr


@pytest.mark.parametrize(("body", "line"), [
    (raises_in_a_task, 'raise ValueError("card declined")\n\n    async with trio'),
    (raises_in_the_body, 'raise ValueError("card declined")  # trio'),
    (aio_raises_in_the_body, 'raise ValueError("card declined")\n\n\n@dst.test(seeds=2000)'),
])
def test_an_uncaught_error_in_a_body_is_told_at_the_test_file_s_line_never_dst_s(
        here: Path, body: dst.Scenario, line: str) -> None:
    name = body.__name__
    at = f"test_small_form_outcomes.py:{_line_of(line)} in "
    message = _failure(body)
    first = message.splitlines()[0]
    assert first.startswith(f"{name}: NoUncaughtError violated (seed 0, "), first
    assert f"raised ValueError: card declined at {at}" in first, first
    assert not _names_dst_frames(message), message
    ran = invoke("run", f"{__file__}::{name}", "--seeds", "3", "--workers", "1")
    assert ran.exit_code == 1 and f"card declined at {at}" in ran.stdout, ran.output
    shown = invoke("show", "--verbose", shlex.split(_replay_line(ran.stdout))[2])
    assert shown.exit_code == 0 and f"  in {at}" in shown.stdout, shown.output
    for told in (ran.stdout, shown.stdout):
        assert not _names_dst_frames(told), told


def _names_dst_frames(text: str) -> bool:
    """Whether ``text`` names a file of dst's own (the checkout holding these tests may itself
    be a directory called dst: a replay line names the test file under it)."""
    return "small.py" in text or any(f"dst/{part}/" in text for part in
                                      ("small", "sim", "runner", "commands", "trace"))


def test_a_test_skipped_on_some_seeds_passed_on_the_others_and_says_how_many(
        here: Path) -> None:
    try:
        skips_on_some_seeds()  # neither skipped nor failed
    except pytest.skip.Exception as exc:
        pytest.fail(f"the whole test was skipped though some seeds ran: {exc}")
    told = [line for line in partly_skipped() if "::skips_on_some_seeds:" in line]
    assert told and told[-1].split("::", 1)[1].startswith("skips_on_some_seeds: "), told
    skipped = int(told[-1].split(": ", 1)[1].split(" ", 1)[0])
    assert 0 < skipped < 50
    assert told[-1].endswith(f"{skipped} of 50 seeds skipped (coin says skip); it passed "
                             f"on the other {50 - skipped}"), told
    ran = invoke("run", f"{__file__}::skips_on_some_seeds", "--seeds", "50", "--workers", "1")
    assert ran.exit_code == 0 and f": 50 runs ({skipped} skipped), 0 failed, " in ran.stdout, \
        ran.output


def test_a_seed_that_runs_past_the_skips_still_fails_the_test(here: Path) -> None:
    message = _failure(skips_on_some_seeds_fails_on_the_others)
    assert "VIOLATED assert: bug on the path that runs" in message, message


def test_under_pytest_a_partly_skipped_test_passes_with_one_line_and_a_skipped_one_skips(
        tmp_path: Path) -> None:
    (tmp_path / "test_partly.py").write_text(
        "import pytest\nimport trio\nimport dst\n\n\n@dst.test(seeds=50)\n"
        "async def test_partly(env):\n    await trio.sleep(0)\n"
        "    if env.rng.random() < 0.5:\n        pytest.skip('coin says skip')\n\n\n"
        "@dst.test(seeds=5)\nasync def test_always():\n    pytest.skip('no GPU here')\n\n\n"
        "@dst.test(seeds=5)\nasync def test_xfails():\n    pytest.xfail('known')\n",
        encoding="utf-8")
    done = _pytest(tmp_path, "-rsx", "test_partly.py")
    out = done.stdout
    assert done.returncode == 0 and "1 passed, 1 skipped, 1 xfailed" in out, out + done.stderr
    told = [line for line in out.splitlines() if " seeds skipped (" in line]
    assert len(told) == 1 and told[0].startswith("test_partly.py::test_partly: "), out
    assert told[0].endswith(" of 50 seeds skipped (coin says skip); it passed on the "
                            f"other {50 - int(told[0].split(': ')[1].split()[0])}"), told
    assert "SKIPPED [1] test_partly.py:15: no GPU here" in out, out
    assert "XFAIL test_partly.py::test_xfails - known" in out, out


def test_the_first_failing_seed_stops_the_test(here: Path) -> None:
    RAN.clear()
    message = _failure(fails_at_seed_1)
    assert "(seed 1, the 2nd seed run;" in message, message
    assert len(RAN) == 2, f"the body ran {len(RAN)} times"


def test_a_trio_body_under_pytest_in_a_child_interpreter_reports_asyncio_misuse(
        tmp_path: Path) -> None:
    (tmp_path / "test_mixed.py").write_text(
        "import asyncio\nimport dst\n\n\n@dst.test(seeds=5)\nasync def test_mixed():\n"
        "    await asyncio.sleep(0)\n", encoding="utf-8")
    done = _pytest(tmp_path, "test_mixed.py")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "test_mixed: the test body awaited asyncio at test_mixed.py:7 in test_mixed, " \
           "which a trio test cannot run" in done.stdout, done.stdout
    assert "unrecognized yield message" not in done.stdout, done.stdout


def _line_of(text: str) -> int:
    """The line of this file at which ``text`` starts (first found)."""
    source = Path(__file__).read_text(encoding="utf-8")
    return source[:source.index(text)].count("\n") + 1
