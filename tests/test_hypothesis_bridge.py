"""The Hypothesis bridge: a pytest test draws whole dst runs, and Hypothesis finds and shrinks."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, Phase, given, seed, settings

from dst.cli import main
from dst.hypothesis import DrawnRun, runs

#: The Hypothesis seed the default run tries; DST_SOAK judges the bridge on twenty.
SEEDS = range(1)
soak = pytest.mark.skipif(not os.environ.get("DST_SOAK"), reason="set DST_SOAK=1 to soak")


def _lost_update_test(tmp_path: Path, hypothesis_seed: int) -> AssertionError | None:
    @seed(hypothesis_seed)
    @settings(database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(runs("approval", spend_mode="before", out=tmp_path))
    def test_a_yes_is_spent_once(run: DrawnRun) -> None:
        assert "AtMostOnce" not in run.violated, run.explain()

    try:
        test_a_yes_is_spent_once()
    except AssertionError as exc:
        return exc
    return None


@pytest.mark.parametrize("hypothesis_seed", SEEDS)
def test_hypothesis_finds_and_shrinks_the_approval_lost_update(
        tmp_path: Path, hypothesis_seed: int) -> None:
    failure = _lost_update_test(tmp_path, hypothesis_seed)
    assert failure is not None, "the default example budget did not find the lost update"
    message = str(failure)
    assert "AtMostOnce violated" in message and "replay: dst replay " in message
    path = message.split("replay: dst replay ", 1)[1].split()[0]
    replayed = CliRunner().invoke(main, ["replay", path])
    assert replayed.exit_code == 1 and replayed.output.startswith("identical"), replayed.output
    steps = int(message.split(" steps:", 1)[0].rsplit(" ", 1)[1])
    assert steps <= 30  # shrunk: random walks that break it take longer stories


def test_a_correct_config_passes_every_drawn_run(tmp_path: Path) -> None:
    @settings(database=None, deadline=None, max_examples=60)
    @given(runs("approval", out=tmp_path))
    def test_cas(run: DrawnRun) -> None:
        assert run.passed, run.explain()

    test_cas()
    assert not list(tmp_path.iterdir())  # no failing run, no trace written


@pytest.mark.parametrize(("switches", "breaks"), [
    ({"spend_mode": "before"}, "AtMostOnce"),
    ({"spend_mode": "after"}, "NoResurrection"),
    ({"spend_mode": "before", "fresh_view": False}, "FreshRestore"),
    ({"disclose_on_error": False}, "EffectsDisclosed"),
])
def test_drawn_runs_find_each_planted_approval_bug(
        tmp_path: Path, switches: dict[str, object], breaks: str) -> None:
    """Found within the default example budget, under a seed nobody picked for it."""
    scenario = "approval_disclosure" if "disclose_on_error" in switches else "approval"

    @seed(12345)
    @settings(database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=[HealthCheck.too_slow])
    @given(runs(scenario, switches, out=tmp_path))
    def test_it_holds(run: DrawnRun) -> None:
        assert breaks not in run.violated, run.explain()

    with pytest.raises(AssertionError, match=f"{breaks} violated"):
        test_it_holds()


@soak
def test_hypothesis_finds_the_lost_update_under_at_least_19_of_20_seeds(tmp_path: Path) -> None:
    found = sum(_lost_update_test(tmp_path / str(k), k) is not None for k in range(20))
    assert found >= 19, f"found under {found} of 20 Hypothesis seeds"


def _tracer_recording_scenario(seen: list[object]) -> Any:
    """Two workers racing on a store; each records the trace function it runs under."""
    from dst import Env

    from .simkit import inline

    def setup(sim: Any, _config: dict[str, Any]) -> None:
        sim.store("db")

        async def worker(env: Env) -> None:
            seen.append(sys.gettrace())
            for i in range(3):
                await env.store.put(f"k{i}", i)

        sim.process("a", worker, stores=["db"])
        sim.process("b", worker, stores=["db"])

    return inline(setup)


def _always_failing(scenario: Any, tmp_path: Path) -> None:
    @seed(0)
    @settings(database=None, deadline=None, max_examples=5,
              suppress_health_check=list(HealthCheck))
    @given(runs(scenario, out=tmp_path))
    def test_fails(run: DrawnRun) -> None:
        raise AssertionError("always")

    with pytest.raises(AssertionError):
        test_fails()


def test_shrinking_a_drawn_run_does_not_trace_the_simulation(tmp_path: Path) -> None:
    """After a failure Hypothesis traces every line of each example (its explain phase);
    inside a drawn run that would be every line of the kernel and the runtime."""
    seen: list[object] = []
    _always_failing(_tracer_recording_scenario(seen), tmp_path)
    assert len(seen) > 10  # generated, then shrunk: many runs, most after the failure
    owners = {type(getattr(t, "__self__", t)).__module__ for t in seen}
    assert not any(m.startswith("hypothesis") for m in owners), owners


def test_a_coverage_tool_s_tracer_still_traces_a_drawn_run(tmp_path: Path) -> None:
    seen: list[object] = []

    def user_tracer(frame: Any, event: str, arg: Any) -> None:
        return None

    previous = sys.gettrace()
    sys.settrace(user_tracer)
    try:
        _always_failing(_tracer_recording_scenario(seen), tmp_path)
    finally:
        sys.settrace(previous)
    assert seen and all(t is user_tracer for t in seen)
