"""replenish_crash: the Replenisher crashes while a purchase order waits days for approval.

The manager answers after 1 to 3 days; the agent process may crash (and
restart) at any step, including in the middle of that wait.  With
``durable=true`` (the default) every step's output is in the store before the
workflow goes on, so the restarted agent replays its log: no second quote
request, no second purchase order, no second approval request, and the wait
ends on the day it was due.  With ``durable=false`` the step log lives in
memory, the crash forgets it, and the replenishment starts over.
"""

from __future__ import annotations

from typing import Any

from dst import FaultPlan, Scenario, Sim
from dst.agents.replenisher import Options
from dst.fakes.replenisher import Kit, WorldConfig, build
from dst.fakes.replenisher import kit as checks
from dst.fakes.replenisher.kit import BUSY_TIMER_WEIGHT, SLOW_BUDGET

scenario = Scenario(
    "replenish_crash",
    doc="the agent crashes during a 3-day approval wait; nothing before the crash runs again",
    faults=lambda c: FaultPlan(max_crashes=c["crashes"], crash_weight=0.1,
                               max_drops=c["drops"], max_dups=c["dups"],
                               max_slow=SLOW_BUDGET, slow_weight=BUSY_TIMER_WEIGHT),
    max_steps=3000,
)
scenario.switch("durable", True, doc="step outputs are logged in the store (false: in memory)")
scenario.switch("crashes", 2, choices=[0, 1, 2, 3], doc="agent crash budget per run")
scenario.switch("drops", 1, choices=[0, 1, 2], doc="message drop budget per run")
scenario.switch("dups", 1, choices=[0, 1, 2], doc="message duplicate budget per run")
scenario.planted_bug({"durable": False}, breaks=["NothingRunsTwice"],
                     doc="a crash forgets the log: quotes, PO and approval request run again")


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> Kit:
    return build(sim, Options(), WorldConfig(approval_days=(1, 3)), durable=config["durable"])


scenario.invariant("NothingRunsTwice")(checks.nothing_runs_twice)
scenario.invariant("OneOrderPerPO")(checks.one_order_per_po)
scenario.invariant("OrderWithinApproval")(checks.order_within_approval)
scenario.at_end("EveryReplenishmentEnds")(checks.every_replenishment_ends)
scenario.at_end("StockAtLeastSafety")(checks.stock_at_least_safety)
