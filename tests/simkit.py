"""Tiny helpers for kernel tests: run an inline scenario for one or many seeds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dst import Scenario, Sim
from dst.runner.single import RunResult, run_one, run_seeds
from dst.sim.faults import NO_FAULTS, FaultPlan


def inline(
    setup: Callable[[Sim, dict[str, Any]], Any],
    *,
    faults: FaultPlan = NO_FAULTS,
    invariants: dict[str, Callable[[Any], object]] | None = None,
    max_steps: int = 5000,
) -> Scenario:
    scenario = Scenario("inline", doc="a test scenario", faults=faults, max_steps=max_steps)
    scenario.setup(setup)
    for name, fn in (invariants or {}).items():
        scenario.invariant(name)(fn)
    return scenario


def one(scenario: Scenario, seed: int = 0) -> RunResult:
    return run_one(scenario, scenario.config(), seed)


def many(scenario: Scenario, seeds: range, config: dict[str, Any] | None = None) -> list[RunResult]:
    out: list[RunResult] = []
    run_seeds(scenario, config if config is not None else scenario.config(), seeds, out.append)
    return out


def events(result: RunResult) -> list[tuple[str, str, dict[str, Any]]]:
    return [(r["actor"], r["event"], r["fields"]) for r in result.trace().records
            if r["type"] == "event"]
