"""asyncio processes: a dst event loop, driven by a trio task of the process.

``sim.process(name, main, runtime="asyncio")`` runs the coroutine function
``main(env)`` on a :class:`SimLoop`, an ``asyncio.BaseEventLoop`` whose
``_run_once`` is the process's main trio task (the *driver*, :meth:`SimLoop._drive`).
Unmodified asyncio code runs on it (tasks, ``gather``, ``wait_for``,
``asyncio.timeout``, ``TaskGroup``, queues, locks, events, conditions,
semaphores, ``call_soon``/``call_later``, ``to_thread`` for pure work), beside
the trio processes of the same run, and everything that varies is one of the
kernel's choices:

* *Ready callbacks.*  asyncio runs its ready queue first in, first out.  While
  the run's preemption budget lasts, the driver runs one callback at a time and
  then takes a trio checkpoint, where the preemption watch holds it
  (``dst.sim.preemption``); at the next quiescence every ready callback of its
  queue is an option (``P/task@run``, labelled by the asyncio task it steps),
  beside every other option of the run.  Running the queue's head is the
  ordinary choice; anything else spends a preemption, exactly as for trio's
  checkpoints.  Without preemptions left the driver runs asyncio's own
  iteration (every callback ready at its start) between two trio checkpoints.
* *Timers.*  ``loop.time()`` is the run's virtual time.  The loop's next timer
  is one of the kernel's sleepers (``Scheduler._sleepers``), so it is offered as
  ``timer@T`` exactly as a trio deadline would be, and performing it wakes the
  driver, which moves the due timers to its ready queue.
* *The world.*  ``env`` calls made from asyncio (``await env.store.get(k)``,
  ``env.net.send/recv``, ``env.services.call``) each run the trio call in a
  trio task of the process (a *bridge*, labelled with the asyncio task that
  made the call), which parks at the kernel's choice point as any trio call
  does and resolves an asyncio future when it returns; a cancelled asyncio
  caller aborts its bridge at once.  A store call made when the loop then has
  nothing else to do is made by the driver itself (``SimLoop._call_inline``):
  the same choice point under the same label, its reply running the caller in
  the same step; a wake-up from outside meanwhile hands it to a bridge.

A crash stops the loop for good: its ready queue and timers are dropped, no
callback of it ever runs again, and every pending asyncio task's coroutine is
closed (its ``finally`` blocks run once, with every ``env`` call refused and
recorded, as a trio task's do while it unwinds).  A task whose exception
nobody retrieves is a ``NoUncaughtError`` (found when it is collected, when
``main`` returns, or when the run ends while the process still holds it:
``SimLoop.report_unretrieved``), as is an exception escaping a callback; tasks
blocked forever at rest are named in the ``Deadlock`` message.
``docs/design.md`` ("asyncio under the same scheduler") says why this design.

The loop is put together from parts, a module each, over the state they
share (``state``): its tasks and their labels (``tasks``), what asyncio code
calls on it (``callbacks``), its timers (``timers``), the driver and the order
of its ready callbacks (``driver``), the ``env`` calls made by trio tasks of
the process (``bridges``), streams over the simulated network (``streams``),
work handed to threads (``executors``), how a loop ends (``ending``) and what
a blocked task waits on (``waits``); ``loop`` makes :class:`SimLoop` of them,
and ``env`` is an asyncio process's ``env`` and its trio program.
"""

from __future__ import annotations

from .env import AioClock, AioServices, AioStoreHandle, AioTransport, asyncio_main
from .executors import run_sync_inline
from .loop import SimLoop
from .tasks import SimFuture, SimTask

__all__ = [
    "AioClock",
    "AioServices",
    "AioStoreHandle",
    "AioTransport",
    "SimFuture",
    "SimLoop",
    "SimTask",
    "asyncio_main",
    "run_sync_inline",
]
