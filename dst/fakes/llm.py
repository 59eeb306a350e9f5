"""A fake LLM: the happy path, or a seeded adversary among the allowed tools.

The runtime asks ``llm.decide`` with the user's text, the unspent approvals of
the restored view (latest last) and the tools it allows.  The happy path does
what a good model would ("go ahead" approves the latest pending action; "create
12 tickets" proposes exactly that).  The adversary picks, by ``sim.choose``,
any allowed tool with any plausible argument, so the runtime's guarantees are
checked against every choice a model could make, not against a good model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from dst.env import Json
from dst.sim.kernel import Sim

#: The first number in a request's text (compiled once, not looked up per call).
_NUMBER = re.compile(r"\d+")


def happy(request: dict[str, Any]) -> dict[str, Json]:
    text = str(request.get("text", "")).lower()
    pending = list(request.get("pending") or [])
    number = _NUMBER.search(text)
    count = int(number.group()) if number else 1
    if text.startswith(("go ahead", "yes", "ok")):
        if pending:
            return {"tool": "approve", "approval": pending[-1]}
        return {"tool": "reply", "text": "There is nothing to approve."}
    if text.startswith("make it"):
        return {"tool": "update_draft", "params": {"count": count}}
    if text.startswith("create"):
        return {"tool": "create_tickets", "params": {"count": count}}
    if text.startswith("delete"):
        return {"tool": "delete_tickets", "targets": ["done"]}
    if text.startswith("complete"):
        return {"tool": "complete_tickets", "targets": ["open"]}
    return {"tool": "list_tickets"}


@dataclass
class FakeLLM:
    """Register with ``sim.service("llm", llm.handle)``."""

    sim: Sim
    adversarial: bool = False

    def handle(self, op: str, request: Any) -> Json:
        if op != "decide":
            raise ValueError(f"the fake LLM has no operation {op!r}")
        best = happy(request)
        if not self.adversarial:
            return best
        options: dict[str, dict[str, Json]] = {"happy": best}
        allowed = set(request.get("allowed") or [])
        for aid in request.get("pending") or []:
            if "approve" in allowed:
                options[f"approve {aid}"] = {"tool": "approve", "approval": aid}
        if "reply" in allowed:
            options["reply"] = {"tool": "reply", "text": "Could you say that again?"}
        labels = list(options)
        return options[self.sim.choose("llm", labels)]
