"""dst: deterministic simulation testing for AI-agent runtimes on trio.

The public API is small: a :class:`Scenario` declares switches, planted bugs,
a setup and checks; its setup builds the system on a :class:`Sim`; the code
under test sees only an :class:`Env`.

Each name is imported on first use (PEP 562), so that ``import dst.cli`` and
the ``dst`` launcher (``dst/launcher.py``) do not load trio and the kernel
before they know the command needs them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .coverage import sometimes as sometimes
    from .env import Env as Env
    from .env import Json as Json
    from .env import Message as Message
    from .env import ServiceUnavailable as ServiceUnavailable
    from .errors import DstError as DstError
    from .errors import NondeterminismError as NondeterminismError
    from .scenario import Scenario as Scenario
    from .sim.faults import FaultPlan as FaultPlan
    from .sim.faults import ServiceFaults as ServiceFaults
    from .sim.kernel import Sim as Sim
    from .small import test as test

#: Public name -> the module that defines it.
_EXPORTS = {
    "sometimes": "dst.coverage",
    "Env": "dst.env",
    "Json": "dst.env",
    "Message": "dst.env",
    "ServiceUnavailable": "dst.env",
    "DstError": "dst.errors",
    "NondeterminismError": "dst.errors",
    "Scenario": "dst.scenario",
    "FaultPlan": "dst.sim.faults",
    "ServiceFaults": "dst.sim.faults",
    "Sim": "dst.sim.kernel",
    "test": "dst.small",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dst' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
