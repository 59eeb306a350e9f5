"""replenish_unreachable: the supplier takes the order, then cannot be reached.

``place_order`` gets no answer from any attempt, although the supplier holds the
order.  With ``unknown_kept=true`` (the default) the agent records the order as
unknown and keeps going (waits for the reply, chases, waits for goods) until it
learns the truth.  With ``unknown_kept=false`` it takes "no answer" for "no
order" and records the replenishment as given up, while an order exists.
"""

from __future__ import annotations

from typing import Any

from dst import Scenario, Sim
from dst.agents.replenisher import Options
from dst.fakes.replenisher import Kit, WorldConfig, build
from dst.fakes.replenisher import kit as checks

scenario = Scenario(
    "replenish_unreachable",
    doc="the supplier accepts then is unreachable; never recorded failed while it holds the order",
    faults=checks.fault_plan(), max_steps=3000,
)
scenario.switch("unknown_kept", True, doc="no answer means unknown (false: means failed)")
checks.fault_switches(scenario)
scenario.planted_bug({"unknown_kept": False}, breaks=["NeverFailedWhileOrdered"],
                     doc="an order nobody saw is recorded as a failure")


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> Kit:
    return build(sim, Options(unknown_is_failure=not config["unknown_kept"]),
                 WorldConfig(unreachable_days=3.0))


scenario.invariant("NeverFailedWhileOrdered")(checks.never_failed_while_ordered)
scenario.invariant("OneOrderPerPO")(checks.one_order_per_po)
scenario.at_end("EveryReplenishmentEnds")(checks.every_replenishment_ends)
scenario.at_end("StockAtLeastSafety")(checks.stock_at_least_safety)
