"""replenish_concurrency: the weekly stock check fires while a replenishment waits.

Stock stays below safety stock until the goods arrive, weeks later.  With
``count_active=true`` (the default) the entity knows (from its own durable
state) that a replenishment is running, so it skips the weekly checks until it
ends and starts no other.  With ``count_active=false`` the weekly checks go on,
and each one that sees low stock starts another replenishment.
"""

from __future__ import annotations

from typing import Any

from dst import Scenario, Sim
from dst.agents.replenisher import Options
from dst.fakes.replenisher import Kit, WorldConfig, build
from dst.fakes.replenisher import kit as checks

scenario = Scenario(
    "replenish_concurrency",
    doc="a stock check fires while a replenishment waits; at most one runs per SKU",
    faults=checks.fault_plan(), max_steps=4000,
)
scenario.switch("count_active", True, doc="the check knows a replenishment runs (false: not)")
checks.fault_switches(scenario)
scenario.planted_bug({"count_active": False}, breaks=["OneActivePerSku"],
                     doc="the stock check starts a second replenishment")


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> Kit:
    return build(sim, Options(count_active=config["count_active"], horizon_checks=4),
                 WorldConfig(approval_days=(1, 3), lead_days=(6, 12)))


scenario.invariant("OneActivePerSku")(checks.one_active_per_sku)
scenario.invariant("OneOrderPerPO")(checks.one_order_per_po)
scenario.at_end("EveryReplenishmentEnds")(checks.every_replenishment_ends)
scenario.at_end("StockAtLeastSafety")(checks.stock_at_least_safety)
