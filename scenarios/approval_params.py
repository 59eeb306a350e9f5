"""approval_params: the user edits the request, then clicks the card they saw before.

Card ``a-m0`` asks to create 12 tickets.  On another connection the user types
"make it 24" (the agent updates its draft and proposes a new card), then clicks
the old card.  The click approves what ``a-m0`` showed: 12 tickets.  With
``bind_params=false`` the execution re-reads the current draft and creates 24
under an approval for 12 (time-of-check to time-of-use).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dst import Scenario, Sim
from dst.fakes.users import Send
from scenarios.approval import SEEDED, World, build, common_switches, faults, register_checks

scenario = Scenario("approval_params",
                    doc="an edit races a click on the old card; execute what was approved",
                    faults=faults)
scenario.switch("bind_params", True,
                doc="execute the approved parameters (false: re-read the current draft)")
common_switches(scenario)
register_checks(scenario)
scenario.planted_bug({"bind_params": False}, breaks=["ExecutedEqualsApproved"],
                     doc="the draft changed after approval; execution used the new parameters")

SCRIPT = [Send(0.0, "conn-2", {"kind": "text", "id": "m1", "text": "make it 24"}),
          Send(1.0, "conn-1", {"kind": "click", "id": "m2", "approval": SEEDED["id"]})]


@scenario.setup
def setup(sim: Sim, config: Mapping[str, Any]) -> World:
    return build(sim, config, SCRIPT)
