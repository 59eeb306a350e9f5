"""Hosts and names: every simulated process is a host named by the process.

The ``n``-th process a scenario starts (in the order of ``sim.process``) has the
address ``10.0.0.n`` (``10.0.1.0`` after ``10.0.0.255``...): a function of the
scenario alone, never of a generator or of the machine.  ``localhost`` and every
address of ``127.0.0.0/8`` (and ``0.0.0.0`` as a destination, as Linux reads it)
are the calling process itself.  Names resolve as a real resolver would: an
unknown one raises ``socket.gaierror`` (``EAI_NONAME``, "Name or service not
known"), without a choice point: a lookup is instant and always answers the same.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..kernel import Sim

LOOPBACK = "127.0.0.1"
ANY = "0.0.0.0"

#: Service names ``getaddrinfo`` takes for a port (what a minimal ``/etc/services`` says).
_SERVICES = {"http": 80, "https": 443}


def is_loopback(address: str) -> bool:
    return address.startswith("127.") or address == ANY or address == "localhost"


def _address(index: int) -> str:
    n = index + 1
    return f"10.{(n >> 16) & 255}.{(n >> 8) & 255}.{n & 255}"


class Hosts:
    """The run's hosts: process names and their addresses, both ways.

    Rebuilt when a process is added (``sim.processes`` only grows in a run).
    """

    __slots__ = ("_addresses", "_count", "_names", "_sim")

    def __init__(self, sim: Sim) -> None:
        self._sim = sim
        self._count = -1
        self._addresses: dict[str, str] = {}
        self._names: dict[str, str] = {}

    def _refresh(self) -> None:
        procs = self._sim.processes
        if len(procs) != self._count:
            self._count = len(procs)
            self._addresses = {name: _address(i) for i, name in enumerate(procs)}
            self._names = {a: n for n, a in self._addresses.items()}

    def address_of(self, name: str) -> str | None:
        """The address of the process ``name`` (exactly, else case-insensitively), or None."""
        self._refresh()
        found = self._addresses.get(name)
        if found is None:
            folded = [a for n, a in self._addresses.items() if n.lower() == name.lower()]
            if len(folded) == 1:
                found = folded[0]
        return found

    def name_at(self, address: str) -> str | None:
        """The process at ``address`` (not a loopback address), or None."""
        self._refresh()
        return self._names.get(address)

    def resolve(self, host: str) -> str:
        """The address ``host`` names: a process, ``localhost``, or an address as it is."""
        name = host.rstrip(".")
        if name.lower() == "localhost":
            return LOOPBACK
        if numeric(name):
            return name
        address = self.address_of(name)
        if address is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return address


def numeric(host: str) -> bool:
    try:
        socket.inet_aton(host)
    except OSError:
        return False
    return host.count(".") == 3


def port_number(port: bytes | str | int | None) -> int:
    if port is None:
        return 0
    if isinstance(port, int):
        return port
    text = port.decode("ascii", "replace") if isinstance(port, bytes) else port
    if text.isdigit():
        return int(text)
    known = _SERVICES.get(text)
    if known is None:
        raise socket.gaierror(socket.EAI_SERVICE, "Servname not supported for ai_socktype")
    return known
