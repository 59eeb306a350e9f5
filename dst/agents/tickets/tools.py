"""The tickets agent's tools, and which of them need a confirmation card.

Business rules live here, not in the prompt: the model may pick any tool that
``allowed_tools`` offers, and a risky tool never runs when picked; it becomes a
pending action that only an approval can resume.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Tools with an effect that is hard to undo: picking one shows a card.
RISKY = ("complete_tickets", "create_tickets", "delete_tickets")
#: Tools that run at once.
SAFE = ("list_tickets", "reply", "update_draft")


#: What ``allowed_tools`` offers without and with an unspent approval (sorted once).
_TOOLS = tuple(sorted((*RISKY, *SAFE)))
_TOOLS_AND_APPROVE = tuple(sorted((*RISKY, *SAFE, "approve")))


def allowed_tools(view: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The tools the model may pick given the restored approvals (sorted)."""
    return list(_TOOLS_AND_APPROVE if _any_unspent(view) else _TOOLS)


def _any_unspent(view: Mapping[str, Mapping[str, Any]]) -> bool:
    for r in view.values():
        if r["state"] == "unspent":
            return True
    return False


def unspent(view: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Unspent approvals in the order their cards were shown (latest last)."""
    live = [r for r in view.values() if r["state"] == "unspent"]
    return [r["id"] for r in sorted(live, key=lambda r: (r["seq"], r["id"]))]


def summary(op: str, params: Mapping[str, Any], targets: list[Any]) -> str:
    """What a card or an answer says about an action, in a few words."""
    if op == "create_tickets":
        return f"create {params.get('count', 1)} tickets"
    what = ", ".join(str(t) for t in targets) or "no tickets"
    return f"{op.split('_')[0]} {what}"
