"""What a workflow function sees: ``ctx``, through which every outside call is a step.

A workflow is an ordinary ``async def wf(ctx) -> Json``.  Code between steps must
be deterministic given the step outputs (it rebuilds the workflow's state on
replay), so it reads time, randomness and the world only through ``ctx``:

``await ctx.step(name, fn, input)``
    The unit of durability.  Step ``n`` is the ``n``-th call in the run.  If the
    log holds step ``n`` its recorded output is returned (or its recorded
    failure raised) without running ``fn``; the log's name and input must equal
    the ones asked for, or :class:`NonDeterminismError` stops the workflow.
    Otherwise ``fn(call)`` runs under the retry policy and its output is
    written to the log *before* the workflow goes on.  ``call.key`` is the
    idempotency key: the same for every attempt and every replay of the step.
``await ctx.wait(kinds, timeout=..)``
    A wait step that logs the message which ended it (or ``None`` for the
    timeout).  The deadline is absolute and comes from the log: the timeout
    counts from the logged time of the previous step (or, for a wait that is
    the first step of a run, from a ``timer`` step logged first).  After a
    crash a 3-day wait that crashed on day 2 therefore ends on day 3, not day 5.
``await ctx.signal(id, body)`` / ``await ctx.start_child(type, id, args)``
    Steps that write into another workflow's inbox / create a workflow.
``await ctx.join(id)``
    A step that waits until another workflow of this worker has ended.
``ctx.continue_as_new(state)``
    Ends this run; the next one starts with an empty log and ``ctx.carried``.
``ctx.version``
    The code version the workflow (run) started on: the switch for explicit
    version branches when new code replays an old log.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import structlog
import trio

from dst.env import Json

from .errors import ContinueAsNew, NonDeterminismError, StepFailed
from .layout import inbox_key, step_key
from .retry import NO_RETRY, RetryPolicy

if TYPE_CHECKING:
    from .worker import Worker

log = structlog.get_logger()


@dataclass(frozen=True)
class StepCall:
    """What a step function is told: its idempotency key and which attempt this is."""

    key: str
    attempt: int


StepFn = Callable[[StepCall], Awaitable[Json]]


def _same(a: Json, b: Json) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


class Context:
    """One run of one workflow, replaying its log and then extending it."""

    def __init__(
        self, worker: Worker, wf_id: str, meta: dict[str, Any], recorded: list[dict[str, Any]]
    ) -> None:
        self.worker = worker
        self.env = worker.env
        self.id = wf_id
        self.run: int = meta["run"]
        self.version: int = meta["version"]
        self.args: Json = meta.get("args")
        self.carried: Json = meta.get("carried")
        self.parent: str | None = meta.get("parent")
        self._recorded = recorded
        #: Inbox keys this run's wait steps have consumed (rebuilt from the log on replay).
        self.consumed: set[str] = {
            r["output"]["key"] for r in recorded
            if r.get("name") == "wait" and isinstance(r.get("output"), dict)
            and r["output"].get("key")
        }
        self._n = 0
        #: When the last step (replayed or live) was logged: waits count from it.
        self._at: float | None = None

    # -- introspection ---------------------------------------------------------

    @property
    def replaying(self) -> bool:
        """True while the workflow is still returning logged outputs."""
        return self._n < len(self._recorded)

    @property
    def steps(self) -> int:
        """Steps taken so far in this run (the length of its log once live)."""
        return self._n

    def check_ended(self) -> None:
        """The code ended this run: a log with steps left was written by other code.

        Without this, new code that takes fewer steps than the old one would
        complete on the old run's outputs: a silent wrong replay.
        """
        if self._n < len(self._recorded):
            rec = self._recorded[self._n]
            raise NonDeterminismError(
                self.id, self._n, (str(rec.get("name")), rec.get("input")), None
            )

    def patched(self, since_version: int) -> bool:
        """Explicit version branch: did this run start on ``since_version`` or later?"""
        return self.version >= since_version

    # -- steps -----------------------------------------------------------------

    def _replay(self, n: int, name: str, input: Json) -> dict[str, Any] | None:
        if n >= len(self._recorded):
            return None
        rec = self._recorded[n]
        same_name = rec.get("name") == name
        if not same_name or (self.worker.check_inputs and not _same(rec.get("input"), input)):
            raise NonDeterminismError(
                self.id, n, (str(rec.get("name")), rec.get("input")), (name, input)
            )
        return rec

    async def step(
        self, name: str, fn: StepFn, input: Json = None, *, retry: RetryPolicy = NO_RETRY
    ) -> Json:
        n = self._n
        self._n += 1
        rec = self._replay(n, name, input)
        if rec is not None:
            self._at = rec.get("at")
            if "error" in rec:
                raise StepFailed(rec["error"])
            output: Json = rec.get("output")
            return output
        key = self.worker.idempotency_key(self.id, self.run, n)
        attempt = 1
        while True:
            try:
                result = await fn(StepCall(key, attempt))
                break
            except retry.retry_on as exc:
                if attempt >= retry.max_attempts:
                    why = f"{name} failed after {attempt} attempt(s): {exc or type(exc).__name__}"
                    await self._log(n, {"name": name, "input": input, "error": why})
                    log.info("step gave up", wf=self.id, step=n, name=name, attempts=attempt)
                    raise StepFailed(why) from exc
                delay = retry.delay(attempt)
                log.info("step retrying", wf=self.id, step=n, name=name, attempt=attempt,
                         after=delay)
                await self.env.clock.sleep(delay)
                attempt += 1
        await self._log(n, {"name": name, "input": input, "output": result})
        return result

    async def _log(self, n: int, entry: dict[str, Json]) -> None:
        """Write step ``n``, stamped with the time (the origin of the next wait's timeout)."""
        self._at = entry["at"] = self.env.clock.now()
        await self.worker.record(self.id, self.run, n, entry)

    async def now(self) -> float:
        """The current time, logged (so replay sees the time the first run saw)."""

        async def read(_: StepCall) -> Json:
            return self.env.clock.now()

        value = await self.step("now", read)
        assert isinstance(value, (int, float))
        return float(value)

    # -- waits and messages ----------------------------------------------------

    async def wait(
        self,
        kinds: Sequence[str],
        *,
        timeout: float | None = None,
        deadline: float | None = None,
        match: dict[str, Json] | None = None,
    ) -> tuple[Json, float]:
        """The first inbox message of one of ``kinds`` (and ``match``), or ``None``.

        Returns ``(message or None, deadline)``; the deadline is absolute (as
        logged), so a caller can wait again for the remainder of the same span.
        A ``timeout`` counts from the time the previous step was logged (every
        log entry carries it), so the deadline is the same on every replay and
        the wait is a single step; only a wait that is the first step of its
        run logs a ``timer`` step with the deadline first.
        """
        spec: dict[str, Json] = {"kinds": list(kinds), "timeout": timeout, "deadline": deadline,
                                 "match": match}
        if deadline is not None or timeout is None:
            # Nothing to read from the clock, so nothing to log before waiting.
            until = math.inf if deadline is None else float(deadline)
        elif self._at is not None:
            # The timeout counts from when the previous step was logged: a time
            # the log holds, so the same deadline on every replay.
            until = self._at + timeout
        else:
            span = float(timeout)

            async def arm(_: StepCall) -> Json:
                return self.env.clock.now() + span

            logged = await self.step("timer", arm, spec)
            until = math.inf if not isinstance(logged, (int, float)) else float(logged)
        n = self._n
        self._n += 1
        rec = self._replay(n, "wait", spec)
        if rec is not None:
            self._at = rec.get("at")
            out = rec["output"]
            key = out.get("key")
            if key:
                self.consumed.add(key)
            return out.get("message"), until
        worker, clock = self.worker, self.env.clock
        while True:
            bell = worker.bell(self.id)
            found = self._take(kinds, match or {})
            if found is not None:
                key, body = found
                # The log entry is what consumes the message: a replay (or a
                # later wait of this run) skips every key a wait step logged.
                self.consumed.add(key)
                await self._log(n, {"name": "wait", "input": spec,
                                     "output": {"message": body, "key": key}})
                return body, until
            left = until - clock.now()
            if left <= 0:
                await self._log(n, {"name": "wait", "input": spec, "output": {"message": None}})
                return None, until
            with trio.move_on_after(left):  # inf: until a message rings the bell
                await bell.wait()

    def _take(self, kinds: Sequence[str], match: dict[str, Json]) -> tuple[str, Json] | None:
        """The first unconsumed inbox message that fits, in key order (no store call)."""
        inbox = self.worker.inbox(self.id)
        for key in sorted(inbox):
            body = inbox[key]
            if key in self.consumed or not isinstance(body, dict):
                continue
            if body.get("kind") in kinds and all(body.get(k) == v for k, v in match.items()):
                return key, body
        return None

    async def sleep(self, seconds: float) -> None:
        """A durable sleep: a wait that no message can end."""
        await self.wait([], timeout=seconds)

    async def signal(self, target: str, body: dict[str, Json]) -> None:
        """Put ``body`` in ``target``'s inbox, once (the step key is the message id)."""

        async def send(call: StepCall) -> Json:
            return await self.worker.deliver(target, call.key.replace("/", ":"), body)

        await self.step("signal", send, {"to": target, "body": body})

    async def start_child(self, wf_type: str, child_id: str, args: Json) -> None:
        """Create workflow ``child_id`` (once) and start running it."""

        async def start(_: StepCall) -> Json:
            return await self.worker.start(child_id, wf_type, args, parent=self.id)

        await self.step("start_child", start, {"type": wf_type, "id": child_id, "args": args})

    async def join(self, child_id: str) -> Json:
        """Wait until workflow ``child_id`` has ended and return ``{status, result}``.

        A child that reports its outcome by a signal has not ended yet when the
        signal lands (its final meta record comes after it); a parent that acts
        on "it is over" (starts the next one, say) joins it first.
        """

        async def wait_end(_: StepCall) -> Json:
            return await self.worker.join(child_id)

        return await self.step("join", wait_end, {"id": child_id})

    def continue_as_new(self, carried: Json) -> NoReturn:
        """End this run; a new run starts with an empty log and ``ctx.carried == carried``."""
        raise ContinueAsNew(carried)


__all__ = ["Context", "StepCall", "StepFn", "inbox_key", "step_key"]
