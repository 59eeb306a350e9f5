"""The one place dst touches trio's private scheduler state.

Three things live here.

*Ordering.* trio shuffles each batch of tasks that became runnable in the same
loop pass.  Under ``trio._core._run._ALLOW_DETERMINISTIC_SCHEDULING`` it first
sorts the batch by task creation order, then shuffles it with its module-level
generator ``_r``.  dst sets the flag and swaps ``_r`` for a generator whose
shuffle leaves the sorted batch alone, so the order in which simultaneously
runnable tasks run is a pure function of the program (newest task first), not
of a seeded generator: a replay does not depend on reseeding anything, and one
added ``trio.sleep(0)`` cannot shift the order of every later batch.  Where
that order matters, dst makes it a recorded decision instead (preemption at
checkpoints: :func:`hold` and :func:`release`).

*Holding.* With preemption on, a task of the system under test that trio
reschedules while another task steps (a checkpoint, a wake-up, a new task) is
taken back out of trio's run queue (``Runner.runq``) and held by the scheduler,
which offers it as an option and puts it back when the strategy picks it.

*Interruption.* A crash must stop every task of the dead incarnation, including
one inside a shielded cancel scope or in another process's nursery, where a
cancellation cannot reach; and a stopped run must unwind a task spinning in a
shielded loop.  trio delivers a cancellation by calling the blocked task's
abort function (``Task._abort_func``) through ``Task._attempt_abort`` with a
function that raises; :func:`interrupt` does exactly that with dst's own
exception.  A task that is about to run (not blocked) gets the exception as
the value of its next step instead (:func:`throw_on_next_step`, which replaces
``Task._next_send``).

All of these are private, so the supported trio versions are pinned in
``pyproject.toml`` and ``tests/test_trio_internals.py`` fails loudly if a trio
release moves them.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator, MutableSequence
from typing import Any, NoReturn

import outcome
import trio

from ..errors import InternalError

#: trio versions whose private scheduler hooks this module was checked against.
SUPPORTED_TRIO = ((0, 30), (0, 36))


def _run_module() -> Any:
    module = getattr(getattr(trio, "_core", None), "_run", None)
    if module is None or not isinstance(getattr(module, "_r", None), random.Random):
        raise InternalError(
            f"trio {trio.__version__} has no trio._core._run._r; "
            "dst supports trio >=0.30,<0.36 - install a supported trio"
        )
    return module


class _Unshuffled(random.Random):
    """Stands in for trio's batch generator: the batch keeps its sorted order."""

    def shuffle(self, x: MutableSequence[Any]) -> None:
        return None


@contextlib.contextmanager
def deterministic_trio() -> Iterator[None]:
    """Make trio's batch order a function of task creation order for the duration."""
    module = _run_module()
    previous = module._ALLOW_DETERMINISTIC_SCHEDULING, module._r
    module._ALLOW_DETERMINISTIC_SCHEDULING = True
    module._r = _Unshuffled(0)
    try:
        yield
    finally:
        module._ALLOW_DETERMINISTIC_SCHEDULING, module._r = previous


_CONTEXT: list[Any] = []


def _runq() -> Any:
    """The running trio's run queue (the run context object is looked up once)."""
    if not _CONTEXT:
        _CONTEXT.append(_run_module().GLOBAL_RUN_CONTEXT)
    return _CONTEXT[0].runner.runq


def hold(task: trio.lowlevel.Task) -> bool:
    """Take ``task``, just rescheduled, back out of trio's run queue (True if it was there)."""
    runq = _runq()
    if runq and runq[-1] is task:
        runq.pop()
        return True
    return False


def release(task: trio.lowlevel.Task) -> None:
    """Put a held task back in trio's run queue, with the outcome it was rescheduled with."""
    _runq().append(task)


def is_blocked(task: trio.lowlevel.Task) -> bool:
    """True while ``task`` waits in ``wait_task_rescheduled`` (abortable)."""
    return getattr(task, "_abort_func", None) is not None


def interrupt(task: trio.lowlevel.Task, exc: BaseException) -> bool:
    """Abort ``task``'s blocking call with ``exc``, shield or no shield.

    Returns False when the task is not blocked, or its abort function refused
    (the task then finishes its operation and is caught at its next block).
    """
    if not is_blocked(task):
        return False

    def raise_it() -> NoReturn:
        raise exc

    task._attempt_abort(raise_it)
    return not is_blocked(task)


def throw_on_next_step(task: trio.lowlevel.Task, exc: BaseException) -> None:
    """Make ``task``'s next step raise ``exc`` where it last yielded.

    Only for a task that trio is about to step (called from
    ``before_task_step``): it was rescheduled with an outcome, which is
    replaced.
    """
    sender: Any = getattr(task, "_next_send_fn", None)
    coro = task.coro
    if getattr(task, "_next_send", None) is None:
        return  # its first step: a coroutine that has not started takes no exception
    if sender is not None and getattr(sender, "__self__", None) is coro:
        task._next_send = outcome.Error(exc)
        task._next_send_fn = coro.send
