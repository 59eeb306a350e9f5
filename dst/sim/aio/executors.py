"""Work a simulated loop's code hands to a thread: run inline, as one step.

Threads are not simulated: ``loop.run_in_executor`` and ``asyncio.to_thread``
run the function at once, in the loop's step, and anyio's
``to_thread.run_sync`` does the same after its own checkpoint
(:func:`run_sync_inline`, swapped in by the guard).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from typing import Any

from .state import LoopState


class Executors(LoopState):
    """``run_in_executor``: the function runs inline."""

    def run_in_executor(self, executor: Any, func: Callable[..., Any],  # type: ignore[override]
                        *args: Any) -> asyncio.Future[Any]:
        """Pure work handed to a thread runs inline, as one step (threads are not simulated)."""
        fut = self.create_future()
        try:
            result = func(*args)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            fut.set_exception(exc)
        else:
            fut.set_result(result)
        return fut

    async def shutdown_default_executor(self, timeout: float | None = None) -> None:
        return None


async def run_sync_inline(_backend: object, func: Callable[..., Any], args: tuple[Any, ...],
                          abandon_on_cancel: bool = False, limiter: object = None) -> Any:
    """anyio's ``to_thread.run_sync`` in an asyncio process (its backend's
    ``run_sync_in_worker_thread``, swapped by the guard): after anyio's own checkpoint,
    the function runs inline, in a copy of the caller's context, as one step, as
    ``SimLoop.run_in_executor`` runs it (threads are not simulated)."""
    await asyncio.sleep(0)
    return contextvars.copy_context().run(func, *args)
