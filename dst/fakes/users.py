"""Fake users: one person, several connections, a script of what they send.

Each connection is a simulated process named after it (``conn-1``...), so the
runtime answers a connection by sending to that name.  A connection sends its
scripted messages at their virtual times (a click, then a typed "go ahead" a
second later on another connection, or a reconnect) and then shows whatever
arrives: its *screen* is what the user was shown, which invariants compare with
what the history recorded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from dst.env import Env, Json
from dst.sim.kernel import Sim

log = structlog.get_logger()


@dataclass(frozen=True)
class Send:
    """At virtual time ``at``, connection ``conn`` sends ``body`` (to the orchestrator)."""

    at: float
    conn: str
    body: dict[str, Json]


@dataclass
class Screens:
    """What each connection has displayed: cards (by approval id) and answers."""

    cards: dict[str, list[str]] = field(default_factory=dict)
    answers: dict[str, list[str]] = field(default_factory=dict)
    #: Every card id shown on any connection, kept as cards arrive (read after every step).
    shown: set[str] = field(default_factory=set)

    def show_card(self, conn: str, approval: str) -> None:
        self.cards.setdefault(conn, []).append(approval)
        self.shown.add(approval)

    def all_cards(self) -> set[str]:
        return self.shown


def add_user(sim: Sim, script: Sequence[Send], *, server: str = "agent",
             conv: str = "c1") -> Screens:
    """Start one process per connection named in ``script``; return their screens."""
    screens = Screens()
    conns = sorted({s.conn for s in script})
    for conn in conns:
        mine = sorted((s for s in script if s.conn == conn), key=lambda s: s.at)
        screens.cards[conn] = []
        screens.answers[conn] = []

        async def main(env: Env, conn: str = conn, mine: list[Send] = mine) -> None:
            for item in mine:
                wait = item.at - env.clock.now()
                if wait > 0:
                    await env.clock.sleep(wait)
                body: dict[str, Json] = {"conv": conv, "conn": conn, **item.body}
                await env.net.send(server, body)
            while True:
                msg = await env.net.recv()
                _show(screens, conn, msg.body)

        sim.process(conn, main, crashable=False)
    return screens


def _show(screens: Screens, conn: str, body: Any) -> None:
    if not isinstance(body, dict):
        return
    if body.get("kind") == "card":
        aid = str(body["record"]["id"])
        screens.show_card(conn, aid)
        log.info(f"user sees card {aid} on {conn}", approval=aid)
    elif body.get("kind") == "answer":
        screens.answers[conn].append(str(body["text"]))
