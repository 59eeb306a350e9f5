"""One scenario, one config, many seeds: the results dst reports on."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..scenario import Scenario
from ..sim.kernel import Sim
from ..sim.run import run_sims
from ..sim.strategy import RandomWalk, Replay, Strategy
from ..trace.compare import replay_divergence
from ..trace.model import Trace, make_header, record_to_dict


@dataclass
class RunResult:
    seed: int
    verdict: str
    violated: list[str]
    steps: int
    virtual_time: float
    ended: str
    sim: Sim
    scenario: str
    config: dict[str, Any]
    strategy: str
    divergence: str | None = None

    def trace(self) -> Trace:
        sim = self.sim
        header = make_header(
            self.scenario, self.config, self.seed, self.strategy,
            dict(sim.faults.as_dict()), sim.max_steps,
        )
        records = [record_to_dict(r) for r in sim.records]
        footer = {
            "verdict": self.verdict, "violated": self.violated, "steps": self.steps,
            "virtual_time": self.virtual_time, "ended": self.ended,
        }
        return Trace(header, records, footer)


def _result(scenario: Scenario, config: dict[str, Any], sim: Sim) -> RunResult:
    return RunResult(
        seed=sim.seed, verdict=sim.verdict, violated=list(sim.violated), steps=sim.step,
        virtual_time=sim.now, ended=sim.ended or "quiescent", sim=sim,
        scenario=scenario.name, config=config, strategy=sim.strategy.name,
        divergence=str(sim.divergence) if sim.divergence else None,
    )


def run_seeds(
    scenario: Scenario,
    config: Mapping[str, Any],
    seeds: Iterable[int],
    on_result: Callable[[RunResult], None],
    *,
    strategy: Callable[[int], Strategy] = RandomWalk,
) -> None:
    """Run ``scenario`` under ``config`` for each seed; ``on_result`` after each."""
    cfg = dict(config)
    faults = scenario.fault_plan(cfg)

    def jobs() -> Iterable[tuple[Sim, Callable[[Sim], None]]]:
        for seed in seeds:
            sim = Sim(seed, strategy(seed), faults=faults, max_steps=scenario.max_steps)
            yield sim, lambda s: scenario.build(s, cfg)

    run_sims(jobs(), lambda sim: on_result(_result(scenario, cfg, sim)))


def run_one(
    scenario: Scenario, config: Mapping[str, Any], seed: int, *,
    strategy: Callable[[int], Strategy] = RandomWalk,
) -> RunResult:
    out: list[RunResult] = []
    run_seeds(scenario, config, [seed], out.append, strategy=strategy)
    return out[0]


def replay_trace(scenario: Scenario, trace: Trace) -> RunResult:
    """Re-run ``trace`` forcing its recorded choices; ``divergence`` says how it differs.

    ``divergence`` is None when every record came out the same, and otherwise
    names the first record that differs (``dst.trace.compare.replay_divergence``),
    which can come before the step at which the forced choices stopped fitting.
    """
    config = scenario.checked_config(trace.header["config"])
    decisions = trace.decisions
    result = run_one(
        scenario, config, int(trace.header["seed"]),
        strategy=lambda _seed: Replay(decisions),
    )
    result.divergence = replay_divergence(trace, result.trace(), result.divergence)
    return result
