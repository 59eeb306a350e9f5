"""replenish_lost_reply: the supplier took the order but its reply was lost.

The supplier may lose the replies of two calls per run after they took effect
(the simulator's service fault ``lose_reply``).
``place_order`` sees no answer and retries.  With ``stable_key=true`` (the
default) every attempt carries the PO number as idempotency key and the
supplier answers the retry with the order it already holds.  With
``stable_key=false`` the key changes with each attempt, and the supplier,
seeing a new request, takes a second order for the same PO.
"""

from __future__ import annotations

from typing import Any

from dst import Scenario, ServiceFaults, Sim
from dst.agents.replenisher import Options
from dst.fakes.replenisher import Kit, WorldConfig, build
from dst.fakes.replenisher import kit as checks

scenario = Scenario(
    "replenish_lost_reply",
    doc="the reply to an accepted order is lost; the retry must not order twice",
    faults=checks.fault_plan(services={"supplier": ServiceFaults(lose_reply=2, weight=0.5)}),
    max_steps=3000,
)
scenario.switch("stable_key", True, doc="one idempotency key for all attempts (false: per attempt)")
checks.fault_switches(scenario)
scenario.planted_bug({"stable_key": False}, breaks=["OneOrderPerPO"],
                     doc="a retry after a lost reply orders again")


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> Kit:
    return build(sim, Options(key_per_attempt=not config["stable_key"]), WorldConfig())


scenario.invariant("OneOrderPerPO")(checks.one_order_per_po)
scenario.invariant("OrderWithinApproval")(checks.order_within_approval)
scenario.at_end("EveryReplenishmentEnds")(checks.every_replenishment_ends)
scenario.at_end("StockAtLeastSafety")(checks.stock_at_least_safety)
