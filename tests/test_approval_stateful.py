"""Stateful property tests: Hypothesis drives the runtime's protocol actions one at a time.

The same ``ApprovalTurn`` the agent runs in the simulation, on a real in-memory
store, with only the ticket backend faked.  Rules: start a turn (a click), the
five protocol actions (restore, claim, spend, execute, record), a retry (the
user clicks again), deliver-twice (the same message becomes a second turn), a
crash (every turn's memory is lost; the restart recovers), and a backend that
loses its next reply.  The six invariants are the scenarios' own.

This machine checks the correct design.  That each dropped condition is *found*
is shown on the real scenario, whose runs Hypothesis draws whole through the
bridge (``tests/test_hypothesis_bridge.py``): the machine found the lost update
only on its fixed, derandomised draw, which is luck, not evidence.
"""

from __future__ import annotations

from typing import Any

import structlog
import trio
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)

from dst.env import Json, ServiceUnavailable
from dst.fakes.tickets import TicketBackend
from dst.fakes.users import Screens
from dst.runtime import LocalNetwork, LocalServices, MemoryStore, TrioClock, make_env
from dst.runtime.approvals import ApprovalConfig, ApprovalTurn, recover
from scenarios.approval import CONV, INVARIANTS, SEEDED, Probe, World, seed_card

SETTINGS = settings(max_examples=80, stateful_step_count=20, deadline=None, database=None,
                    derandomize=True, suppress_health_check=list(HealthCheck))


class _SyncPuts:
    """Lets ``seed_card`` (written for the simulated store) fill a MemoryStore."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    def put(self, key: str, value: Json) -> None:
        trio.run(self.store.put, key, value)


def _run(fn: Any, *args: Any) -> Any:
    with structlog.testing.capture_logs():
        return trio.run(fn, *args)


class ApprovalMachine(RuleBasedStateMachine):
    config = ApprovalConfig()

    def __init__(self) -> None:
        super().__init__()
        self.db = MemoryStore()
        seed_card(_SyncPuts(self.db), {})
        self.backend = TicketBackend(dedup=False)
        self.lose_next_reply = False
        services = LocalServices()

        async def tickets(op: str, request: Json) -> Json:
            if op in ("create_tickets", "complete_tickets", "delete_tickets") and \
                    self.lose_next_reply:
                self.lose_next_reply = False
                self.backend.handle(op, request)
                raise ServiceUnavailable("reply lost")
            return self.backend.handle(op, request)

        services.register("tickets", tickets)
        self.env = make_env("agent", stores={"main": self.db}, network=LocalNetwork(),
                            services=services, seed=0, clock=TrioClock(start=0.0))
        self.probe = Probe(self.db)
        self.world = World(self.db, self.backend, Screens(), self.probe)
        self.live: list[ApprovalTurn] = []
        self.n = 0

    def _new_turn(self) -> ApprovalTurn:
        self.n += 1
        turn = ApprovalTurn(self.env, self.config, conv=CONV, label=f"turn-{self.n}",
                            turn_key=f"turn-{self.n}", approval=SEEDED["id"],
                            observer=self.probe)
        self.live.append(turn)
        return turn

    @precondition(lambda self: self.n < 4)
    @rule()
    def click(self) -> None:
        self._new_turn()

    @precondition(lambda self: self.n < 4 and self.n > 0)
    @rule()
    def deliver_twice(self) -> None:
        """The click's message arrives again: a second turn for the same approval."""
        self._new_turn()

    @precondition(lambda self: self.n < 4 and any(t.done for t in self.live))
    @rule()
    def retry(self) -> None:
        """The user got no useful answer and clicks again."""
        self._new_turn()

    def _ready(self, step: str) -> list[ApprovalTurn]:
        return [t for t in self.live if t.next_step == step]

    def _advance(self, data: st.DataObject, step: str) -> None:
        turn = data.draw(st.sampled_from(self._ready(step)), label=step)
        _run(turn.step)

    @precondition(lambda self: self._ready("restore"))
    @rule(data=st.data())
    def restore(self, data: st.DataObject) -> None:
        self._advance(data, "restore")

    @precondition(lambda self: self._ready("check"))
    @rule(data=st.data())
    def claim(self, data: st.DataObject) -> None:
        self._advance(data, "check")

    @precondition(lambda self: self._ready("spend"))
    @rule(data=st.data())
    def spend(self, data: st.DataObject) -> None:
        self._advance(data, "spend")

    @precondition(lambda self: self._ready("execute"))
    @rule(data=st.data())
    def execute(self, data: st.DataObject) -> None:
        self._advance(data, "execute")

    @precondition(lambda self: self._ready("record"))
    @rule(data=st.data())
    def record(self, data: st.DataObject) -> None:
        self._advance(data, "record")

    @rule()
    def backend_loses_next_reply(self) -> None:
        self.lose_next_reply = True

    @rule()
    def crash(self) -> None:
        """Every turn's memory is gone; the restarted runtime recovers from the store."""
        self.live.clear()
        _run(recover, self.env)

    @invariant()
    def the_six_properties_hold(self) -> None:
        for name, check in INVARIANTS.items():
            verdict = check(self.world)
            assert verdict is True, f"{name}: {verdict}"


TestTheCorrectDesign = ApprovalMachine.TestCase
TestTheCorrectDesign.settings = SETTINGS
