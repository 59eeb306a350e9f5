"""check_then_act: two booking requests both see the room free and both book it.

An assistant books meeting rooms for the people it works for, serving two
requests at once (one task each, as an agent runs two tool calls in parallel).
Each looks the room up in the runtime's in-memory calendar, yields to the other
turns while it validates the request, then books the room and confirms it
durably.  The look-up and the booking are separated by nothing but a
``trio.sleep(0)``, no ``Env`` call: it is dst's preemption at trio checkpoints
that makes "the other request runs its look-up first" a choice (trio itself,
running the two tasks in one batch, would take that path every time).

With ``fixed=true`` (the default) the check and the booking happen under one
``trio.Lock``, so the second request sees the first one's booking.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import structlog
import trio

from dst import Env, Scenario, Sim

log = structlog.get_logger()

scenario = Scenario("check_then_act", doc="two requests both see a room free and both book it")
scenario.switch("fixed", True, doc="check and book under one lock (false: a checkpoint between)")
scenario.planted_bug({"fixed": False}, breaks=["OneBookingPerRoom"],
                     doc="check-then-act across trio.sleep(0)")


@dataclass
class Calendar:
    """The runtime's in-memory view of who holds which room."""

    booked: dict[str, str] = field(default_factory=dict)
    lock: Any = field(default_factory=contextlib.nullcontext)


async def book(env: Env, calendar: Calendar, person: str, room: str) -> None:
    async with calendar.lock:
        if room in calendar.booked:
            log.info("room taken", person=person, room=room, by=calendar.booked[room])
            return
        log.info("room free", person=person, room=room)
        await trio.sleep(0)  # validate the request while the other turns go on
        calendar.booked[room] = person
    await env.store.put(f"booking/{person}", room)
    log.info("booked", person=person, room=room)


async def assistant(env: Env, fixed: bool) -> None:
    calendar = Calendar(lock=trio.Lock() if fixed else contextlib.nullcontext())
    async with trio.open_nursery() as nursery:
        for person in ("ada", "grace"):
            nursery.start_soon(book, env, calendar, person, "room-1", name=person)


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> Any:
    db = sim.store("db")
    sim.process("assistant", lambda env: assistant(env, config["fixed"]), stores=["db"])
    return db


@scenario.invariant("OneBookingPerRoom")
def one_booking_per_room(db: Any) -> bool | str:
    holders: dict[str, list[str]] = {}
    for key, room in db.scan("booking/"):
        holders.setdefault(room, []).append(key.removeprefix("booking/"))
    double = {room: who for room, who in holders.items() if len(who) > 1}
    return not double or f"booked to more than one person: {double}"
