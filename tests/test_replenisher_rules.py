"""The Replenisher's business rules, which live in each tool's ``allowed``, not in the model.

Pure checks of the rules on hand-built states, and one run of the real
``Replenish`` workflow (durable worker, in-memory store, trio's mock clock) with
a scripted model that picks a tool the rules do not allow.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from dst.agents.replenisher import MAX_CHASES, Options, new_state, workflow_types
from dst.agents.replenisher.tools import BY_NAME, TOOLS
from dst.env import Json
from dst.fakes.replenisher.decider import make_decider
from dst.runtime import LocalNetwork, LocalServices, MemoryStore, TrioClock, make_env
from dst.runtime.durable import Worker, meta_key


def allowed(state: dict[str, Any], options: Options | None = None) -> set[str]:
    o = options or Options()
    return {t.name for t in TOOLS if t.allowed(state, o)}


def drafted(**changes: Any) -> dict[str, Any]:
    """A replenishment with a quote at $5.00 and a drafted PO."""
    s = new_state("SKU-1", 16, "agent-SKU-1")
    s.update(quote={"price": 5.0}, price=5.0, po="PO-1")
    s.update(changes)
    return s


def test_a_fresh_replenishment_can_only_ask_for_quotes_or_stop() -> None:
    assert allowed(new_state("SKU-1", 16, "agent-SKU-1")) == {"get_quotes", "done"}


def test_no_order_before_an_approval_covering_the_current_price() -> None:
    assert "place_order" not in allowed(drafted())
    assert "place_order" not in allowed(drafted(approved_up_to=4.99))
    assert "place_order" in allowed(drafted(approved_up_to=5.0))
    # The price rose after the approval: a new approval is needed first.
    risen = drafted(approved_up_to=5.0, price=6.5, approval_asked_at=5.0)
    assert "place_order" not in allowed(risen)
    assert "request_approval" in allowed(risen)


def test_a_rejected_purchase_order_can_never_be_ordered() -> None:
    rejected = drafted(approved_up_to=5.0, rejected=True)
    assert "place_order" not in allowed(rejected)
    assert "request_approval" not in allowed(rejected)
    assert "done" in allowed(rejected)


def test_chasing_needs_an_overdue_supplier_and_stops_at_the_bound() -> None:
    placed = drafted(approved_up_to=5.0, order="placed")
    assert "chase_supplier" not in allowed(placed)
    assert "chase_supplier" in allowed(dict(placed, overdue=True, chases=MAX_CHASES - 1))
    assert "chase_supplier" not in allowed(dict(placed, overdue=True, chases=MAX_CHASES))
    # The planted bug: the rule without its bound.
    unbounded = Options(chase_limit=False)
    assert "chase_supplier" in allowed(dict(placed, overdue=True, chases=MAX_CHASES), unbounded)


def test_done_is_refused_while_an_order_may_exist_and_its_goods_have_not_come() -> None:
    assert "done" not in allowed(drafted(approved_up_to=5.0, order="placed"))
    assert "done" not in allowed(drafted(approved_up_to=5.0, order="unknown"))
    assert "done" in allowed(drafted(approved_up_to=5.0, order="placed", goods=True,
                                     closed=True))


def test_every_tool_has_a_rule_an_action_and_an_effect() -> None:
    assert set(BY_NAME) == {
        "get_quotes", "draft_purchase_order", "request_approval", "wait_for_approval",
        "place_order", "wait_for_supplier_reply", "read_supplier_reply", "chase_supplier",
        "wait_for_goods", "close_purchase_order", "done",
    }


def test_a_tool_the_rules_do_not_allow_is_refused_and_costs_the_turn() -> None:
    """The model asks to order first; the turn is lost, nothing reaches the supplier."""
    script = ["place_order", "done"]
    asked: list[list[str]] = []
    reached: list[str] = []

    def decider(op: str, request: Any) -> Json:
        asked.append(list(request["allowed"]))
        return script[len(asked) - 1]

    def supplier(op: str, request: Any) -> Json:
        reached.append(op)
        return {"status": "accepted"}

    store = MemoryStore()

    async def main() -> None:
        services = LocalServices()
        services.register("decider", decider)
        services.register("supplier", supplier)
        env = make_env("agent", stores={"main": store}, network=LocalNetwork(),
                       services=services, seed=0, clock=TrioClock(start=0.0))
        worker = Worker(env, workflow_types(Options()))
        args = {"sku": "SKU-1", "safety": 10, "on_hand": 4, "entity": "agent-SKU-1"}
        await worker.run([("agent-SKU-1.r1", "Replenish", args)], exit_when_idle=True)

    async def read_meta() -> Json:
        return await store.get(meta_key("agent-SKU-1.r1"))

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    meta = trio.run(read_meta)
    assert isinstance(meta, dict)
    assert meta["status"] == "completed"
    assert meta["result"] == {"outcome": "cancelled", "po": None, "qty": 16, "turns": 2}
    assert asked == [["get_quotes", "done"], ["get_quotes", "done"]]
    assert reached == []


def test_an_unknown_decider_mode_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"no decider mode 'wild' \(known: sensible, eager, "
                                         r"mixed, adversarial\)"):
        make_decider(None, "wild")  # type: ignore[arg-type]
