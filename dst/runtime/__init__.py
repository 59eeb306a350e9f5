"""Real implementations of the :mod:`dst.env` interfaces.

What the code under test runs on outside a simulation: SQLite (or in-memory)
stores, trio's clock, an in-process network on trio memory channels and a
registry of service handlers.  This package imports nothing from ``dst.sim``:
the simulation and the real runtime meet only at :mod:`dst.env`, so the code
under test cannot tell (or depend on) which one it was given.
"""

from dst.runtime.real_env import (
    Handler,
    LocalNetwork,
    LocalServices,
    TrioClock,
    make_env,
)
from dst.runtime.store import MemoryStore, SQLiteStore, canonical_json

__all__ = [
    "Handler",
    "LocalNetwork",
    "LocalServices",
    "MemoryStore",
    "SQLiteStore",
    "TrioClock",
    "canonical_json",
    "make_env",
]
