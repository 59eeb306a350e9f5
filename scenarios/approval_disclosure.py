"""approval_disclosure: the backend fails around the effect; the user must be told.

The user clicks card ``a-m0``.  The ticket backend may fail before creating
anything, or create the tickets and lose the reply (the simulator's service
faults, one of each per run).  The runtime cannot tell the two apart from the
error alone.  With
``disclose_on_error=true`` it asks the backend (by the approval's idempotency
key) what happened before answering; with ``false`` it tells the user that
nothing was done, which is false when the tickets exist.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from dst import FaultPlan, Scenario, ServiceFaults, Sim
from dst.fakes.users import Send
from scenarios.approval import SEEDED, World, build, common_switches, faults, register_checks


def disclosure_faults(config: Mapping[str, Any]) -> FaultPlan:
    return replace(faults(config), services={
        "tickets": ServiceFaults(fail=1, lose_reply=1, weight=0.5)})


scenario = Scenario("approval_disclosure",
                    doc="a tool error after the effect; every effect must be disclosed",
                    faults=disclosure_faults)
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
    return build(sim, config, SCRIPT)
