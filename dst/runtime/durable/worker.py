"""The worker: runs every workflow of one process, and routes messages to their inboxes.

One :class:`Worker` per process.  On start it scans the store for workflows
whose status is ``running`` and resumes each from the top of its log: that is
the whole recovery procedure after a crash, because a workflow's state lives
only in its log.  A waiting workflow holds a trio task but no other resource;
what makes it durable is that its timer and the message that will end its wait
are in the store, not in the task.

Messages arrive on ``env.net`` as ``{"to": workflow id, "id": message id, ...}``.
The router writes each into the target's inbox with a compare-and-set on the
message id (so a resent or duplicated message lands once), wakes the target,
and only then acknowledges to the sender, who resends until acknowledged:
delivery into the inbox is at least once, its effect exactly once.

The worker is the only writer of its workflows' keys (one worker per store),
so it keeps two caches that save a store round trip on the hot paths and are
rebuilt from the store after a restart: which workflows it knows to be
running (a delivery to one needs no read of its meta record), and each
workflow's inbox as last written (a wait looks there instead of scanning).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
import trio

from dst.env import Env, Json, Store

from .context import Context, StepFn
from .errors import ContinueAsNew, NonDeterminismError, StepFailed, VersionError
from .layout import (
    META_PREFIX,
    check_id,
    inbox_key,
    inbox_prefix,
    log_prefix,
    meta_key,
    parse_step_key,
    step_key,
)

log = structlog.get_logger()

__all__ = ["StepFn", "Worker", "WorkflowType"]


@dataclass(frozen=True)
class WorkflowType:
    """A named workflow function and the code version it is at."""

    name: str
    fn: Any  # Callable[[Context], Awaitable[Json]]; Any keeps user signatures simple
    version: int = 1


@dataclass
class Worker:
    """Runs workflows of the given types on ``env`` (and its store)."""

    env: Env
    types: Sequence[WorkflowType]
    #: False keeps step logs in memory only, and derives idempotency keys from a
    #: per-process random nonce: a crash forgets the log and the keys (a planted bug).
    durable: bool = True
    #: False compares only step names on replay, not inputs (a planted bug).
    check_inputs: bool = True
    store: Store = field(init=False)
    _types: dict[str, WorkflowType] = field(init=False)
    _bells: dict[str, trio.Event] = field(init=False, default_factory=dict)
    #: Set when a workflow's task ends (its final meta record is written).
    _ended: dict[str, trio.Event] = field(init=False, default_factory=dict)
    _active: set[str] = field(init=False, default_factory=set)
    #: Workflows whose meta record says ``running`` (this worker is its only writer).
    _live: set[str] = field(init=False, default_factory=set)
    #: Each workflow's inbox messages, as written to the store (key -> body).
    _inbox: dict[str, dict[str, Json]] = field(init=False, default_factory=dict)
    _memory: dict[str, dict[str, Json]] = field(init=False, default_factory=dict)
    _nursery: trio.Nursery | None = field(init=False, default=None)
    _idle: trio.Event | None = field(init=False, default=None)
    _nonce: str = field(init=False, default="")

    def __post_init__(self) -> None:
        self.store = self.env.store
        self._types = {t.name: t for t in self.types}
        self._nonce = "" if self.durable else f"@{self.env.rng.getrandbits(32):08x}"

    # -- running ---------------------------------------------------------------

    async def run(
        self, start: Sequence[tuple[str, str, Json]] = (), *, exit_when_idle: bool = False
    ) -> None:
        """Resume every running workflow, create ``start`` ones (once), route messages.

        With ``exit_when_idle`` return once no workflow is running (a real
        process that has finished its work); otherwise serve messages forever.
        """
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._idle = trio.Event()
            nursery.start_soon(self._route, name="router")
            resumed = 0
            known: set[str] = set()
            for key, meta in await self.store.scan(META_PREFIX):
                known.add(key[len(META_PREFIX):])
                if isinstance(meta, dict) and meta.get("status") == "running":
                    self._spawn(key[len(META_PREFIX):], meta, fresh=False)
                    resumed += 1
            if resumed:
                log.info("resumed workflows", count=resumed)
            for wf_id, wf_type, args in start:
                if wf_id not in known:  # one that exists is resumed above, or has ended
                    await self.start(wf_id, wf_type, args)
            if exit_when_idle:
                if self._active:
                    await self._idle.wait()
                nursery.cancel_scope.cancel()

    async def start(self, wf_id: str, wf_type: str, args: Json, parent: str | None = None) -> Json:
        """Create workflow ``wf_id`` unless it exists; make sure it runs.  Idempotent."""
        check_id(wf_id)
        wtype = self._types.get(wf_type)
        if wtype is None:
            raise LookupError(f"no workflow type {wf_type!r} (known: {sorted(self._types)})")
        meta: dict[str, Json] = {
            "type": wf_type, "version": wtype.version, "run": 0, "status": "running",
            "args": args, "carried": None, "parent": parent,
        }
        created = await self.store.cas(meta_key(wf_id), None, meta)
        if created:
            log.info("workflow started", wf=wf_id, type=wf_type, version=wtype.version)
        if wf_id not in self._active:
            current = meta if created else await self.store.get(meta_key(wf_id))
            if isinstance(current, dict) and current.get("status") == "running":
                # Just created: its log is empty and nobody could deliver to it
                # before the meta record existed, so the first run needs no load.
                self._spawn(wf_id, current, fresh=created)
        return wf_id

    def _spawn(self, wf_id: str, meta: dict[str, Any], *, fresh: bool) -> None:
        if wf_id in self._active or self._nursery is None:
            return
        self._active.add(wf_id)
        self._nursery.start_soon(self._drive, wf_id, meta, fresh, name=f"wf:{wf_id}")

    async def _drive(self, wf_id: str, meta: dict[str, Any], fresh: bool) -> None:
        try:
            known: tuple[dict[str, Any], bool] | None = (meta, fresh)
            while known is not None:
                known = await self._run_once(wf_id, *known)
        finally:
            self._active.discard(wf_id)
            self._live.discard(wf_id)
            self._inbox.pop(wf_id, None)
            ended = self._ended.pop(wf_id, None)
            if ended is not None:
                ended.set()
            if not self._active and self._idle is not None:
                self._idle.set()

    async def _run_once(
        self, wf_id: str, meta: dict[str, Any], fresh: bool
    ) -> tuple[dict[str, Any], bool] | None:
        """One run of the workflow from its (known) meta record.

        Returns the meta record of the next run if it continued as new, else
        ``None``.  ``fresh`` means the run's log is known to be empty, so it is
        not loaded.
        """
        mkey = meta_key(wf_id)
        wtype = self._types[meta["type"]]
        if meta["version"] > wtype.version:
            err = VersionError(f"workflow {wf_id} was started on version {meta['version']}; "
                               f"this code is version {wtype.version}")
            await self._finish(mkey, meta, "stopped", error=str(err), reason="version")
            return None
        self._live.add(wf_id)
        recorded = [] if fresh else await self._load(wf_id, meta["run"])
        if recorded:
            log.info("replaying", wf=wf_id, run=meta["run"], steps=len(recorded))
        ctx = Context(self, wf_id, meta, recorded)
        continued: ContinueAsNew | None = None
        failed: StepFailed | None = None
        result: Json = None
        try:
            try:
                result = await wtype.fn(ctx)
            except ContinueAsNew as cont:
                continued = cont
            except StepFailed as exc:
                failed = exc
            # However the code ended (returned, continued as new, or let a logged
            # failure escape), a log with steps left was written by other code.
            ctx.check_ended()
        except NonDeterminismError as exc:
            log.error("non-determinism: workflow stopped", wf=wf_id, step=exc.step,
                      error=str(exc))
            await self._finish(mkey, meta, "stopped", error=str(exc), reason="nondeterminism")
            return None
        if failed is not None:
            await self._finish(mkey, meta, "failed", error=str(failed))
            return None
        if continued is not None:
            return await self._continue(ctx, meta, continued.carried, wtype.version)
        await self._finish(mkey, meta, "completed", result=result)
        return None

    async def _continue(self, ctx: Context, meta: dict[str, Any], carried: Json,
                        version: int) -> tuple[dict[str, Any], bool]:
        """End run ``r`` and commit run ``r + 1``; returns the new meta record.

        The messages run ``r`` consumed are deleted first (run ``r + 1`` starts
        with an empty log, so it could not tell them from new ones); a crash
        before the meta write replays run ``r``, which deletes them again.  The
        old run's steps are collected beside the new run.
        """
        wf_id, run = ctx.id, meta["run"]
        inbox = self._inbox.get(wf_id, {})
        for key in sorted(ctx.consumed):
            await self.store.delete(key)
            inbox.pop(key, None)
        new = dict(meta, run=run + 1, carried=carried, version=version)
        await self.store.put(meta_key(wf_id), new)
        log.info("continued as new", wf=wf_id, run=new["run"], steps=ctx.steps)
        if self.durable and self._nursery is not None and ctx.steps:
            garbage = [step_key(wf_id, run, n) for n in range(ctx.steps)]
            self._nursery.start_soon(self._collect, garbage, name=f"gc:{wf_id}")
        else:
            self._memory.pop(wf_id, None)
        return new, True

    async def _finish(self, mkey: str, meta: dict[str, Any], status: str, *,
                      result: Json = None, error: str | None = None,
                      reason: str | None = None) -> None:
        """Write the final meta record; a ``stopped`` one says why (``reason``)."""
        wf_id = mkey[len(META_PREFIX):]
        self._live.discard(wf_id)  # before the write: a delivery now reads the meta
        final = dict(meta, status=status, result=result, error=error)
        if reason is not None:
            final["reason"] = reason
        await self.store.put(mkey, final)
        log.info(f"workflow {status}", wf=wf_id, result=result, error=error)
        parent = meta.get("parent")
        if status != "completed" and isinstance(parent, str):
            # A child that did not complete cannot signal its parent itself; the
            # worker does, so the parent is never left waiting for it.
            await self.deliver(parent, f"{wf_id}:ended", {
                "kind": "child_done", "child": wf_id, "outcome": status, "po": None})

    async def _load(self, wf_id: str, run: int) -> list[dict[str, Any]]:
        """The current run's steps in order (and the inbox); deletes older runs' steps."""
        recorded: list[dict[str, Any]] = []
        garbage: list[str] = []
        entries: list[tuple[str, Any]] = await self.store.scan(log_prefix(wf_id))
        inbox = self._inbox.setdefault(wf_id, {})
        for key, entry in entries:
            where = parse_step_key(wf_id, key)
            if where is None:
                if key.startswith(inbox_prefix(wf_id)):
                    inbox[key] = entry
            elif not self.durable:
                continue  # steps live in memory (and a crash forgot them)
            elif where[0] == run and where[1] == len(recorded) and isinstance(entry, dict):
                recorded.append(entry)
            elif where[0] < run:
                garbage.append(key)
        if garbage and self._nursery is not None:
            # Collected beside the workflow, not before it: the old run's keys can
            # never be read by the new run, and a workflow waiting behind forty
            # deletes would not be routing messages.
            self._nursery.start_soon(self._collect, garbage, name=f"gc:{wf_id}")
        if not self.durable:
            for key, value in sorted(self._memory.setdefault(wf_id, {}).items()):
                where = parse_step_key(wf_id, key)
                if where is not None and where[0] == run and isinstance(value, dict):
                    recorded.append(value)
        return recorded

    async def _collect(self, keys: list[str]) -> None:
        for key in keys:
            await self.store.delete(key)

    async def record(self, wf_id: str, run: int, n: int, entry: dict[str, Json]) -> None:
        """Write step ``n`` to the log; the workflow goes on only after this returns."""
        key = step_key(wf_id, run, n)
        if self.durable:
            await self.store.put(key, entry)
        else:
            self._memory.setdefault(wf_id, {})[key] = entry

    def idempotency_key(self, wf_id: str, run: int, n: int) -> str:
        """Stable across attempts and replays: derived from the step's place in the log."""
        return f"{wf_id}/{run}/{n}{self._nonce}"

    async def join(self, wf_id: str) -> Json:
        """Wait until ``wf_id`` has ended here, then return its final meta record's status."""
        if wf_id in self._active:
            ended = self._ended.get(wf_id)
            if ended is None:
                ended = self._ended[wf_id] = trio.Event()
            await ended.wait()
        meta = await self.store.get(meta_key(wf_id))
        if not isinstance(meta, dict):
            return None
        return {"status": meta.get("status"), "result": meta.get("result")}

    # -- messages --------------------------------------------------------------

    def inbox(self, wf_id: str) -> dict[str, Json]:
        """``wf_id``'s inbox as written (key -> message); its waits read it, not the store."""
        return self._inbox.setdefault(wf_id, {})

    def bell(self, wf_id: str) -> trio.Event:
        """The event rung when ``wf_id``'s inbox gets a message (take it before looking)."""
        bell = self._bells.get(wf_id)
        if bell is None:
            bell = self._bells[wf_id] = trio.Event()
        return bell

    async def deliver(self, wf_id: str, message_id: str, body: Json) -> Json:
        """Put ``body`` in ``wf_id``'s inbox once.

        Returns ``True`` (in the inbox), ``"ended"`` (the workflow has finished:
        nobody will read it) or ``"unknown"`` (no such workflow yet: the sender
        should try again later, it may not have been created yet).
        """
        if wf_id not in self._live:
            meta = await self.store.get(meta_key(wf_id))
            if not isinstance(meta, dict):
                return "unknown"
            if meta.get("status") != "running":
                return "ended"
        key = inbox_key(wf_id, message_id)
        if await self.store.cas(key, None, body):
            self._inbox.setdefault(wf_id, {})[key] = body
            bell = self._bells.pop(wf_id, None)
            if bell is not None:
                bell.set()
        return True

    async def _route(self) -> None:
        while True:
            msg = await self.env.net.recv()
            body = msg.body
            if not isinstance(body, dict) or not isinstance(body.get("to"), str):
                log.info("unroutable message dropped", source=msg.source)
                continue
            mid = str(body.get("id", ""))
            target = str(body["to"])
            outcome = await self.deliver(target, mid.replace("/", ":") or "anon", body)
            if outcome == "unknown":
                # Not acknowledged: the sender resends, and by then the workflow
                # may exist (a message can outrun the workflow it is for).
                log.info("message for an unknown workflow not acknowledged", to=target, id=mid)
                continue
            if outcome == "ended":
                log.info("message for a finished workflow dropped", to=target, id=mid)
            if mid:
                await self.env.net.send(msg.source, {"ack": mid})
