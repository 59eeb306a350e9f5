"""A simulated TCP network beneath trio's own socket API.

Every process of a run is a host named by the process: ``await
trio.open_tcp_stream("payments", 8080)`` in one process reaches ``await
trio.serve_tcp(handler, 8080)`` in the process ``payments``.  trio's socket
factory and hostname resolver hooks are pointed here for a batch of runs
(``install``), so the libraries above trio's sockets (``SocketStream``, anyio's
trio backend, httpx, hypercorn, even hypercorn's ``serve()``, which makes its
listeners with the standard library: ``stdlib``) run unmodified.

* ``hosts``: names and addresses, both ways.
* ``network``: listeners, connections, bytes, choice points and faults.
* ``simsocket``: the socket object.
* ``install``: trio's hooks, the factory and the resolver.
* ``stdlib``: a library's standard-library listener (hypercorn's ``serve()``),
  answered by the guard with a stand-in on a simulated socket.

The kernel gives it a few hooks (``Sim._sockets``): a crash, an exit, a
partition and its heal, the fault variants of a parked send, the tasks idle in
a ``recv``.  docs/design.md ("A network under trio's sockets") says why.
"""

from __future__ import annotations

from .install import SimResolver, SimSocketFactory, install, simulating
from .network import SocketNetwork, network
from .simsocket import SimSocket

__all__ = [
    "SimResolver", "SimSocket", "SimSocketFactory", "SocketNetwork", "install", "network",
    "simulating",
]
