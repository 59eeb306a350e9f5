"""`dst explore --check-reduction` on the shipped scenarios' rows: the reduced search
reaches plain depth-first search's verdicts and shortest violations.

Plain search runs every interleaving, so the larger approval rows take minutes: they
run with the soak (``DST_SOAK=1``), as does every scenario at 14 steps; one approval row to
the step of its longer shortest violation and the small scenarios run always.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from dst.cli import main

NO_FAULTS = ("--crashes", "0", "--drops", "0", "--dups", "0", "--preemptions", "0",
             "--partitions", "0", "--no-service-faults")
soak = pytest.mark.skipif(not os.environ.get("DST_SOAK"), reason="soak: set DST_SOAK=1")

APPROVAL = ("approval", "-c", "llm=happy", "-c", "crashes=0", "-c", "drops=0", "-c", "dups=0")


SHIPPED = ("approval_disclosure", "approval_params", "approval_surface", "replenish_concurrency",
           "replenish_crash", "replenish_deploy", "replenish_history", "replenish_lost_goods",
           "replenish_lost_reply", "replenish_outage", "replenish_price",
           "replenish_unreachable", "replenish_untrusted")


#: replenish_history's slow timers (its plan's five) make 10 steps a 100 s search of its
#: own, and approval_surface's seven invariants over two turns a 30 s one (37,813 plain
#: schedules); 8 steps take seconds (506 schedules still cut at the bound), and the soak row
#: below takes every scenario to 14.
SMALL_DEPTH = {"replenish_history": 8, "approval_surface": 8}


@pytest.mark.parametrize("name", SHIPPED)
def test_check_reduction_passes_on_every_shipped_scenario_to_a_small_depth(
        name: str, tmp_path: Path) -> None:
    depth = str(SMALL_DEPTH.get(name, 10))
    result = CliRunner().invoke(main, ["explore", name, *NO_FAULTS, "--max-steps", depth,
                                       "--check-reduction", "--out", str(tmp_path)])
    assert result.exit_code in (0, 1), result.output
    assert "same verdicts and shortest violations" in result.output


@soak
@pytest.mark.parametrize("name", SHIPPED)
def test_check_reduction_passes_on_every_shipped_scenario_deeper(
        name: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["explore", name, *NO_FAULTS, "--max-steps", "14",
                                       "--check-reduction", "--max-schedules", "2000000",
                                       "--out", str(tmp_path)])
    assert result.exit_code in (0, 1), result.output
    assert "same verdicts and shortest violations" in result.output


#: approval with spend_mode=after breaks NoResurrection in 5 steps and AtMostOnce in 11:
#: searched to 11 steps both violations lie within the bound, one of them on it (5,508 plain
#: schedules, seconds); unbounded (21,605 plain schedules, 16 deep) it is a soak row below.
AFTER_LONGEST_SHORTEST = 11


def test_check_reduction_passes_on_approval_after_to_its_longer_shortest_violation(
        tmp_path: Path) -> None:
    result = CliRunner().invoke(main, [
        "explore", *APPROVAL, "-c", "spend_mode=after", "-c", "fresh_view=false",
        "--invariant", "AtMostOnce", "--invariant", "NoResurrection", *NO_FAULTS,
        "--max-steps", str(AFTER_LONGEST_SHORTEST), "--check-reduction",
        "--out", str(tmp_path)])
    assert result.exit_code == 1, result.output
    assert "same verdicts and shortest violations" in result.output
    assert f"AtMostOnce: VIOLATED, shortest {AFTER_LONGEST_SHORTEST} steps" in result.output
    assert "NoResurrection: VIOLATED, shortest 5 steps" in result.output


@pytest.mark.parametrize("args", [
    pytest.param(("counter", "-c", "cas=false", "-c", "increments=2"), id="counter-blind-put"),
    pytest.param(("counter", "-c", "increments=2"), id="counter-cas"),
    pytest.param(("ping", "-c", "dedup=false", "-c", "requests=1", "-c", "attempts=2"),
                 id="ping-blind"),
    pytest.param(("ping", "-c", "requests=1", "-c", "attempts=2"), id="ping-dedup"),
    pytest.param((*APPROVAL, "-c", "spend_mode=after", "-c", "fresh_view=false",
                  "--invariant", "AtMostOnce", "--invariant", "NoResurrection"),
                 id="approval-after", marks=soak),
    pytest.param((*APPROVAL, "-c", "spend_mode=before", "-c", "fresh_view=true",
                  "--invariant", "AtMostOnce"), id="approval-before", marks=soak),
    pytest.param((*APPROVAL, "-c", "spend_mode=before", "-c", "serialize=true",
                  "--invariant", "AtMostOnce", "--invariant", "NoResurrection"),
                 id="approval-serialised", marks=soak),
    pytest.param((*APPROVAL, "-c", "spend_mode=cas", "-c", "serialize=true",
                  "--invariant", "AtMostOnce", "--invariant", "NoResurrection"),
                 id="approval-cas", marks=soak),
])
def test_check_reduction_passes_on_a_shipped_row(args: tuple[str, ...], tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["explore", *args, *NO_FAULTS, "--check-reduction",
                                       "--max-schedules", "2000000", "--out", str(tmp_path)])
    assert result.exit_code in (0, 1), result.output
    assert "same verdicts and shortest violations" in result.output
