"""replenish_price: the manager approves after days; the supplier's price has risen since.

The price goes from $5.00 to $6.50 on day 2; the manager answers after 1 or 3
days, approving the price asked.  With ``price_cap=true`` (the default) the order
carries the approved price as a cap, the supplier answers "price changed", and
the agent asks for a new approval before ordering.  With ``price_cap=false`` the
supplier fills the order at its current price, above what the manager approved.
"""

from __future__ import annotations

from typing import Any

from dst import Scenario, Sim
from dst.agents.replenisher import Options
from dst.fakes.replenisher import Kit, WorldConfig, build
from dst.fakes.replenisher import kit as checks

scenario = Scenario(
    "replenish_price",
    doc="approval after 3 days with the price risen; never an order above the approved price",
    faults=checks.fault_plan(), max_steps=3000,
)
scenario.switch("price_cap", True, doc="orders carry the approved price as a cap")
checks.fault_switches(scenario)
scenario.planted_bug({"price_cap": False}, breaks=["OrderWithinApproval"],
                     doc="an order filled at a price the manager never approved")


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> Kit:
    return build(sim, Options(price_cap=config["price_cap"]),
                 WorldConfig(approval_days=(1, 3), rise_day=2.0))


scenario.invariant("OrderWithinApproval")(checks.order_within_approval)
scenario.invariant("OneOrderPerPO")(checks.one_order_per_po)
scenario.at_end("EveryReplenishmentEnds")(checks.every_replenishment_ends)
scenario.at_end("StockAtLeastSafety")(checks.stock_at_least_safety)
