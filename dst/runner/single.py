"""One scenario, one config, many seeds: the results dst reports on."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from .. import coverage
from ..errors import UsageError
from ..scenario import Scenario
from ..sim.faults import FaultPlan, ServiceFaults
from ..sim.kernel import Sim
from ..sim.run import run_sims
from ..sim.strategy import RandomWalk, Replay, Strategy
from ..trace.compare import replay_divergence
from ..trace.model import Trace, make_header, record_to_dict
from .paths import MemoStats, PathMemo
from .paths import reuse as reused


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
    #: Coverage (``dst.coverage``): the probes the run called, those that held,
    #: and the digests of the distinct fingerprints it went through.
    probes_declared: frozenset[str] = field(default_factory=frozenset)
    probes_reached: frozenset[str] = field(default_factory=frozenset)
    states: frozenset[int] = field(default_factory=frozenset)
    #: The header's ``scenario_file``: where a scenario loaded from a file lives,
    #: relative to where the run was asked for (``dst.trace.model.scenario_file``).
    scenario_file: str | None = None
    #: The seed's decisions were an earlier seed's, whose run (confirmed by a second)
    #: stands for it record for record: it was not run again (``dst.runner.paths``).
    reused: bool = False

    def trace(self) -> Trace:
        sim = self.sim
        header = make_header(
            self.scenario, self.config, self.seed, self.strategy,
            dict(sim.faults.as_dict()), sim.max_steps, self.scenario_file,
        )
        records = [record_to_dict(r) for r in sim.records]
        footer = {
            "verdict": self.verdict, "violated": self.violated, "steps": self.steps,
            "virtual_time": self.virtual_time, "ended": self.ended,
        }
        return Trace(header, records, footer)


_NONE: frozenset[Any] = frozenset()


def _result(scenario: Scenario, config: dict[str, Any], sim: Sim) -> RunResult:
    cov = coverage.of(sim)
    # Positional, in the order of the fields: keyword arguments to a class cost a
    # dict per call, and this runs once per seed.
    return RunResult(
        sim._seed,  # seed (not the property: dst reading it is no draw from it)
        sim.verdict,  # verdict
        list(sim.violated),  # violated
        sim.step,  # steps
        sim.now,  # virtual_time
        sim.ended or "quiescent",  # ended
        sim,  # sim
        scenario.name,  # scenario
        config,  # config
        sim.strategy.name,  # strategy
        str(sim.divergence) if sim.divergence else None,  # divergence
        frozenset(cov.declared) if cov.declared else _NONE,  # probes_declared
        frozenset(cov.reached) if cov.reached else _NONE,  # probes_reached
        frozenset(cov.states.values()) if cov.states else _NONE,  # states
    )


def run_seeds(
    scenario: Scenario,
    config: Mapping[str, Any],
    seeds: Iterable[int],
    on_result: Callable[[RunResult], None],
    *,
    strategy: Callable[[int], Strategy] = RandomWalk,
    plan: Callable[[int, FaultPlan], FaultPlan] | None = None,
    faults: FaultPlan | None = None,
    reuse: bool | PathMemo = False,
) -> MemoStats | None:
    """Run ``scenario`` under ``config`` for each seed; ``on_result`` after each.

    ``faults`` replaces the scenario's fault plan (a replay runs under the plan
    its trace header records); ``plan(seed, faults)`` gives each seed a plan of
    its own (``swarm``).  Either way the plan a run used is in its header.

    With ``reuse``, under the random walk, a seed whose decisions an earlier seed
    of this call already took (and a second one confirmed) is answered with that
    run's result, without running (``dst.runner.paths``): ``dst run`` does, and
    says how many.  Off by default: code that watches its own runs (a setup that
    counts them, or keeps the world it built for a test to look at) sees every
    seed run.  A ``PathMemo`` given is used, and kept, across calls with the same
    scenario, config and plan.  Returns what the memo did, or None when none was
    used.
    """
    cfg = dict(config)
    base = faults if faults is not None else scenario.fault_plan(cfg)
    memo = None
    if reuse is not False and strategy is RandomWalk and plan is None:
        memo = reuse if isinstance(reuse, PathMemo) else PathMemo()
    mark = 0

    def setup(sim: Sim) -> None:
        scenario.build(sim, cfg)

    def jobs() -> Iterable[tuple[Sim, Callable[[Sim], None]]]:
        nonlocal mark
        for seed in seeds:
            if memo is not None and memo.on:
                same = memo.lookup(seed)
                if same is not None:
                    on_result(reused(same, seed))
                    continue
                sim = Sim(seed, memo.strategy(seed), faults=base, max_steps=scenario.max_steps)
                mark = memo.mark()
                yield sim, setup
                continue
            sim = Sim(seed, strategy(seed), faults=plan(seed, base) if plan else base,
                      max_steps=scenario.max_steps)
            yield sim, setup

    def done(sim: Sim) -> None:
        if memo is None:
            on_result(_result(scenario, cfg, sim))
            return
        clean = memo.clean(sim, mark)  # before ``_result`` reads the seed
        result = _result(scenario, cfg, sim)
        memo.ran(sim, result, clean)
        on_result(result)

    run_sims(jobs(), done)
    return None if memo is None else memo.stats


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
    out: list[RunResult] = []
    # The header's plan is the truth of what ran: a strategy may have drawn a
    # plan of its own for the seed (``swarm``), or the scenario changed since.
    recorded = trace.header.get("faults")
    plan = scenario.fault_plan(config)
    if isinstance(recorded, dict) and recorded != plan.as_dict():
        plan = plan_from_dict(recorded)
    run_seeds(scenario, config, [int(trace.header["seed"])], out.append,
              strategy=lambda _seed: Replay(decisions), faults=plan)
    result = out[0]
    result.divergence = replay_divergence(trace, result.trace(), result.divergence)
    return result


_PLAN_FIELDS = {f.name for f in fields(FaultPlan)}
_TUPLE_FIELDS = ("crash_only", "crash_at", "partition_of")


def plan_from_dict(recorded: Mapping[str, Any]) -> FaultPlan:
    """The ``FaultPlan`` a trace header records (``FaultPlan.as_dict`` read back).

    A field this dst does not know, or a value of the wrong shape, is refused in
    one line: replaying under a plan other than the recorded one would not be a
    replay.
    """
    unknown = sorted(set(recorded) - _PLAN_FIELDS)
    if unknown:
        raise UsageError(f"the trace's fault plan has {', '.join(map(repr, unknown))}, which "
                         "this dst does not know; replay it with the dst that recorded it")
    values = dict(recorded)
    # A header without ``max_slow`` was written before timers were budgeted, when
    # every timer could fire before runnable work: the plan it records is that.
    values.setdefault("max_slow", None)
    try:
        for name in _TUPLE_FIELDS:
            if name in values:
                values[name] = tuple(values[name])
        if "services" in values:
            values["services"] = {name: ServiceFaults(**sf)
                                  for name, sf in dict(values["services"]).items()}
        return FaultPlan(**values)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"the trace's fault plan is malformed ({exc}); replay a trace dst "
                         "wrote") from None
