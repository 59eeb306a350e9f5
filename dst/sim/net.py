"""Simulated links: every message in flight can be delivered, dropped or duplicated.

Each message in flight is its own option, so delivering in any order (reordering)
and letting a timer fire first (delay) need no special mechanism; drop and
duplicate are offered with the fault plan's weights while its budgets last.
Delivery to a crashed process loses the message (its socket died with it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..env import Message
from .options import DELIVER, DROP, DUP
from .values import canonical_text, fresh_value

if TYPE_CHECKING:
    from .kernel import Sim


@dataclass
class InFlight:
    id: str
    source: str
    dest: str
    body: str  # canonical JSON: what was sent, frozen at send time

    def __post_init__(self) -> None:
        #: The labels of its options, built once: it is offered at every decision.
        route = f"{self.id}({self.source}->{self.dest})"
        self.deliver_label = f"deliver:{route}"
        self.drop_label = f"drop:{route}"
        self.dup_label = f"dup:{route}"


class Network:
    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.in_flight: dict[str, InFlight] = {}
        self._next = 0

    def post(self, source: str, dest: str, body: Any) -> str:
        self._next += 1
        mid = f"m{self._next}"
        text = canonical_text(body)
        cut = self.sim.cut_off
        if cut is not None and (source == cut) != (dest == cut):
            self.sim.fault("partitioned", mid, f"{source}->{dest}")
            return mid
        self.in_flight[mid] = InFlight(mid, source, dest, text)
        return mid

    def add_options(self, options: list[tuple[str, float, int, Any]], faulty: bool = True) -> None:
        sim = self.sim
        faults = sim.faults
        drops = faulty and sim.drops_left > 0
        dups = faulty and sim.dups_left > 0
        # Without per-link budgets, ``sim.link_budget`` gives every link the same answer
        # (``not links_only``): it is asked here once, not for each message.
        link_drops, link_dups = bool(sim._link_drops), bool(sim._link_dups)
        if not link_drops:
            drops = drops and not faults.links_only
        if not link_dups:
            dups = dups and not faults.links_only
        for m in self.in_flight.values():
            options.append((m.deliver_label, 1.0, DELIVER, m))
            if drops and (not link_drops or sim.link_budget(m.source, m.dest, drops=True)):
                options.append((m.drop_label, faults.drop_weight, DROP, m))
            if dups and (not link_dups or sim.link_budget(m.source, m.dest, drops=False)):
                options.append((m.dup_label, faults.dup_weight, DUP, m))

    def cut(self, name: str) -> None:
        """A partition cuts ``name`` off: every message in flight across the cut is lost."""
        for m in list(self.in_flight.values()):
            if (m.source == name) != (m.dest == name):
                del self.in_flight[m.id]
                self.sim.fault("partitioned", m.id, f"{m.source}->{m.dest}")

    def deliver(self, m: InFlight) -> None:
        del self.in_flight[m.id]
        proc = self.sim.processes.get(m.dest)
        if proc is None or proc.state != "running":
            self.sim.fault("lost", m.id, f"{m.dest} is not running")
            return
        proc.deliver(Message(m.source, fresh_value(m.body)))

    def drop(self, m: InFlight) -> None:
        del self.in_flight[m.id]
        self.sim.fault("drop", m.id, f"{m.source}->{m.dest}")

    def duplicate(self, m: InFlight) -> None:
        self._next += 1
        copy = InFlight(f"m{self._next}", m.source, m.dest, m.body)
        self.in_flight[copy.id] = copy
        self.sim.fault("dup", m.id, f"copy {copy.id}")
