"""replenish_history: an entity runs for simulated years and keeps a promise made months ago.

The SKU sells a unit every ten days; the entity checks stock every two weeks
for ``years`` and replenishes when needed.  On day 30 the manager has it promise
5 units for day 200.  With ``continue_as_new=true`` (the default) the entity
restarts itself every ``entity_log_limit`` steps carrying its state, so its log
stays under a fixed bound and the promise survives.  With
``continue_as_new=false`` the log grows without bound; with
``carry_state=false`` the new run forgets the promise.
"""

from __future__ import annotations

from typing import Any

from dst import Scenario, Sim
from dst.agents.replenisher import Options
from dst.fakes.replenisher import Kit, WorldConfig, build
from dst.fakes.replenisher import kit as checks

#: Entity log entries after which it continues as new, in this scenario.
LOG_LIMIT = 20

#: Keys under the entity's log prefix never exceed this: two runs' worth of
#: entries (a run reaches LOG_LIMIT, then at most a check and one replenishment's
#: messages before it continues as new, and the old run is deleted beside the
#: new one) plus its inbox.  Without continue-as-new a year of checks passes it.
LOG_BOUND = 80

scenario = Scenario(
    "replenish_history",
    doc="an entity running for years keeps its log bounded and still honours an old promise",
    faults=checks.fault_plan(crash_weight=0.02), max_steps=20000,
)
scenario.switch("continue_as_new", True, doc="the entity restarts itself with carried state")
scenario.switch("carry_state", True, doc="the new run carries all state (false: drops promises)")
scenario.switch("years", 1, choices=[1, 2, 3], doc="simulated years")
checks.fault_switches(scenario)
scenario.planted_bug({"continue_as_new": False}, breaks=["EntityLogBounded"],
                     doc="the entity's log grows with every check")
scenario.planted_bug({"carry_state": False}, breaks=["PromiseKept"],
                     doc="continue-as-new forgets a promise made months ago")


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> Kit:
    options = Options(check_every_days=14.0, horizon_checks=26 * config["years"],
                      entity_log_limit=LOG_LIMIT, continue_as_new=config["continue_as_new"],
                      carry_state=config["carry_state"])
    world = WorldConfig(on_hand=12, demand_per_day=0.1, promise=(30.0, 5, 200.0))
    return build(sim, options, world)


@scenario.invariant("EntityLogBounded")
def entity_log_bounded(kit: Kit) -> bool | str:
    size = kit.log_size(kit.world.entity)
    return size <= LOG_BOUND or f"the entity's log holds {size} entries (bound {LOG_BOUND})"


@scenario.at_end("PromiseKept")
def promise_kept(kit: Kit) -> bool | str:
    return "P1" in kit.world.kept_promises or "promise P1 (due day 200) was never kept"


scenario.invariant("OneActivePerSku")(checks.one_active_per_sku)
scenario.invariant("OneOrderPerPO")(checks.one_order_per_po)
scenario.at_end("EveryReplenishmentEnds")(checks.every_replenishment_ends)
scenario.at_end("StockAtLeastSafety")(checks.stock_at_least_safety)
