"""replenish_lost_goods: the supplier takes the order and the goods never come.

The supplier accepts every order but, for some, never ships.  The decider is
the eager one (the sensible model, except that it chases an overdue supplier
whenever the rules let it), or with ``decider=mixed`` a sensible model on some
turns and any allowed tool on others.  With ``chase_limit=true`` (the default)
``chase_supplier`` is allowed only while the order is overdue and at most
``MAX_CHASES`` times, and a replenishment whose goods never come runs out of
turns and ends ``given_up``, never ``received``.  With ``chase_limit=false``
the rule keeps only "overdue", and the supplier is chased past ``MAX_CHASES``,
after every two-week wait, until the turns run out.
"""

from __future__ import annotations

from typing import Any

from dst import Scenario, Sim
from dst.agents.replenisher import Options
from dst.fakes.replenisher import Kit, WorldConfig, build
from dst.fakes.replenisher import kit as checks

scenario = Scenario(
    "replenish_lost_goods",
    doc="the goods of an accepted order never come; chases stay bounded, no false receipt",
    faults=checks.fault_plan(), max_steps=3000,
)
scenario.switch("chase_limit", True, doc="at most MAX_CHASES chases per order (false: unbounded)")
scenario.switch("decider", "eager", choices=["eager", "mixed"], doc="the fake model")
checks.fault_switches(scenario)
scenario.planted_bug({"chase_limit": False}, breaks=["ChasesBounded"],
                     doc="the chase rule forgets its bound: the supplier is chased past MAX_CHASES")


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> Kit:
    return build(sim, Options(chase_limit=config["chase_limit"]),
                 WorldConfig(goods_may_not_arrive=True, decider=config["decider"]))


scenario.invariant("ChasesBounded")(checks.chases_bounded)
scenario.invariant("ReceivedOnlyWithGoods")(checks.received_only_with_goods)
scenario.invariant("OneOrderPerPO")(checks.one_order_per_po)
scenario.invariant("OrderWithinApproval")(checks.order_within_approval)
scenario.at_end("EveryReplenishmentEnds")(checks.every_replenishment_ends)
scenario.at_end("StockAtLeastSafety")(checks.stock_at_least_safety)
