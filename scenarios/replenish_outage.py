"""replenish_outage: the supplier's API is down when the order is placed.

The first zero to three ``order`` calls fail with no answer.  With ``retry=true``
(the default) ``place_order`` retries under the domain's example policy (6
attempts, 2 s, x2) with the PO number as idempotency key: the order goes through
once.  With ``retry=false`` one failure ends the replenishment as given up,
although the manager approved and the supplier was back a minute later.
"""

from __future__ import annotations

from typing import Any

from dst import Scenario, Sim
from dst.agents.replenisher import Options
from dst.fakes.replenisher import Kit, WorldConfig, build
from dst.fakes.replenisher import kit as checks

scenario = Scenario(
    "replenish_outage",
    doc="the supplier is down when the order is placed; retries place exactly one order",
    faults=checks.fault_plan(), max_steps=3000,
)
scenario.switch("retry", True, doc="place_order retries with backoff (false: one attempt)")
checks.fault_switches(scenario, drops=0)
scenario.planted_bug({"retry": False}, breaks=["NotGivenUp"],
                     doc="a transient outage fails the replenishment")


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> Kit:
    return build(sim, Options(retry=config["retry"]), WorldConfig(outage_calls=3))


scenario.invariant("OneOrderPerPO")(checks.one_order_per_po)
scenario.invariant("OrderWithinApproval")(checks.order_within_approval)
scenario.at_end("NotGivenUp")(checks.not_given_up)
scenario.at_end("EveryReplenishmentEnds")(checks.every_replenishment_ends)
scenario.at_end("StockAtLeastSafety")(checks.stock_at_least_safety)
