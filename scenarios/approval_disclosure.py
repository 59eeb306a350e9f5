"""approval_disclosure: the backend fails around the effect; the user must be told.

The user clicks card ``a-m0``.  The ticket backend, by a seeded choice, works,
fails before creating anything, or creates the tickets and loses the reply.
The runtime cannot tell the last two apart from the error alone.  With
``disclose_on_error=true`` it asks the backend (by the approval's idempotency
key) what happened before answering; with ``false`` it tells the user that
nothing was done, which is false when the tickets exist.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dst import Scenario, Sim
from dst.fakes.users import Send
from scenarios.approval import SEEDED, World, build, common_switches, faults, register_checks

scenario = Scenario("approval_disclosure",
                    doc="a tool error after the effect; every effect must be disclosed",
                    faults=faults)
scenario.switch("disclose_on_error", True,
                doc="after a tool error, find out what happened before answering")
common_switches(scenario)
register_checks(scenario)
scenario.planted_bug({"disclose_on_error": False}, breaks=["EffectsDisclosed"],
                     doc="the error path says nothing was done although the tickets exist")

SCRIPT = [Send(0.0, "conn-1", {"kind": "click", "id": "m1", "approval": SEEDED["id"]}),
          Send(1.0, "conn-2", {"kind": "text", "id": "m2", "text": "go ahead"})]


@scenario.setup
def setup(sim: Sim, config: Mapping[str, Any]) -> World:
    return build(sim, config, SCRIPT, failures=True)
