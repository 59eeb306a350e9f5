"""dst's event loop, its parts put together (``dst.sim.aio`` says how it works)."""

from __future__ import annotations

from .bridges import Bridges
from .callbacks import Callbacks
from .driver import Driver
from .ending import Ending
from .executors import Executors
from .streams import Streams
from .tasks import Tasks
from .timers import Timers
from .waits import Waits


class SimLoop(Driver, Callbacks, Timers, Tasks, Bridges, Streams, Executors, Ending, Waits):
    """The event loop of one incarnation of an asyncio process (see ``dst.sim.aio``)."""
