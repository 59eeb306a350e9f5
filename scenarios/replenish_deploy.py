"""replenish_deploy: new code is deployed while a replenishment waits.

The agent crashes and restarts on version 2 of ``Replenish``, which orders up to
3x safety stock instead of 2x.  A replenishment started on version 1 has logged
steps whose inputs hold the old quantity.  With ``version_branch=true`` (the
default) version 2 keeps the old rule for runs that started on version 1, and
the replay matches.  With ``version_branch=false`` the replay asks for steps
with a different quantity: ``check_inputs=true`` (the default) stops the
workflow with a non-determinism error naming the first mismatching step (loud,
and allowed); with ``check_inputs=false`` too, the replay goes on silently and
orders a quantity the manager never approved.
"""

from __future__ import annotations

from typing import Any

from dst import Scenario, Sim
from dst.agents.replenisher import Options
from dst.fakes.replenisher import Kit, WorldConfig, build
from dst.fakes.replenisher import kit as checks

scenario = Scenario(
    "replenish_deploy",
    doc="code changes during a wait: replay matches or stops with the non-determinism error",
    faults=checks.fault_plan(crash_weight=0.2), max_steps=3000,
)
scenario.switch("version_branch", True, doc="v2 keeps v1's rule for runs started on v1")
scenario.switch("check_inputs", True, doc="replay compares step inputs, not only names")
checks.fault_switches(scenario, crashes=2)
scenario.planted_bug({"version_branch": False, "check_inputs": False},
                     breaks=["OrderWithinApproval"],
                     doc="a silent wrong replay orders more than was approved")


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> Kit:
    return build(sim, Options(version_branch=config["version_branch"]),
                 WorldConfig(approval_days=(1, 3)), check_inputs=config["check_inputs"],
                 deploy_v2_after_crash=True)


scenario.invariant("OrderWithinApproval")(checks.order_within_approval)
scenario.invariant("OneOrderPerPO")(checks.one_order_per_po)
scenario.at_end("EveryReplenishmentEnds")(checks.every_replenishment_ends)
scenario.at_end("StockAtLeastSafety")(checks.stock_at_least_safety)
