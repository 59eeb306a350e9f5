"""A fake ticket backend that counts every effect, per approval.

The runtime reaches it as the ``tickets`` service.  Each call that changes
tickets is an *effect*, recorded with the approval, operation, targets and
parameters it ran with, so invariants can compare what ran with what was
approved.  Optionally it deduplicates by idempotency key (which bounds effects
but not authority: the approval record can still say unspent), and optionally
it fails, before or after the effect, as a seeded choice: a failure after the
effect is the case where the caller gets no reply although the tickets exist.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dst.env import Json, ServiceUnavailable
from dst.sim.kernel import Sim

WRITES = ("complete_tickets", "create_tickets", "delete_tickets")


@dataclass(frozen=True)
class Effect:
    approval: str
    op: str
    targets: Json
    params: Json
    key: str


@dataclass
class TicketBackend:
    """Register with ``sim.service("tickets", backend.handle)``."""

    sim: Sim | None = None
    dedup: bool = False
    #: When true, each write makes a seeded choice: ok, fail before, fail after.
    failures: bool = False
    effects: list[Effect] = field(default_factory=list)
    _replies: dict[str, Json] = field(default_factory=dict)

    def count(self, approval: str) -> int:
        return sum(1 for e in self.effects if e.approval == approval)

    def handle(self, op: str, request: Any) -> Json:
        if op == "lookup":
            key = str(request["key"])
            return {"count": sum(1 for e in self.effects if e.key == key)}
        if op == "list_tickets":
            return len(self.effects)
        if op not in WRITES:
            raise ValueError(f"the ticket backend has no operation {op!r}")
        key = str(request.get("key", ""))
        if self.dedup and key in self._replies:
            return self._replies[key]
        how = "ok"
        if self.failures and self.sim is not None:
            how = self.sim.choose("tickets.outcome", ["ok", "fail-before", "fail-after"])
        if how == "fail-before":
            raise ServiceUnavailable("ticket backend unavailable")
        params = request.get("params")
        self.effects.append(Effect(str(request["approval"]), op, request.get("targets"),
                                   params, key))
        count = params.get("count", 1) if isinstance(params, dict) else 1
        reply: Json = {"count": count}
        self._replies[key] = reply
        if how == "fail-after":
            raise ServiceUnavailable("ticket backend: reply lost")
        return reply
