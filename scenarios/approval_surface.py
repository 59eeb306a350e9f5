"""approval_surface: two overlapping requests each show a card; none may be lost.

The user asks for 12 tickets on ``conn-1`` and, a second later, to delete the
done tickets on ``conn-2``; then ``conn-1`` reconnects.  Each request is risky,
so each turn stores a pending action and shows its card.  Two routing facts,
each harmless alone, compose into a dropped surface: events go to the newest
connection (``route_to_newest``) and the history keeps only the first final per
connection and exchange (``history_first_final``).  With both, the second card
lands in the slot the first one filled, is never sent, and the runtime believes
it was shown.  ``persist_card_first=false`` shows a card before the history
holds it, so the user can act on something the system has no record of.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dst import Scenario, Sim
from dst.fakes.users import Send
from scenarios.approval import World, build, common_switches, faults, register_checks

scenario = Scenario("approval_surface",
                    doc="two overlapping turns each show a card; shown must equal recorded",
                    faults=faults)
scenario.switch("persist_card_first", True, doc="record the card before sending it")
scenario.switch("route_to_newest", False,
                doc="send a turn's output to the conversation's newest connection")
scenario.switch("history_first_final", False,
                doc="the history keeps only the first final per connection and exchange")
common_switches(scenario)
register_checks(scenario)
scenario.planted_bug({"route_to_newest": True, "history_first_final": True},
                     breaks=["ShownEqualsRecorded"],
                     doc="the second card is dropped while the runtime believes it was shown")
scenario.planted_bug({"persist_card_first": False}, breaks=["ShownEqualsRecorded"],
                     doc="the user sees a card the history does not hold")

SCRIPT = [Send(0.0, "conn-1", {"kind": "text", "id": "m1", "text": "create 12 tickets"}),
          Send(1.0, "conn-2", {"kind": "text", "id": "m2", "text": "delete done tickets"}),
          Send(2.0, "conn-1", {"kind": "hello", "id": "m3"})]


@scenario.setup
def setup(sim: Sim, config: Mapping[str, Any]) -> World:
    return build(sim, config, SCRIPT)
