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
import contextvars
import math
import random
import types
from collections.abc import Awaitable, Callable, Generator, Iterator, MutableSequence
from typing import Any, NoReturn, cast

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


class Unshuffled(random.Random):
    """Stands in for trio's batch generator: the batch keeps its sorted order.

    trio shuffles every batch, empty or not, once per pass of its loop, so
    this is also where passes are counted (``count_passes``): cheaper than an
    instrument's ``before_io_wait``, which trio dispatches through its
    instrument table on every pass.
    """

    def shuffle(self, x: MutableSequence[Any]) -> None:
        return None

    def count_passes(self, hook: Callable[[MutableSequence[Any]], None] | None) -> None:
        """Call ``hook(batch)`` once per pass of trio's loop, before the batch runs, in
        place of the shuffle (which leaves the batch alone); None: stop."""
        if hook is None:
            self.__dict__.pop("shuffle", None)
        else:
            self.shuffle = hook  # type: ignore[method-assign, assignment]


@contextlib.contextmanager
def deterministic_trio() -> Iterator[Unshuffled]:
    """Make trio's batch order a function of task creation order for the duration.

    Yields the stand-in generator, whose ``on_pass`` the caller may set.
    """
    module = _run_module()
    previous = module._ALLOW_DETERMINISTIC_SCHEDULING, module._r
    module._ALLOW_DETERMINISTIC_SCHEDULING = True
    module._r = stand_in = Unshuffled(0)
    try:
        yield stand_in
    finally:
        module._ALLOW_DETERMINISTIC_SCHEDULING, module._r = previous


_CONTEXT: list[Any] = []

#: trio's run context: ``RUN_CONTEXT.task`` is the running task, absent outside
#: one (what ``trio.lowlevel.current_task`` reads, without its frame and its
#: exception when there is none: hot paths read ``getattr(RUN_CONTEXT, "task", None)``).
RUN_CONTEXT: Any = getattr(getattr(getattr(trio, "_core", None), "_run", None),
                           "GLOBAL_RUN_CONTEXT", None)


def _runq() -> Any:
    """The running trio's run queue (the run context object is looked up once)."""
    if not _CONTEXT:
        _CONTEXT.append(_run_module().GLOBAL_RUN_CONTEXT)
    return _CONTEXT[0].runner.runq


_WaitTaskRescheduled: Any = getattr(getattr(getattr(trio, "_core", None), "_traps", None),
                                    "WaitTaskRescheduled", None)


@types.coroutine
def _park(abort: Callable[[Any], trio.lowlevel.Abort]) -> Generator[Any, Any, Any]:
    msg = object.__new__(_WaitTaskRescheduled)
    object.__setattr__(msg, "abort_func", abort)
    sent = yield msg
    if type(sent) is outcome.Value:
        return sent.value  # what ``unwrap`` returns; nothing else reads this outcome
    try:
        return sent.unwrap()
    finally:
        # Not kept in this frame, which the error's traceback holds: that cycle
        # (exception, traceback, frame, outcome) would wait for the collector.
        del sent


def waiting(abort: Callable[[Any], trio.lowlevel.Abort]) -> Any:
    """The message a task parked with ``abort`` yields to trio's loop (see :func:`park_as`).

    trio reads it (its abort function) and keeps no reference to it, so a task
    that parks again and again may yield the same one each time.
    """
    msg = object.__new__(_WaitTaskRescheduled)
    object.__setattr__(msg, "abort_func", abort)
    return msg


@types.coroutine
def park_as(msg: Any) -> Generator[Any, Any, Any]:
    """:data:`park` with the message made beforehand by :func:`waiting`."""
    sent = yield msg
    if type(sent) is outcome.Value:
        return sent.value
    try:
        return sent.unwrap()
    finally:
        # Not kept in this frame, which the error's traceback holds: that cycle
        # (exception, traceback, frame, outcome) would wait for the collector.
        del sent


#: Whether :func:`waiting` and :func:`park_as` may be used (trio has the message class).
PARK_AS = _WaitTaskRescheduled is not None


#: ``trio.lowlevel.wait_task_rescheduled(abort)``, in one frame instead of four.
#: trio's own is a coroutine around a generator that yields a
#: ``WaitTaskRescheduled`` (an attrs class with a generated ``__init__``), and
#: ``unwrap`` then marks the outcome used: every choice point pays for all of
#: it.  This yields the same message to trio's loop, which treats it the same
#: way (abort, cancellation, reschedule), and returns or raises what the task
#: was rescheduled with.
park = cast("Callable[[Callable[[Any], trio.lowlevel.Abort]], Awaitable[Any]]",
            _park if _WaitTaskRescheduled is not None else trio.lowlevel.wait_task_rescheduled)


#: What every parked task is woken with: ``_park`` reads its value without
#: marking it used, so one shared outcome serves them all.
NOTHING = _NOTHING = outcome.Value(None)


def _wake(task: trio.lowlevel.Task) -> None:
    # ``Runner.reschedule`` without its checks, its guest-mode tick (dst never
    # runs trio as a guest) and its ``task_scheduled`` instruments.
    task._next_send_fn = task.coro.send
    task._next_send = _NOTHING
    task._abort_func = None
    task.custom_sleep_data = None
    RUN_CONTEXT.runner.runq.append(task)


#: ``trio.lowlevel.reschedule(task)`` for a task waiting in :data:`park`, done
#: by the kernel when it performs a decision.  The wake-up is the decision
#: itself: no ``task_scheduled`` instrument sees it (the preemption
#: instrument would only let it go), and no outcome is built for it.
wake: Callable[[trio.lowlevel.Task], None] = (
    _wake if park is _park else trio.lowlevel.reschedule)


_instrumentation: Any = getattr(getattr(trio, "_core", None), "_instrumentation", None)
_Instruments: Any = getattr(_instrumentation, "Instruments", None)
_INSTRUMENT_LOGGER: Any = getattr(_instrumentation, "INSTRUMENT_LOGGER", None)
_Instrument = trio.abc.Instrument

#: ``call``'s default for its first argument: trio called the hook with none.
_NO_ARGUMENT: Any = object()


class _DictInstruments(dict):  # type: ignore[type-arg]
    """trio's table of instruments by hook, as a plain ``dict``.

    trio asks ``"before_task_step" in runner.instruments`` (and the same of
    three other hooks) on every pass of its loop and every task step; its
    table is a ``UserDict``, so each of those questions is a Python call.
    This table holds the same entries and answers in C.

    ``call`` runs about 30 times a seed and ``add_instrument`` and
    ``remove_instrument`` twice each (the preemption and crash watches come
    and go with each run), so all three are trio's own, made cheaper:

    * they read the table itself, not ``data`` (a Python property);
    * ``_calls`` keeps, for each hook, its instruments in the table's order
      with the hook method ``add_instrument`` looked up when it added them,
      where trio's ``call`` copies the hook's instruments to a list and looks
      each method up again on every call.  Adding and removing update the
      tuple, so a call sees exactly the instruments trio's would; one added or
      removed during a call changes the next call, not this one, as in trio.
      The one difference: an instrument that reassigns its own hook method
      while installed is not seen doing so (trio itself decides which hooks
      an instrument has only when it is added);
    * the one-argument hooks (all but ``before_run`` and ``after_run``) are
      called without packing and unpacking an argument tuple.

    An instrument that raises is disabled and logged as trio does it.
    """

    __slots__ = ("_calls",)

    def __init__(self, table: dict[str, dict[Any, None]]) -> None:
        super().__init__(table)
        self._calls: dict[str, tuple[tuple[Any, Callable[..., object]], ...]] = {
            hookname: tuple([(instrument, getattr(instrument, hookname))
                             for instrument in instruments])
            for hookname, instruments in table.items() if hookname != "_all"
        }

    @property
    def data(self) -> dict[str, Any]:
        return self

    def add_instrument(self, instrument: Any) -> None:
        """trio's ``Instruments.add_instrument``, keeping ``_calls``."""
        everything = self["_all"]
        if instrument in everything:
            return
        everything[instrument] = None
        try:
            for name in dir(instrument):
                if name.startswith("_"):
                    continue
                try:
                    prototype = getattr(_Instrument, name)
                except AttributeError:
                    continue
                impl = getattr(instrument, name)
                if isinstance(impl, types.MethodType) and impl.__func__ is prototype:
                    continue  # inherited unchanged from trio.abc.Instrument
                instruments = self.setdefault(name, {})
                if instrument not in instruments:
                    instruments[instrument] = None
                    self._calls[name] = (*self._calls.get(name, ()), (instrument, impl))
        except:  # trio's own bare except: undo, whatever it was
            self.remove_instrument(instrument)
            raise

    def remove_instrument(self, instrument: Any) -> None:
        """trio's ``Instruments.remove_instrument``, keeping ``_calls``."""
        self["_all"].pop(instrument)  # KeyError if it is not installed, as in trio
        calls = self._calls
        for hookname, instruments in list(self.items()):
            if instrument in instruments:
                del instruments[instrument]
                if instruments:
                    calls[hookname] = tuple([pair for pair in calls[hookname]
                                             if pair[0] in instruments])
                else:
                    del self[hookname], calls[hookname]

    def call(self, hookname: str, arg: object = _NO_ARGUMENT, /, *args: object) -> None:
        """trio's ``Instruments.call``: ``hookname(*args)`` on each of the hook's instruments."""
        if arg is _NO_ARGUMENT:  # before_run, after_run
            self._call_any(hookname)
        elif args:  # no trio hook takes more than one argument (yet)
            self._call_any(hookname, arg, *args)
        else:
            for instrument, hook in self._calls[hookname]:
                try:
                    hook(arg)
                except BaseException:
                    self._disable(hookname, instrument)

    def _call_any(self, hookname: str, *args: object) -> None:
        """``call`` with any number of arguments."""
        for instrument, hook in self._calls[hookname]:
            try:
                hook(*args)
            except BaseException:
                self._disable(hookname, instrument)

    def _disable(self, hookname: str, instrument: Any) -> None:
        """An instrument raised from its hook: remove it and log it, as trio does."""
        self.remove_instrument(instrument)
        _INSTRUMENT_LOGGER.exception(
            "Exception raised when calling %r on instrument %r. "
            "Instrument has been disabled.", hookname, instrument)


def fast_instruments() -> None:
    """Give the running trio's runner a :class:`_DictInstruments` with its instruments."""
    runner = RUN_CONTEXT.runner
    table = runner.instruments
    if (_Instruments is not None and _INSTRUMENT_LOGGER is not None
            and type(table) is _Instruments):
        try:
            runner.instruments = _DictInstruments(table.data)
        except Exception:
            pass  # a hook that cannot be looked up again: trio's table tries it at each call


_CancelReason: Any = getattr(getattr(getattr(trio, "_core", None), "_run", None),
                             "CancelReason", None)


def _cancel(scope: trio.CancelScope) -> None:
    # ``CancelScope.cancel()`` as trio 0.35 does it, for a scope with no deadline of its
    # own (the run's nursery, a process's scope), without its two costly steps: it asks
    # ``current_task()`` for the reason's ``source_task``, which from the quiescence hook
    # (no task runs) raises and catches an ``AttributeError`` and a ``RuntimeError``; and
    # ``_cancel`` goes through a generator context manager that only re-registers the
    # scope's deadline, which for a scope without one stays infinite (nothing to do).
    # The same reason (the running task's repr, or None), the same flags, the same
    # ``recalculate`` that delivers the cancellation to each task.
    if scope._cancel_called:
        return  # trio's ``cancel`` is idempotent too
    task = getattr(RUN_CONTEXT, "task", None)
    reason = _CancelReason(reason=None, source="explicit",
                           source_task=None if task is None else repr(task))
    if scope._registered_deadline != math.inf:
        scope._cancel(reason)  # a deadline is registered: trio moves it
        return
    if scope._cancel_reason is None:
        scope._cancel_reason = reason
    scope._cancel_called = True
    status = scope._cancel_status
    if status is not None:
        status.recalculate()


#: ``scope.cancel()``: :func:`_cancel` where this trio has what it reads.
cancel: Callable[[trio.CancelScope], None] = (
    _cancel if _CancelReason is not None
    and {"_cancel_called", "_registered_deadline", "_cancel_reason", "_cancel_status"}
    <= set(getattr(trio.CancelScope, "__slots__", ()) or ())
    else trio.CancelScope.cancel)


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


_run_mod: Any = getattr(getattr(trio, "_core", None), "_run", None)
_CancelShieldedCheckpoint: Any = getattr(_run_mod, "CancelShieldedCheckpoint", None)
_PermanentlyDetach: Any = getattr(_run_mod, "PermanentlyDetachCoroutineObject", None)
_TB_FRAMES: int = 1 + int(getattr(_run_mod, "CONTEXT_RUN_TB_FRAMES", 0))

#: Whether :func:`step` may be used: trio has every name it reads.
STEP = (PARK_AS and _CancelShieldedCheckpoint is not None and _PermanentlyDetach is not None
        and hasattr(_run_mod, "CONTEXT_RUN_TB_FRAMES"))


def may_step(runner: Any) -> bool:
    """True when trio's next pass, if it ran one task, would do nothing else.

    That is: no KeyboardInterrupt waits to be delivered, nothing waits in
    trio's entry queue (``run_sync_soon``: trio's I/O poll, which a step taken
    in place skips, is what runs it) and no task waits on a file descriptor
    (the poll is what wakes it), no ``wait_all_tasks_blocked`` is
    pending, and no instrument watches I/O waits (those see every pass of
    trio's loop) or the start of a task step (:func:`step` does not call
    ``before_task_step``).  An ``after_task_step`` instrument does not stop it:
    :func:`step` calls that hook after the step exactly as trio's loop does
    (the crash watch, ``busy._DoomWatch``, is one, installed while tasks of a
    dead incarnation live).  Whether one task is all it would run, and no
    deadline is due, is the caller's to say.
    """
    entry = runner.entry_queue
    instruments = runner.instruments
    # trio's own entry queue always waits for its wake-up socket: a second descriptor
    # registered is a task of the code under test waiting on one.
    return not (runner.ki_pending or runner.waiting_for_idle
                or entry.queue or entry.idempotent_queue
                or len(getattr(runner.io_manager, "_registered", _UNKNOWN)) > 1
                or "before_task_step" in instruments
                or "before_io_wait" in instruments or "after_io_wait" in instruments)


#: What ``may_step`` takes trio's table of registered descriptors to be when its
#: I/O manager keeps none it knows (another platform's): too many to step in place.
_UNKNOWN = (None, None)


def step(runner: Any, task: trio.lowlevel.Task, send: Any = None) -> None:
    """Step ``task`` as trio's loop would, from inside trio's loop, between two passes.

    Called from the quiescence hook only when :func:`may_step` holds and
    ``task`` is the one thing trio's next pass would run: then that pass would
    poll for I/O (dst makes none), expire deadlines (none are due: the caller
    saw to that) and run a batch of exactly this task.  This is that step, line
    for line as trio's loop takes it: the same value sent, the same handling of
    what the task yields or raises, the same counters and instruments.

    ``send`` is the outcome for a task parked at a choice point and chosen by
    the hook (it is not in the run queue; :func:`wake` would have put it
    there); None for a task trio rescheduled, taken out of the run queue here.
    """
    send_fn: Any
    if send is None:
        runner.runq.remove(task)
        send_fn = task._next_send_fn
        send = task._next_send
        task._next_send_fn = task._next_send = None
    else:
        send_fn = task.coro.send
        task._abort_func = None
        task.custom_sleep_data = None
    RUN_CONTEXT.task = task
    final: Any = None
    msg: Any
    try:
        msg = task.context.run(send_fn, send)
    except StopIteration as stop_iteration:
        final = outcome.Value(stop_iteration.value)
    except BaseException as task_exc:
        # The same frames trio removes: this one, and those Context.run adds.
        tb = task_exc.__traceback__
        for _ in range(_TB_FRAMES):
            if tb is not None:
                tb = tb.tb_next
        final = outcome.Error(task_exc.with_traceback(tb))
        del tb
    if final is not None:
        runner.task_exited(task, final)
        final = None
    else:
        task._schedule_points += 1
        if type(msg) is _WaitTaskRescheduled:
            task._cancel_points += 1
            task._abort_func = msg.abort_func
            if runner.ki_pending and task is runner.main_task:
                task._attempt_delivery_of_pending_ki()
            # trio's ``_attempt_delivery_of_any_pending_cancel``, which does nothing
            # unless the task's cancel status is cancelled (its abort function was
            # just set): asked here first, it spares a call at nearly every step.
            if task._cancel_status.effectively_cancelled:
                task._attempt_delivery_of_any_pending_cancel()
        elif msg is _CancelShieldedCheckpoint:
            runner.reschedule(task)
        elif type(msg) is _PermanentlyDetach:
            runner.task_exited(task, msg.final_outcome)
        else:
            exc = TypeError(f"trio.run received unrecognized yield message {msg!r}. "
                            "Are you trying to use a library written for some other "
                            "framework like asyncio? That won't work without some kind "
                            "of compatibility shim.")
            runner.reschedule(task, exc)
            task._next_send_fn = task.coro.throw
        del msg
    if "after_task_step" in runner.instruments:  # asked after the step, as trio asks
        runner.instruments.call("after_task_step", task)
    del RUN_CONTEXT.task


_Task: Any = getattr(_run_mod, "Task", None)


def _spawn(nursery: trio.Nursery, async_fn: Callable[..., Awaitable[object]],
           args: tuple[Any, ...], name: str) -> None:
    # ``nursery.start_soon(async_fn, *args, name=name)`` as trio 0.35's ``spawn_impl``
    # does it, for an ``async def`` of dst's own and a name that is a string: without
    # ``coroutine_or_error`` (which calls the function inside the new context with
    # sniffio's loop name set, and checks the result against the ``Coroutine`` ABC,
    # to explain what is not an async function), the name's conversion and the check
    # for a coroutine without a frame (one made in C or Cython).  Calling an ``async
    # def`` runs none of its code, so neither the context nor sniffio can matter.
    # The same checks of the nursery, the same Task, the same instrument calls, the
    # same reschedule, in the same order.  It spares ~10,000 instructions a spawn
    # (``coroutine_or_error`` alone ~6,000), ~1 % of an ``approval`` seed.
    runner = RUN_CONTEXT.runner
    if nursery._closed:
        raise RuntimeError("Nursery is closed to new arrivals")
    context = contextvars.copy_context()
    task = _Task._create(coro=async_fn(*args), parent_nursery=nursery, runner=runner,
                         name=name, context=context, ki_protected=False)
    runner.tasks.add(task)
    nursery._children.add(task)
    task._activate_cancel_status(nursery._cancel_status)
    if "task_spawned" in runner.instruments:
        runner.instruments.call("task_spawned", task)
    runner.reschedule(task, None)


def _start_soon(nursery: trio.Nursery, async_fn: Callable[..., Awaitable[object]],
                args: tuple[Any, ...], name: str) -> None:
    nursery.start_soon(async_fn, *args, name=name)


#: ``nursery.start_soon(async_fn, *args, name=name)`` for an ``async def`` of dst's own
#: (a process's main task, started about four times a seed): :func:`_spawn` where this
#: trio's ``Task`` takes what it passes.
spawn: Callable[[trio.Nursery, Callable[..., Awaitable[object]], tuple[Any, ...], str],
                None] = (
    _spawn if _Task is not None and hasattr(_Task, "_create")
    and {"_parent_nursery", "coro", "_runner", "name", "context", "_ki_protected",
         "_cancel_status"}
    <= {a.name for a in getattr(_Task, "__attrs_attrs__", ())}
    else _start_soon)
