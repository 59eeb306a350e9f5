"""What the scheduler can choose between: option tuples and their kinds.

An option is ``(label, weight, kind, target)``: the label is what the trace
records and a replay matches, the weight what a random strategy draws by, the
kind (an int: compared on the hot path) what performing it means, and the
target what it acts on (a task, a message, a deadline, a process).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from operator import itemgetter
from typing import Any

import trio.lowlevel as ll

Option = tuple[str, float, int, Any]

TASK, TIMER, DELIVER, DROP, DUP, CRASH, RESTART, HELD, CALL_FAULT, PARTITION, WATCH = range(11)
#: The next timer fired while other work could run (``FaultPlan.max_slow``): a
#: ``timer@T!slow`` option, whose target is the deadline.
SLOW = 12
#: A fault of a parked socket send (``dst.sim.sockets``): its target is ``(task, kind)``.
SOCKET_FAULT = 11
#: A ready callback of an asyncio process's loop run next (``dst.sim.aio``): its
#: target is ``(loop, handle)``.
READY = 16

INF = math.inf


#: Sort key of ``(task, label)`` pairs: options are listed in label order.
#: (``itemgetter``: sorting calls no Python function per item.)
by_label: Callable[[tuple[ll.Task, str]], str] = itemgetter(1)
