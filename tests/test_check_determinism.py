"""`dst run --check-determinism` runs each seed again, in the same process and under other hash
seeds, and names the first differing record."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from dst.cli import main

LEAKY = '''
import structlog
from dst import Scenario

log = structlog.get_logger()
scenario = Scenario("leaky", doc="keeps state in a module global between runs")
RUNS = [0]


@scenario.setup
def setup(sim, config):
    async def worker(env):
        await env.store.get("x")
        RUNS[0] += 1
        log.info("run number", n=RUNS[0])   # differs between two runs of one seed

    sim.process("worker", worker, stores=["db"])
'''

STEADY = LEAKY.replace("RUNS[0] += 1", "pass").replace("n=RUNS[0]", "n=1")


def _check(tmp_path: Path, source: str) -> Result:
    path = tmp_path / "scenario.py"
    path.write_text(source)
    return CliRunner().invoke(main, ["run", str(path), "--seeds", "3", "--check-determinism",
                                     "--out", str(tmp_path / "out")])


def test_check_determinism_reports_the_first_differing_record(tmp_path: Path) -> None:
    result = _check(tmp_path, LEAKY)
    assert result.exit_code == 3, result.output
    assert "NONDETERMINISTIC seed 0" in result.output
    assert '"event":"run number"' in result.output


def test_check_determinism_runs_a_seed_twice_in_a_row_so_state_that_cycles_shows(
        tmp_path: Path) -> None:
    # Run parity: a chunk run whole and then again pairs runs a chunk (an even count) apart,
    # whose parities agree; a seed's two runs in a row never do.
    cycling = LEAKY.replace("n=RUNS[0]", "n=RUNS[0] % 2")
    path = tmp_path / "scenario.py"
    path.write_text(cycling)
    result = CliRunner().invoke(main, ["run", str(path), "--seeds", "20", "--workers", "1",
                                       "--check-determinism", "--out", str(tmp_path / "o")])
    assert result.exit_code == 3, result.output
    assert "determinism: 0 of 20 seeds replayed identically" in result.output


def test_check_determinism_passes_a_deterministic_scenario(tmp_path: Path) -> None:
    result = _check(tmp_path, STEADY)
    assert result.exit_code == 0, result.output
    assert "3 of 3 seeds replayed identically" in result.output


@pytest.mark.parametrize(("scenario", "seeds"), [("counter", 60), ("approval", 40),
                                                 ("replenish_crash", 10)])
def test_shipped_scenarios_repeat_themselves_under_other_hash_seeds(
    tmp_path: Path, scenario: str, seeds: int
) -> None:
    result = CliRunner().invoke(main, ["run", scenario, "--seeds", str(seeds),
                                       "--check-determinism", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert f"determinism: {seeds} of {seeds} seeds replayed identically" in result.stdout
