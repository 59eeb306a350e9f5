"""The litmus suite: classic concurrency bugs in plain trio code, each found by search.

Each case in this directory is a scenario file of the kind a user writes for
their own system, run exactly as ``dst run FILE.py`` runs it: a small piece of
an agent runtime with the classic bug behind ``fixed=false`` and its correct
form as the default.  In the first five the race window holds no ``Env`` call
at all (only trio checkpoints: ``trio.sleep(0)``, a lock, an event, a memory
channel, a timeout), so a scheduler that decided only at ``Env`` calls could
never find them; the last two need the outside world's faults (a lost or late
reply, a partition).  The ``aio_`` cases are asyncio twins of the first ones, run
as asyncio processes (``runtime="asyncio"``): the window holds asyncio yields
only (``asyncio.sleep(0)``, an event, a queue, a timeout).

For every case: the bug is found within a thousand seeds and the first
failure breaks only what the bug declares; the correct form passes
``PASS_SEEDS`` seeds (``SOAK_SEEDS`` with ``DST_SOAK`` set); and the first
failure, read back from its trace text, replays to the same records, byte for
byte (only the header's strategy differs: ``replay``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from dst import Scenario
from dst.registry import load
from dst.runner.single import RunResult, replay_trace, run_seeds
from dst.trace.codec import loads_trace

HERE = Path(__file__).parent
CASES = [
    "check_then_act", "lost_wakeup", "singleflight", "channel_cancel", "half_update",
    "timeout_compensation", "lease_fencing",
    "aio_check_then_act", "aio_lost_wakeup", "aio_queue_cancel",
]

#: Seeds within which each bug must be found.
FIND_WITHIN = 1000
#: Seeds each correct variant must pass in the ordinary suite, and in a soak.
PASS_SEEDS = 2000
SOAK_SEEDS = 10_000

soak = pytest.mark.skipif(not os.environ.get("DST_SOAK"), reason="set DST_SOAK=1 to soak")


def _scenario(case: str) -> Scenario:
    return load(str(HERE / f"{case}.py"))


def _first_failure(scenario: Scenario, config: dict[str, object], limit: int) -> RunResult | None:
    """The first seed below ``limit`` whose run fails, searching as ``dst run`` does."""
    found: list[RunResult] = []

    def seeds() -> Iterator[int]:
        for seed in range(limit):
            if found:
                return
            yield seed

    def on_result(result: RunResult) -> None:
        if result.verdict != "pass" and not found:
            found.append(result)

    run_seeds(scenario, config, seeds(), on_result)
    return found[0] if found else None


def _failures(scenario: Scenario, seeds: int) -> list[tuple[int, list[str], str]]:
    bad: list[tuple[int, list[str], str]] = []

    def on_result(result: RunResult) -> None:
        if result.violated or result.ended == "bound":  # a cut run is never a pass
            bad.append((result.seed, result.violated, result.ended))

    run_seeds(scenario, scenario.default_config(), range(seeds), on_result)
    return bad


@pytest.mark.parametrize("case", CASES)
def test_each_case_declares_one_bug_and_defaults_to_the_fix(case: str) -> None:
    scenario = _scenario(case)
    assert scenario.default_config() == {"fixed": True}
    assert [dict(bug.config) for bug in scenario.planted_bugs] == [{"fixed": False}]


@pytest.mark.parametrize("case", CASES)
def test_the_bug_is_found_within_a_thousand_seeds_and_replays_exactly(case: str) -> None:
    scenario = _scenario(case)
    bug = scenario.planted_bugs[0]
    failure = _first_failure(scenario, scenario.checked_config(dict(bug.config)), FIND_WITHIN)
    assert failure is not None, f"{case}: the bug was not found in {FIND_WITHIN} seeds"
    assert failure.violated and set(failure.violated) <= set(bug.breaks), (
        f"{case} seed {failure.seed} broke {failure.violated}, not what the bug declares "
        f"({list(bug.breaks)})"
    )
    written = loads_trace(failure.trace().text())
    replayed = replay_trace(scenario, written)
    assert replayed.divergence is None, replayed.divergence
    assert replayed.trace().record_lines() == written.record_lines()
    assert (replayed.violated, replayed.ended) == (failure.violated, failure.ended)


@pytest.mark.parametrize("case", CASES)
def test_the_fix_passes(case: str) -> None:
    assert _failures(_scenario(case), PASS_SEEDS) == []


@soak
@pytest.mark.soak
@pytest.mark.parametrize("case", CASES)
def test_the_fix_passes_a_soak(case: str) -> None:
    assert _failures(_scenario(case), SOAK_SEEDS) == []


def test_the_payment_bug_needs_the_payment_services_faults() -> None:
    """Without lost or late replies the agent's timeout only ever fires before the charge."""
    scenario = _scenario("timeout_compensation")
    quiet = replace(scenario, faults=replace(scenario.fault_plan({}), services={}))
    config = quiet.checked_config({"fixed": False})
    assert _first_failure(quiet, config, FIND_WITHIN) is None
    assert _first_failure(scenario, config, FIND_WITHIN) is not None
