"""Approvals: pending action records, fingerprints, spend modes, receipts.

A risky tool call does not run when the model asks for it: the runtime stores a
*pending action record* (operation, targets, parameters, a fingerprint of what
was shown) and shows the user a confirmation card.  A later turn (a click that
names the record, or a typed "go ahead" that the model resolves to it) resumes
the action.  That turn goes through five protocol actions, each a method here so
that a test can drive them one at a time:

``restore``  read the conversation's history and derive a *view* of its approvals;
``check``    decide from a view (or the live record) that the approval is unspent,
             and claim it; with compare-and-set the claim *is* the spend;
``spend``    write the receipt: the durable record says ``spent``;
``execute``  call the tool once, with the approved parameters;
``record``   append the outcome to the history (what the user is told).

Whether that is safe depends on three conditions, each a switch so the known
bugs can be put back: the spend is atomic (``spend_mode="cas"``, or
``serialize``: one turn at a time per conversation); the spend comes before
the effect (not ``spend_mode="after"``); the check uses a view at least as new
as the last spend (``fresh_view``).  Drop any one and two turns that race on
one approval can run it twice, or leave it unspent after it ran.

Two more switches cover the other shapes: ``bind_params`` (execute what was
approved, not what the draft says now) and ``disclose_on_error`` (after a tool
error, find out whether the effect happened before telling the user).

Layout in the durable store (one prefix per conversation, so restarting and
restoring are one ``scan`` each)::

    conv/{c}/approval/{a}                 the pending action record (the "log")
    conv/{c}/hist/card/...                cards as recorded in the history
    conv/{c}/hist/outcome/{a}/{turn key}  what a turn did and told the user
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Protocol

import structlog
import trio

from dst.env import Env, Json, ServiceUnavailable

log = structlog.get_logger()

SPEND_MODES = ("after", "before", "cas")
#: The protocol actions, in the words the trace and the verdict table count.
ACTIONS = ("restore", "check", "spend", "effect", "record")

Record = dict[str, Any]


@dataclass(frozen=True)
class ApprovalConfig:
    """The design choices; the defaults are the correct design."""

    spend_mode: str = "cas"
    fresh_view: bool = True
    serialize: bool = False
    bind_params: bool = True
    persist_card_first: bool = True
    route_to_newest: bool = False
    history_first_final: bool = False
    disclose_on_error: bool = True

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> ApprovalConfig:
        """The switches of ``config`` this class knows; the rest keep their defaults."""
        names = {f.name for f in fields(cls)}
        made = cls(**{k: v for k, v in config.items() if k in names})
        if made.spend_mode not in SPEND_MODES:
            raise ValueError(f"spend_mode must be one of {SPEND_MODES}, not {made.spend_mode!r}")
        return made


class Observer(Protocol):
    """What the runtime reports about itself, for whoever checks it (tests, audits)."""

    def claimed(self, turn: str, conv: str, approval: str, seen_version: int) -> None:
        """``turn`` (its key) resumes ``approval`` on a view of its record at ``seen_version``.

        With compare-and-set the claim is the spend, so the record already carries
        this turn's receipt when this is called.
        """

    def shown(self, conv: str, approval: str, connection: str) -> None:
        """The runtime now believes the card of ``approval`` is in front of the user."""


class NullObserver:
    def claimed(self, turn: str, conv: str, approval: str, seen_version: int) -> None:
        pass

    def shown(self, conv: str, approval: str, connection: str) -> None:
        pass


# -- records and keys -----------------------------------------------------------


def approval_key(conv: str, approval: str) -> str:
    return f"conv/{conv}/approval/{approval}"


def history_prefix(conv: str) -> str:
    return f"conv/{conv}/hist/"


def outcome_key(conv: str, approval: str, turn_key: str) -> str:
    return f"conv/{conv}/hist/outcome/{approval}/{turn_key}"


def fingerprint(op: str, targets: Json, params: Json) -> str:
    """A short digest of what the card shows: equal fingerprints, equal actions."""
    text = json.dumps([op, targets, params], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def new_record(conv: str, approval: str, op: str, targets: list[Json],
               params: dict[str, Json], seq: int) -> Record:
    """A pending action record, unspent (version 0: no spend yet)."""
    return {"id": approval, "conv": conv, "op": op, "targets": targets, "params": params,
            "fingerprint": fingerprint(op, targets, params), "seq": seq,
            "state": "unspent", "version": 0, "receipt": None}


def spent(record: Record, turn_key: str) -> Record:
    """The record after its spend: the receipt names the turn that spent it."""
    return {**record, "state": "spent", "version": record["version"] + 1,
            "receipt": {"turn": turn_key}}


def view_of(entries: list[tuple[str, Any]]) -> dict[str, Record]:
    """The approvals as the history tells them: each card, marked spent by its outcomes."""
    view: dict[str, Record] = {}
    outcomes: list[Record] = []
    for _key, entry in entries:
        if not isinstance(entry, dict):
            continue
        if entry.get("kind") == "card":
            record = entry["record"]
            view.setdefault(record["id"], record)
        elif entry.get("kind") == "outcome":
            outcomes.append(entry)
    for out in outcomes:
        aid = out["approval"]
        if out.get("spent") and aid in view and view[aid]["state"] != "spent":
            view[aid] = {**view[aid], "state": "spent", "version": out["version"]}
    return view


def describe(view: Mapping[str, Record]) -> str:
    return ", ".join(f"{a} {r['state']}" for a, r in sorted(view.items())) or "no approvals"


# -- one turn that acts on an approval -----------------------------------------


ParamSource = Callable[[Record], Awaitable[Json]]

#: The order each spend mode runs the protocol actions in (a turn takes a copy).
_PLANS: dict[str, tuple[str, ...]] = {
    "after": ("restore", "check", "execute", "spend", "record"),
    "before": ("restore", "check", "spend", "execute", "record"),
    "cas": ("restore", "check", "execute", "record"),
}


class ApprovalTurn:
    """One turn resuming one approval; each protocol action is one method.

    ``plan`` is the order the configured spend mode runs them in; ``step``
    runs the next one and says whether the turn goes on; ``finish`` runs the
    rest.  ``approval`` may be set after ``restore`` (a typed "go ahead" is
    resolved against the restored view).
    """

    def __init__(self, env: Env, config: ApprovalConfig, *, conv: str, label: str,
                 turn_key: str, approval: str | None = None, service: str = "tickets",
                 observer: Observer | None = None,
                 current_params: ParamSource | None = None) -> None:
        self.env, self.config, self.conv = env, config, conv
        self.label, self.turn_key, self.approval = label, turn_key, approval
        self.service = service
        self.observer: Observer = observer if observer is not None else NullObserver()
        self.current_params = current_params
        self.view: dict[str, Record] | None = None
        self.claim: Record | None = None
        self.outcome: Record | None = None
        self.refusal: str | None = None
        self.plan: list[str] = list(_PLANS[config.spend_mode])
        self._next = 0

    @property
    def done(self) -> bool:
        return self._next >= len(self.plan) or self.refusal is not None

    @property
    def next_step(self) -> str | None:
        return None if self.done else self.plan[self._next]

    async def step(self) -> bool:
        """Run the next protocol action; False once the turn has nothing left to do."""
        if self.done:
            return False
        name = self.plan[self._next]
        self._next += 1
        await getattr(self, name)()
        return not self.done

    async def finish(self) -> None:
        # ``step`` in a loop, without a coroutine of its own for each action.
        plan = self.plan
        while self._next < len(plan) and self.refusal is None:
            name = plan[self._next]
            self._next += 1
            await getattr(self, name)()

    def _refuse(self, why: str) -> None:
        self.refusal = why
        log.info(f"{self.label} refused {self.approval}: {why}", approval=self.approval)

    # The five actions.

    async def restore(self) -> None:
        entries = await self.env.store.scan(history_prefix(self.conv))
        self.view = view_of(entries)
        one = self.view.get(self.approval or "")
        if one is not None:
            log.info(f"{self.label} restored approval {self.approval}: {one['state']}",
                     action="restore", approval=self.approval, version=one["version"])
        else:
            log.info(f"{self.label} restored conversation {self.conv}: {describe(self.view)}",
                     action="restore")

    async def check(self) -> None:
        assert self.view is not None, "restore before check"
        aid = self.approval
        seen = self.view.get(aid or "")
        if aid is None or seen is None:
            self._refuse("no such approval in the history")
            return
        if seen["state"] == "spent":
            log.info(f"{self.label} checked {aid}: spent in its view", action="check",
                     approval=aid)
            self._refuse("already used")
            return
        key = approval_key(self.conv, aid)
        if self.config.spend_mode == "cas":
            # The store keeps its own copy of what it is given, so the record
            # written is also the claim (made once).
            claim = spent(seen, self.turn_key)
            won = await self.env.store.cas(key, seen, claim)
            if not won:
                log.info(f"{self.label} lost the claim on {aid}: spent by another turn",
                         action="check", approval=aid)
                self._refuse("already used")
                return
            self.observer.claimed(self.turn_key, self.conv, aid, seen["version"])
            self.claim = claim
            log.info(f"{self.label} claimed and spent {aid} (compare-and-set)",
                     action="check", approval=aid)
            return
        if self.config.fresh_view:
            live: Any = await self.env.store.get(key)
            if not isinstance(live, dict):
                self._refuse("no such approval")
                return
            seen = live
            state = f"{seen['state']} (re-read)"
        else:
            state = f"{seen['state']} (restored view v{seen['version']})"
        if seen["state"] != "unspent":
            log.info(f"{self.label} checked {aid}: {state}", action="check", approval=aid)
            self._refuse("already used")
            return
        self.observer.claimed(self.turn_key, self.conv, aid, seen["version"])
        self.claim = seen
        log.info(f"{self.label} checked {aid}: {state} -> claim", action="check", approval=aid)

    async def spend(self) -> None:
        assert self.claim is not None, "check before spend"
        aid = self.claim["id"]
        await self.env.store.put(approval_key(self.conv, aid), spent(self.claim, self.turn_key))
        self.claim = spent(self.claim, self.turn_key)
        log.info(f"{self.label} spent {aid} (wrote spent)", action="spend", approval=aid)

    async def execute(self) -> None:
        assert self.claim is not None, "check before execute"
        rec = self.claim
        aid = rec["id"]
        params: Json = rec["params"]
        if not self.config.bind_params and self.current_params is not None:
            params = await self.current_params(rec)
        request: Json = {"approval": aid, "targets": rec["targets"], "params": params,
                         "key": f"{self.conv}/{aid}"}
        what = f"{rec['op']} x{_count(params)}"
        try:
            reply = await self.env.services.call(self.service, rec["op"], request)
        except ServiceUnavailable:
            log.info(f"{self.label} executing {what} failed: no reply", approval=aid,
                     level="warning")
            self.outcome = await self._after_error(rec)
            return
        count = reply.get("count", 0) if isinstance(reply, dict) else 0
        self.outcome = {"result": "done", "count": count}
        log.info(f"{self.label} executed {what}", action="effect", approval=aid)

    async def _after_error(self, rec: Record) -> Record:
        """The tool gave no reply: the effect may have happened.  Find out, or say so."""
        if not self.config.disclose_on_error:
            return {"result": "none", "count": 0}
        return await reconcile(self.env, self.service, self.conv, rec, self.label)

    async def record(self) -> None:
        assert self.claim is not None and self.outcome is not None, "execute before record"
        rec = self.claim
        # In spend_mode "after" the spend comes just before this; in every mode the
        # outcome says the approval is used up, which is what later views show.
        entry = {"kind": "outcome", "approval": rec["id"], "turn": self.label,
                 "spent": True, "version": rec["version"], **self.outcome}
        await self.env.store.put(outcome_key(self.conv, rec["id"], self.turn_key), entry)
        log.info(f"{self.label} recorded {rec['id']}: {self.outcome['result']} "
                 f"x{self.outcome['count']}", action="record", approval=rec["id"])


def _count(params: Json) -> Json:
    return params.get("count", 1) if isinstance(params, dict) else 1


async def reconcile(env: Env, service: str, conv: str, rec: Record, who: str) -> Record:
    """Ask the backend what happened under the approval's idempotency key."""
    try:
        found = await env.services.call(service, "lookup", {"key": f"{conv}/{rec['id']}"})
    except ServiceUnavailable:
        log.info(f"{who} cannot tell whether {rec['id']} ran: disclosing that it may have",
                 approval=rec["id"])
        return {"result": "unknown", "count": 0}
    count = found.get("count", 0) if isinstance(found, dict) else 0
    result = "done" if count else "none"
    log.info(f"{who} reconciled {rec['id']}: {result} x{count}", approval=rec["id"])
    return {"result": result, "count": count}


async def recover(env: Env, service: str = "tickets") -> list[Record]:
    """After a restart: every approval spent by a turn that died before recording.

    The dead turn may or may not have called the tool; the backend knows (by the
    idempotency key), so ask it and record the answer.  The approval stays spent:
    running it now would be acting on a "yes" the user gave to a turn that is gone.
    """
    entries: dict[str, Any] = dict(await env.store.scan("conv/"))
    recorded = {(v["approval"]) for k, v in entries.items()
                if "/hist/outcome/" in k and isinstance(v, dict)}
    outcomes = []
    for key in sorted(entries):
        rec = entries[key]
        if "/approval/" not in key or not isinstance(rec, dict):
            continue
        if rec["state"] != "spent" or rec["id"] in recorded:
            continue
        found = await reconcile(env, service, rec["conv"], rec, "recovery")
        entry = {"kind": "outcome", "approval": rec["id"], "turn": "recovery", "spent": True,
                 "version": rec["version"], **found}
        turn_key = rec["receipt"]["turn"] if rec.get("receipt") else "recovery"
        await env.store.put(outcome_key(rec["conv"], rec["id"], f"{turn_key}-recovered"), entry)
        log.info(f"recovery recorded {rec['id']}: {found['result']} x{found['count']}",
                 action="record", approval=rec["id"])
        outcomes.append(entry)
    return outcomes


class _Open:
    """The gate when turns are not serialised: entering it never waits."""

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


_OPEN = _Open()


class TurnGate:
    """One turn at a time per conversation when ``serialize`` is on (volatile, per process).

    ``hold`` returns a plain async context manager (a ``trio.Lock``, or one that
    never waits) rather than a generator-based one: every turn enters it (the
    tickets orchestrator skips the one that never waits when ``serialize`` is off).
    """

    def __init__(self, serialize: bool) -> None:
        self.serialize = serialize
        self._locks: dict[str, trio.Lock] = {}

    def hold(self, conv: str) -> contextlib.AbstractAsyncContextManager[None]:
        if not self.serialize:
            return _OPEN
        lock = self._locks.get(conv)
        if lock is None:
            lock = self._locks[conv] = trio.Lock()
        return lock
