"""The one place dst touches trio's private scheduler state.

Two things live here.  *Ordering*: trio shuffles each batch of runnable
tasks.  It does so deterministically only when
``trio._core._run._ALLOW_DETERMINISTIC_SCHEDULING`` is true (the batch is then
sorted by task creation order before the shuffle) and its module-level
generator ``_r`` is seeded.  Both are private, so they are wrapped here, the
supported trio versions are pinned in ``pyproject.toml``, and
``tests/test_trio_determinism.py`` fails loudly if a trio release moves them.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from typing import Any, NoReturn

import outcome
import trio

from ..errors import InternalError

#: trio versions whose private scheduler hooks this module was checked against.
SUPPORTED_TRIO = ((0, 30), (0, 36))


def _run_module() -> object:
    module = getattr(getattr(trio, "_core", None), "_run", None)
    if module is None or not isinstance(getattr(module, "_r", None), random.Random):
        raise InternalError(
            f"trio {trio.__version__} has no trio._core._run._r; "
            "dst supports trio >=0.30,<0.36 - install a supported trio"
        )
    return module


@contextlib.contextmanager
def deterministic_trio() -> Iterator[None]:
    """Make trio's batch ordering a function of ``_r`` for the duration."""
    module = _run_module()
    previous = module._ALLOW_DETERMINISTIC_SCHEDULING  # type: ignore[attr-defined]
    module._ALLOW_DETERMINISTIC_SCHEDULING = True  # type: ignore[attr-defined]
    try:
        yield
    finally:
        module._ALLOW_DETERMINISTIC_SCHEDULING = previous  # type: ignore[attr-defined]


def reseed_trio(seed: int | str) -> None:
    """Seed trio's scheduler generator; call inside the run, before each seed starts."""
    module = _run_module()
    module._r.seed(seed)  # type: ignore[attr-defined]


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
