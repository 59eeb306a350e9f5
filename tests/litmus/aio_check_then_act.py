"""aio_check_then_act: check_then_act's asyncio twin; two requests both book one room.

The same booking assistant as ``check_then_act.py``, written with asyncio and
run as an asyncio process (``runtime="asyncio"``): two requests served at once
(two tasks of a ``TaskGroup``) look the room up in the in-memory calendar,
yield to the other turns with ``asyncio.sleep(0)`` while they validate the
request, then book the room and confirm it durably.  No ``Env`` call lies
between the look-up and the booking: it is dst's choice among the loop's ready
callbacks that makes "the other request looks first" a choice (asyncio itself,
running its ready queue first in first out, takes that path every time).

With ``fixed=true`` (the default) the check and the booking happen under one
``asyncio.Lock``, so the second request sees the first one's booking.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

import structlog

from dst import Env, Scenario, Sim

log = structlog.get_logger()

scenario = Scenario("aio_check_then_act",
                    doc="asyncio: two requests both see a room free and both book it")
scenario.switch("fixed", True, doc="check and book under one lock (false: a yield between)")
scenario.planted_bug({"fixed": False}, breaks=["OneBookingPerRoom"],
                     doc="check-then-act across asyncio.sleep(0)")


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
        await asyncio.sleep(0)  # validate the request while the other turns go on
        calendar.booked[room] = person
    await env.store.put(f"booking/{person}", room)
    log.info("booked", person=person, room=room)


async def assistant(env: Env, fixed: bool) -> None:
    calendar = Calendar(lock=asyncio.Lock() if fixed else contextlib.nullcontext())
    async with asyncio.TaskGroup() as group:
        for person in ("ada", "grace"):
            group.create_task(book(env, calendar, person, "room-1"), name=person)


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> Any:
    db = sim.store("db")
    sim.process("assistant", lambda env: assistant(env, config["fixed"]), stores=["db"],
                runtime="asyncio")
    return db


@scenario.invariant("OneBookingPerRoom")
def one_booking_per_room(db: Any) -> bool | str:
    holders: dict[str, list[str]] = {}
    for key, room in db.scan("booking/"):
        holders.setdefault(room, []).append(key.removeprefix("booking/"))
    double = {room: who for room, who in holders.items() if len(who) > 1}
    return not double or f"booked to more than one person: {double}"
