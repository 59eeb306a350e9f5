"""Every planted bug any shipped scenario declares is still found by running seeds.

This is the promise behind ``planted_bug(...)``: a scenario says which switch setting
reintroduces which bug and which invariants it must break, and dst keeps checking
that a random search finds it (within 1,000 seeds, stopping at the first seeds that
show every declared invariant broken).
"""

from __future__ import annotations

import pytest

from dst.registry import all_scenarios
from dst.runner.single import RunResult, run_seeds

#: Seeds a planted bug gets before the test calls it lost.
BUDGET = 1000
#: Seeds per batch: the search stops after the batch that covers every invariant.
BATCH = 25

CASES = [
    pytest.param(s, i, id=f"{s.name}:{' '.join(f'{k}={v}' for k, v in b.config.items())}")
    for s in all_scenarios()
    for i, b in enumerate(s.planted_bugs)
]


def test_every_shipped_scenario_declares_at_least_one_planted_bug() -> None:
    assert all(s.planted_bugs for s in all_scenarios())


@pytest.mark.parametrize(("scenario", "index"), CASES)
def test_a_planted_bug_is_found_within_its_budget(scenario: object, index: int) -> None:
    from dst.scenario import Scenario

    assert isinstance(scenario, Scenario)
    bug = scenario.planted_bugs[index]
    config = scenario.config({k: str(v).lower() if isinstance(v, bool) else str(v)
                              for k, v in bug.config.items()})
    broken: set[str] = set()
    for start in range(0, BUDGET, BATCH):
        results: list[RunResult] = []
        run_seeds(scenario, config, range(start, start + BATCH), results.append)
        for r in results:
            broken.update(r.violated)
        if broken >= set(bug.breaks):
            return
    pytest.fail(f"{scenario.name} {dict(bug.config)}: broke {sorted(broken)} in {BUDGET} seeds, "
                f"declared {list(bug.breaks)}")
