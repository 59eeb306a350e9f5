"""The fake model that picks each turn's tool: a sensible policy, or a seeded adversary.

The sensible policy is what a good model would do (finish what is finished,
read what arrived, order once approved, otherwise ask or wait).  The adversary
picks any allowed tool by ``sim.choose``, so the harness's rules are checked
against every choice a model could make, not only against a good model.
``mixed`` flips between the two each turn.  ``eager`` is the sensible policy
that also chases an overdue supplier whenever the rules allow it (the sensible
one waits for goods it was promised), so the bound on chasing is what stops it.
"""

from __future__ import annotations

from typing import Any

from dst.env import Json
from dst.sim.kernel import Sim

PRIORITY = (
    "close_purchase_order", "read_supplier_reply", "place_order", "get_quotes",
    "draft_purchase_order", "request_approval", "wait_for_approval", "chase_supplier",
    "wait_for_supplier_reply", "wait_for_goods", "done",
)


def sensible(allowed: list[str], state: dict[str, Any]) -> str:
    if "done" in allowed and (state.get("closed") or state.get("rejected")):
        return "done"
    if state.get("order") == "placed" and "wait_for_goods" in allowed:
        return "wait_for_goods"  # the supplier took the order: its email adds nothing
    for name in PRIORITY:
        if name in allowed:
            return name
    return "done"


def eager(allowed: list[str], state: dict[str, Any]) -> str:
    if "chase_supplier" in allowed:
        return "chase_supplier"
    return sensible(allowed, state)


MODES = ("sensible", "eager", "mixed", "adversarial")


def make_decider(sim: Sim, mode: str) -> Any:
    if mode not in MODES:
        raise ValueError(f"no decider mode {mode!r} (known: {', '.join(MODES)})")

    def decider(op: str, req: Any) -> Json:
        allowed = list(req["allowed"])
        if mode == "eager":
            return eager(allowed, req["state"])
        if mode == "adversarial" or (
            mode == "mixed" and sim.choose("decider.mode", ["sensible", "wild"]) == "wild"
        ):
            return sim.choose("decider", allowed)
        return sensible(allowed, req["state"])

    return decider
