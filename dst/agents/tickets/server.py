"""The orchestrator process: connections, routing, and surfacing cards and answers.

Users reach a conversation through one or more connections (a laptop tab, a
phone).  Messages arrive from connections; the orchestrator routes each to the
conversation's domain agent (here: tickets) as a new turn, and sends what the
turn produces back out.  Two routing facts matter for the dropped-surface bug:

* ``route_to_newest``: events go to the conversation's newest connection rather
  than to the connection the turn came from;
* ``history_first_final``: the history keeps only the first final (a card) per
  connection and exchange; a later one is taken for a retry of the first and
  not sent again.

Each is harmless alone.  Together, two overlapping turns land their cards in one
slot, and the second card is dropped while the runtime believes it was shown.
"""

from __future__ import annotations

import weakref
from typing import Any

import structlog
import trio

from dst.agents.tickets.agent import TicketsAgent
from dst.env import Env, Json
from dst.runtime.approvals import (
    ApprovalConfig,
    NullObserver,
    Observer,
    Record,
    TurnGate,
    recover,
)

log = structlog.get_logger()


class Orchestrator:
    """Routes messages to turns and turns' output to connections (volatile state only)."""

    def __init__(self, env: Env, config: ApprovalConfig, observer: Observer | None = None,
                 *, service: str = "tickets", llm: str = "llm") -> None:
        self.env, self.config = env, config
        self.observer: Observer = observer if observer is not None else NullObserver()
        self.gate = TurnGate(config.serialize)
        # The agent reaches back through a weak reference: the orchestrator owns it,
        # and a strong one each way would be a cycle that only the collector frees.
        self.agent = TicketsAgent(env, config, weakref.proxy(self), self.observer,
                                  service=service, llm=llm)
        #: conversation -> its connections, oldest first (a reconnect moves one last).
        self.connections: dict[str, list[str]] = {}
        #: connection -> id of the last request it sent (its current exchange).
        self.exchange: dict[str, str] = {}

    def connect(self, conv: str, conn: str, *, again: bool = False) -> None:
        conns = self.connections.setdefault(conv, [])
        if conn in conns and not again:
            return
        if conn in conns:
            conns.remove(conn)
        conns.append(conn)
        log.info(f"{conn} connected to {conv} (newest)")

    def target(self, msg: dict[str, Any]) -> str:
        """Where a turn's output goes: its own connection, or the newest one."""
        if self.config.route_to_newest:
            return str(self.connections.get(msg["conv"], [msg["conn"]])[-1])
        return str(msg["conn"])

    async def handle(self, body: Json, label: str, turn_key: str) -> None:
        if not isinstance(body, dict) or "conv" not in body or "conn" not in body:
            log.info(f"ignored a malformed message: {body}")
            return
        msg: dict[str, Any] = body
        kind = msg.get("kind")
        if kind == "hello":
            self.connect(msg["conv"], msg["conn"], again=True)
            return
        self.connect(msg["conv"], msg["conn"])
        self.exchange[msg["conn"]] = str(msg["id"])
        log.info(f"{label} started: {kind} from {msg['conn']}"
                 + (f" ({msg.get('text') or msg.get('approval')})"))
        if not self.gate.serialize:
            # The gate is open: entering it would do nothing but cost two coroutines.
            if kind == "click":
                await self.agent.on_click(msg, label, turn_key)
            elif kind == "text":
                await self.agent.on_text(msg, label, turn_key)
            return
        async with self.gate.hold(msg["conv"]):
            if kind == "click":
                await self.agent.on_click(msg, label, turn_key)
            elif kind == "text":
                await self.agent.on_text(msg, label, turn_key)

    # -- surfacing --------------------------------------------------------------

    def _slot(self, msg: dict[str, Any], rec: Record) -> tuple[str, str, str]:
        conn = self.target(msg)
        exch = self.exchange.get(conn, str(msg["id"]))
        base = f"conv/{msg['conv']}/hist/card/{conn}/{exch}"
        return conn, exch, base if self.config.history_first_final else f"{base}/{rec['id']}"

    async def record_card(self, msg: dict[str, Any], label: str, rec: Record) -> bool:
        """Write the card into the history; False when the slot already holds a final."""
        conn, exch, key = self._slot(msg, rec)
        entry: dict[str, Json] = {"kind": "card", "record": rec, "connection": conn,
                                  "exchange": exch}
        if self.config.history_first_final:
            if not await self.env.store.cas(key, None, entry):
                log.info(f"card {rec['id']} dropped: routed to {conn}, whose exchange {exch} "
                         "already has its final (taken for a retry)", approval=rec["id"])
                self.observer.shown(msg["conv"], rec["id"], conn)
                return False
        else:
            await self.env.store.put(key, entry)
        return True

    async def send_card(self, msg: dict[str, Any], label: str, rec: Record) -> None:
        conn = self.target(msg)
        await self.env.net.send(conn, {"kind": "card", "conv": msg["conv"], "record": rec})
        self.observer.shown(msg["conv"], rec["id"], conn)
        log.info(f"card {rec['id']} shown on {conn}", approval=rec["id"])

    async def show_card(self, msg: dict[str, Any], label: str, rec: Record) -> None:
        """Persist first, then show: the user can only act on what the history holds."""
        if await self.record_card(msg, label, rec):
            await self.send_card(msg, label, rec)

    async def answer(self, msg: dict[str, Any], text: str) -> None:
        conn = self.target(msg)
        await self.env.net.send(conn, {"kind": "answer", "conv": msg["conv"], "text": text,
                                       "reply_to": msg["id"]})
        log.info(f"answered {conn}: {text}")


async def serve(env: Env, config: ApprovalConfig, *, observer: Observer | None = None,
                service: str = "tickets", llm: str = "llm") -> None:
    """The orchestrator's main: recover what a crash left, then one turn per message."""
    recovered = await recover(env, service)
    if recovered:
        log.info(f"recovered {len(recovered)} approvals left spent by dead turns")
    orch = Orchestrator(env, config, observer, service=service, llm=llm)
    async with trio.open_nursery() as nursery:
        n = 0
        while True:
            msg = await env.net.recv()
            n += 1
            label = f"turn-{n}"
            turn_key = f"{label}.{env.rng.getrandbits(32):08x}"
            nursery.start_soon(orch.handle, msg.body, label, turn_key, name=label)
