"""One turn of the tickets agent: ask the model, propose a card, or resume an approval.

The model (a service, ``llm``) only chooses; everything it chooses is checked
here against what the runtime allows, and every risky choice goes through a
pending action record and a card (``dst.runtime.approvals``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import structlog

from dst.agents.tickets.tools import RISKY, allowed_tools, summary, unspent
from dst.env import Env, Json
from dst.runtime.approvals import (
    ApprovalConfig,
    ApprovalTurn,
    Observer,
    Record,
    approval_key,
    new_record,
)

if TYPE_CHECKING:
    from dst.agents.tickets.server import Orchestrator

log = structlog.get_logger()


def draft_key(conv: str) -> str:
    return f"conv/{conv}/draft"


class TicketsAgent:
    """The tickets domain agent; the orchestrator hands it one message per turn."""

    def __init__(self, env: Env, config: ApprovalConfig, orchestrator: Orchestrator,
                 observer: Observer, *, service: str = "tickets", llm: str = "llm") -> None:
        self.env, self.config, self.orch = env, config, orchestrator
        self.observer, self.service, self.llm = observer, service, llm

    def _turn(self, conv: str, label: str, turn_key: str, approval: str | None) -> ApprovalTurn:
        return ApprovalTurn(self.env, self.config, conv=conv, label=label, turn_key=turn_key,
                            approval=approval, service=self.service, observer=self.observer,
                            current_params=self._current_params)

    async def _current_params(self, rec: Record) -> Json:
        """What the draft says now (used only when execution is not bound to the record)."""
        draft: Any = await self.env.store.get(draft_key(rec["conv"]))
        if isinstance(draft, dict) and draft.get("op") == rec["op"]:
            log.info(f"re-read the draft of {rec['conv']}: "
                     f"{summary(rec['op'], draft['params'], [])}")
            params: Json = draft["params"]
            return params
        approved: Json = rec["params"]
        return approved

    async def on_click(self, msg: dict[str, Any], label: str, turn_key: str) -> None:
        """A click names its pending action: resume exactly that one."""
        turn = self._turn(msg["conv"], label, turn_key, str(msg["approval"]))
        await turn.finish()
        await self._answer_turn(msg, turn)

    async def on_text(self, msg: dict[str, Any], label: str, turn_key: str) -> None:
        """A typed message: restore, let the model pick an allowed tool, act on it."""
        conv = msg["conv"]
        turn = self._turn(conv, label, turn_key, None)
        await turn.step()  # restore
        view = turn.view or {}
        allowed = allowed_tools(view)
        choice: Any = await self.env.services.call(
            self.llm, "decide",
            {"text": msg["text"], "pending": list(unspent(view)), "allowed": list(allowed)})
        if not isinstance(choice, dict) or choice.get("tool") not in allowed:
            log.info(f"{label} ignored a tool the model may not use: {choice}")
            await self.orch.answer(msg, "I cannot do that here.")
            return
        tool = choice["tool"]
        log.info(f"{label} model chose {tool}", approval=choice.get("approval"))
        if tool == "approve":
            turn.approval = str(choice.get("approval"))
            await turn.finish()
            await self._answer_turn(msg, turn)
        elif tool in RISKY or tool == "update_draft":
            draft: Any = await self.env.store.get(draft_key(conv))
            op = tool if tool in RISKY else (draft or {}).get("op", "create_tickets")
            params = dict(choice.get("params") or {})
            targets = list(choice.get("targets") or [])
            seq = 1 + max([r["seq"] for r in view.values()], default=0)
            await self.propose(msg, label, new_record(conv, f"a-{msg['id']}", op, targets,
                                                      params, seq))
        elif tool == "list_tickets":
            found = await self.env.services.call(self.service, "list_tickets", {"conv": conv})
            await self.orch.answer(msg, f"tickets: {found}")
        else:
            await self.orch.answer(msg, str(choice.get("text", "OK.")))

    async def propose(self, msg: dict[str, Any], label: str, rec: Record) -> None:
        """A risky action: store its pending action record and show its card.

        The id comes from the request's id, so a request delivered twice proposes
        the same action, not a second one.
        """
        conv, aid = msg["conv"], rec["id"]
        what = summary(rec["op"], rec["params"], rec["targets"])
        await self.env.store.put(draft_key(conv), {"op": rec["op"], "targets": rec["targets"],
                                                   "params": rec["params"]})
        log.info(f"{label} proposed {aid}: {what} (needs a confirmation)", approval=aid)
        if self.config.persist_card_first:
            stored = await self._create(msg, label, rec)
            if stored is not None:
                await self.orch.show_card(msg, label, stored)
        else:
            await self.orch.send_card(msg, label, rec)
            if await self._create(msg, label, rec) is not None:
                await self.orch.record_card(msg, label, rec)

    async def _create(self, msg: dict[str, Any], label: str, rec: Record) -> Record | None:
        """Store the record unless it exists (a request delivered twice must not
        turn a spent approval back into an unspent one); None if it is used up."""
        key = approval_key(msg["conv"], rec["id"])
        if await self.env.store.cas(key, None, rec):
            return rec
        existing: Any = await self.env.store.get(key)
        if not isinstance(existing, dict) or existing["state"] != "unspent":
            log.info(f"{label} found {rec['id']} already used: not proposed again")
            await self.orch.answer(msg, f"That was already done under approval {rec['id']}.")
            return None
        return existing

    async def _answer_turn(self, msg: dict[str, Any], turn: ApprovalTurn) -> None:
        aid = turn.approval
        if turn.refusal is not None or turn.claim is None or turn.outcome is None:
            await self.orch.answer(msg, f"Approval {aid} cannot be used: {turn.refusal}. "
                                        "Nothing was done.")
            return
        rec, out = turn.claim, turn.outcome
        what = summary(rec["op"], rec["params"], rec["targets"])
        text = {"done": f"Done: {what} ({out['count']} affected).",
                "none": f"Could not {what}; nothing was done.",
                "unknown": f"The backend did not answer; it may have done: {what}. "
                           "Check before asking again."}[out["result"]]
        await self.orch.answer(msg, text)
