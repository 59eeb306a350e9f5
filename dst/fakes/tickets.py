"""A fake ticket backend that counts every effect, per approval.

The runtime reaches it as the ``tickets`` service.  Each call that changes
tickets is an *effect*, recorded with the approval, operation, targets and
parameters it ran with, so invariants can compare what ran with what was
approved.  Optionally it deduplicates by idempotency key (which bounds effects
but not authority: the approval record can still say unspent).  Failures are the
simulator's (``FaultPlan(services={"tickets": ServiceFaults(...)})``): a call may
fail before its effect, or take effect and lose its reply, which is the case
where the caller gets no reply although the tickets exist.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dst.env import Json
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
    effects: list[Effect] = field(default_factory=list)
    #: Effects per approval and per idempotency key, kept as effects happen:
    #: invariants read them after every step, so counting must not rescan.
    counts: dict[str, int] = field(default_factory=dict)
    by_key: dict[str, int] = field(default_factory=dict)
    #: The first approval that ran a second time, with its operation (None: none has).
    repeated: tuple[str, int, str] | None = None
    _replies: dict[str, Json] = field(default_factory=dict)

    def count(self, approval: str) -> int:
        return self.counts.get(approval, 0)

    def handle(self, op: str, request: Any) -> Json:
        if op == "lookup":
            return {"count": self.by_key.get(str(request["key"]), 0)}
        if op == "list_tickets":
            return len(self.effects)
        if op not in WRITES:
            raise ValueError(f"the ticket backend has no operation {op!r}")
        key = str(request.get("key", ""))
        if self.dedup and key in self._replies:
            return self._replies[key]
        params = request.get("params")
        self._effect(Effect(str(request["approval"]), op, request.get("targets"), params, key))
        count = params.get("count", 1) if isinstance(params, dict) else 1
        reply: Json = {"count": count}
        self._replies[key] = reply
        return reply

    def _effect(self, effect: Effect) -> None:
        self.effects.append(effect)
        n = self.counts[effect.approval] = self.counts.get(effect.approval, 0) + 1
        self.by_key[effect.key] = self.by_key.get(effect.key, 0) + 1
        if n > 1 and self.repeated is None:
            self.repeated = (effect.approval, n, effect.op)
