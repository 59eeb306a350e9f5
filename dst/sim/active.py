"""The run in progress in this thread.

A leaf module, so that what runs inside a simulated run (the structlog
processor, the guard, ``env.clock.sleep``) can find its run without importing
the kernel, which imports them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .kernel import Sim

#: The run currently executing in this thread (set while its tasks run).
ACTIVE: list[Sim] = []
