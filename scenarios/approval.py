"""approval: a click and a typed "go ahead" race to resume one confirmation card.

The user asked for 12 tickets; the agent showed card ``a-m0``.  The user clicks
it on one connection and, a second later, types "go ahead" on another: two
turns, one approval.  The runtime (``dst.agents.tickets`` on
``dst.runtime.approvals``) must run the action at most once, whatever the
scheduler, the fake LLM and the faults do.

Switches are the three conditions of the rule (spend atomically, spend before
the effect, check a view at least as new as the last spend); the defaults are
the correct design.  This module also holds what the other ``approval_*``
scenarios share: the world they build and the six invariants.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dst import Env, FaultPlan, Scenario, Sim
from dst.agents.tickets import serve
from dst.fakes.llm import FakeLLM
from dst.fakes.tickets import TicketBackend
from dst.fakes.users import Screens, Send, add_user
from dst.runtime.approvals import (
    ApprovalConfig,
    approval_key,
    history_prefix,
    new_record,
)
from dst.sim.store import SimStore

CONV = "c1"
#: The card every scenario starts from: 12 tickets, shown on conn-1 in exchange m0.
SEEDED = new_record(CONV, "a-m0", "create_tickets", [], {"count": 12, "priority": "low"}, 1)
#: Outcomes that tell the user an effect (may have) happened.
DISCLOSING = ("done", "unknown")


# -- the world the invariants look at ----------------------------------------------


@dataclass
class Probe:
    """The runtime's observer: remembers claims on stale views and cards it believes shown."""

    db: Any
    stale: list[str] = field(default_factory=list)
    believed: dict[str, str] = field(default_factory=dict)

    def claimed(self, turn: str, conv: str, approval: str, seen_version: int) -> None:
        live = self.db.peek(approval_key(conv, approval))
        if not isinstance(live, dict) or live["version"] <= seen_version:
            return
        receipt = live.get("receipt") or {}
        if receipt.get("turn") == turn and live["version"] == seen_version + 1:
            return  # its own compare-and-set spend
        self.stale.append(f"{turn} resumed {approval} from a view at v{seen_version} "
                          f"after the spend at v{live['version']} by {receipt.get('turn')}")

    def shown(self, conv: str, approval: str, connection: str) -> None:
        self.believed[approval] = connection


@dataclass
class World:
    db: Any  # SimStore, or MemoryStore in the stateful tests: both have peek()
    backend: TicketBackend
    screens: Screens
    probe: Probe
    conv: str = CONV
    #: Card ids seen in the history so far (cards are never removed: a cache is safe).
    recorded: set[str] = field(default_factory=set)
    #: Check name -> store version + effects when it last held.
    held: dict[str, int] = field(default_factory=dict)
    #: Cards shown or believed shown when ShownEqualsRecorded last held.
    cards_held: int = 0
    #: The outcome entries as last scanned, with the store version they were read at.
    outcomes_read: tuple[int, list[dict[str, Any]]] = (-1, [])


def peek(db: Any, key: str) -> Any:
    """A durable value without a choice point (read-only: checks run after every step)."""
    if isinstance(db, SimStore):
        return db.view(key)
    return db.peek(key)


def scan(db: Any, prefix: str) -> list[tuple[str, Any]]:
    """Durable entries under ``prefix`` without a choice point (SimStore or MemoryStore)."""
    if isinstance(db, SimStore):
        return [(k, db.view(k)) for k in sorted(db.data) if k.startswith(prefix)]
    return [(k, v) for k, v in db.snapshot().items() if k.startswith(prefix)]


def seed_card(db: Any, config: Mapping[str, Any]) -> None:
    """Put card a-m0 in the durable store as if an earlier turn had shown it."""
    db.put(approval_key(CONV, SEEDED["id"]), SEEDED)
    db.put(f"conv/{CONV}/draft", {"op": SEEDED["op"], "targets": [], "params": SEEDED["params"]})
    slot = f"{history_prefix(CONV)}card/conn-1/m0"
    if not config.get("history_first_final", False):
        slot += f"/{SEEDED['id']}"
    db.put(slot, {"kind": "card", "record": SEEDED, "connection": "conn-1", "exchange": "m0"})


def faults(config: Mapping[str, Any]) -> FaultPlan:
    # Two "slow" faults: a turn still running when the user's next message, a
    # second later, comes in (the races between two turns need one; a reconnect
    # during two overlapping requests, two), as likely as any other option.
    return FaultPlan(max_crashes=config["crashes"], max_drops=config["drops"],
                     max_dups=config["dups"], max_slow=2, slow_weight=1.0)


def common_switches(scenario: Scenario) -> None:
    scenario.switch("llm", "adversarial", choices=["happy", "adversarial"],
                    doc="the fake LLM: a good model, or a seeded chooser among allowed tools")
    scenario.switch("crashes", 1, choices=[0, 1, 2], doc="agent crash budget per run")
    scenario.switch("drops", 1, choices=[0, 1, 2], doc="message drop budget per run")
    scenario.switch("dups", 1, choices=[0, 1, 2], doc="message duplicate budget per run")


@functools.lru_cache(maxsize=2)
def _seeded(history_first_final: bool) -> SimStore:
    """The durable state every seed starts from, encoded once per process, not per seed."""
    store = SimStore("agent-db")
    seed_card(store, {"history_first_final": history_first_final})
    return store


@functools.lru_cache(maxsize=2)
def _seeded_cards(history_first_final: bool) -> frozenset[str]:
    """The card ids the history holds when a run starts, read once per process.

    ``World.recorded`` starts from them, so ``ShownEqualsRecorded`` does not scan
    the store for the seeded card at each seed's first step: cards are never
    removed, so the cache would hold them after that scan anyway.
    """
    history = scan(_seeded(history_first_final), history_prefix(CONV) + "card/")
    return frozenset(v["record"]["id"] for _k, v in history)


_CONFIGS: dict[tuple[tuple[str, Any], ...], ApprovalConfig] = {}


def _runtime_config(config: Mapping[str, Any]) -> ApprovalConfig:
    """The runtime's config, made once per scenario config (not once per seed)."""
    key = tuple(sorted(config.items()))
    made = _CONFIGS.get(key)
    if made is None:
        made = _CONFIGS[key] = ApprovalConfig.from_mapping(config)
    return made


def build(sim: Sim, config: Mapping[str, Any], script: Sequence[Send]) -> World:
    """The agent process over one durable store, the fakes, and one user's connections."""
    db = sim.store("agent-db")
    seeded = bool(config.get("history_first_final", False))
    db.copy_from(_seeded(seeded))
    backend = TicketBackend(sim, dedup=bool(config.get("backend_dedup", False)))
    sim.service("tickets", backend.handle)  # it can suffer every service fault
    # A model endpoint fails or answers late; a lost or repeated reply is the same to us.
    sim.service("llm", FakeLLM(sim, adversarial=config["llm"] == "adversarial").handle,
                suffers=("fail", "delay"))
    probe = Probe(db)
    runtime_config = _runtime_config(config)

    async def agent(env: Env) -> None:
        await serve(env, runtime_config, observer=probe)

    sim.process("agent", agent, stores=["agent-db"])
    screens = add_user(sim, script, server="agent", conv=CONV)
    screens.show_card("conn-1", SEEDED["id"])
    return World(db, backend, screens, probe, recorded=set(_seeded_cards(seeded)))


# -- the six invariants ---------------------------------------------------------------


Check = Callable[[World], "bool | str"]


def _unless_unchanged(name: str) -> Callable[[Check], Check]:
    """Skip a check of the store and the effects when neither changed since it held.

    Such a check holds trivially before the first effect.  Without a write
    counter (the stateful tests' MemoryStore) it runs in full at every call.
    """

    def wrap(fn: Check) -> Check:
        @functools.wraps(fn)
        def check(w: World) -> bool | str:
            effects = w.backend.effects
            if not effects:
                return True  # each of these checks is about effects that happened
            try:
                # Writes and effects are only ever added, so their sum is unchanged
                # only when neither changed: one number to compare, at every step.
                stamp = w.db.version + len(effects)
            except AttributeError:  # no write counter
                return fn(w)
            if w.held.get(name) == stamp:
                return True
            result = fn(w)
            if result is True:
                w.held[name] = stamp
            return result

        return check

    return wrap


def at_most_once(w: World) -> bool | str:
    if w.backend.repeated is None:  # the backend counts effects per approval as they run
        return True
    aid, n, op = w.backend.repeated
    return f"approval {aid} ran {n} times ({op})"


@_unless_unchanged("NoResurrection")
def no_resurrection(w: World) -> bool | str:
    for aid in sorted(w.backend.counts):
        rec = peek(w.db, approval_key(w.conv, aid))
        if not isinstance(rec, dict) or rec["state"] != "spent":
            return f"{aid} ran but its record says {rec['state'] if rec else 'nothing'}"
    return True


def fresh_restore(w: World) -> bool | str:
    return w.probe.stale[0] if w.probe.stale else True


@_unless_unchanged("ExecutedEqualsApproved")
def executed_equals_approved(w: World) -> bool | str:
    for e in w.backend.effects:
        rec = peek(w.db, approval_key(w.conv, e.approval))
        if not isinstance(rec, dict):
            return f"{e.op} ran under {e.approval}, which has no record"
        if (e.op, e.targets, e.params) != (rec["op"], rec["targets"], rec["params"]):
            return (f"{e.approval} approved {rec['op']} {rec['params']} "
                    f"but executed {e.op} {e.params}")
    return True


def recorded_cards(w: World) -> set[str]:
    w.recorded |= {v["record"]["id"] for _k, v in scan(w.db, history_prefix(w.conv) + "card/")}
    return w.recorded


def shown_equals_recorded(w: World) -> bool | str:
    # Cards are only ever added (to the screens, to the probe's beliefs, to the
    # history), so while as many are shown and believed as when this last held,
    # it still holds: one compare at most steps instead of two subset tests.
    cards = len(w.screens.shown) + len(w.probe.believed)
    if cards == w.cards_held:
        return True
    on_screen = w.screens.all_cards()
    believed = w.probe.believed.keys()
    if not (on_screen <= w.recorded and believed <= w.recorded):
        recorded = recorded_cards(w)
        for aid in sorted(on_screen - recorded):
            return f"the user sees card {aid}, which the history does not hold"
        for aid in sorted(believed - recorded):
            return (f"the runtime believes card {aid} was shown on {w.probe.believed[aid]}, "
                    "but the history never recorded it")
    w.cards_held = cards
    return True


def _outcomes(w: World) -> list[dict[str, Any]]:
    """The outcome entries in key order, scanned again only after a write to the store."""
    version = getattr(w.db, "version", None)
    if version is not None and w.outcomes_read[0] == version:
        return w.outcomes_read[1]
    outcomes = [v for _k, v in scan(w.db, history_prefix(w.conv) + "outcome/")]
    if version is not None:
        w.outcomes_read = (version, outcomes)
    return outcomes


@_unless_unchanged("EffectsDisclosed")
def effects_disclosed(w: World) -> bool | str:
    for out in _outcomes(w):
        n = w.backend.count(out["approval"])
        if n and out["result"] not in DISCLOSING:
            return (f"{out['turn']} told the user nothing happened for {out['approval']}, "
                    f"but it ran {n} time(s)")
    return True


def effects_disclosed_at_end(w: World) -> bool | str:
    told = {o["approval"] for o in _outcomes(w) if o["result"] in DISCLOSING}
    for aid in sorted(set(w.backend.counts) - told):
        return f"{aid} ran but no answer or history entry says so"
    return True


INVARIANTS = {
    "AtMostOnce": at_most_once,
    "NoResurrection": no_resurrection,
    "FreshRestore": fresh_restore,
    "ExecutedEqualsApproved": executed_equals_approved,
    "ShownEqualsRecorded": shown_equals_recorded,
    "EffectsDisclosed": effects_disclosed,
}


def register_checks(scenario: Scenario) -> None:
    for name, fn in INVARIANTS.items():
        scenario.invariant(name)(fn)
    scenario.at_end("EffectsDisclosedAtEnd")(effects_disclosed_at_end)


# -- the race -------------------------------------------------------------------------

scenario = Scenario("approval", doc="a click and a typed 'go ahead' race to resume one approval",
                    faults=faults)
scenario.switch("spend_mode", "cas", choices=["after", "before", "cas"],
                doc="when the spend is written: after the effect, before it, or as a CAS claim")
scenario.switch("fresh_view", True, doc="the check re-reads the durable record")
scenario.switch("serialize", False, doc="one turn at a time per conversation")
scenario.switch("backend_dedup", False,
                doc="the backend drops a repeated idempotency key (bounds effects, not authority)")
common_switches(scenario)
register_checks(scenario)
scenario.planted_bug({"spend_mode": "after"}, breaks=["NoResurrection"],
                     doc="spend recorded after the effect: a resurrected approval")
scenario.planted_bug({"spend_mode": "before"}, breaks=["AtMostOnce"],
                     doc="spend before the effect but a separate write: lost update")
scenario.planted_bug({"spend_mode": "before", "fresh_view": False},
                     breaks=["FreshRestore"],
                     doc="the check trusts the restored view: a stale view")


@scenario.fingerprint(exact=True)
def state(w: World) -> Any:
    """What the processes share outside the agent's store, for `dst explore` to cache states.

    The explorer adds the kernel's state (the store, messages, time, the enabled
    options) and every task's memory, read off its frames: each turn keeps what
    it read in locals and in its ``ApprovalTurn``, the orchestrator's routing and
    gate are reached from them, an argument built inside an ``await`` is a local
    of the frame it is passed to, the two loops that await inside (recovery's
    over sorted keys, a connection's over its script) are told where they are by
    their loop variable, and the fakes' services are read in full.  What is left
    is the world's: the effects the backend counted, what the screens show, and
    what the probe saw.  ``held``, ``recorded``, ``cards_held`` and ``outcomes_read``
    are caches of the checks, not state.
    """
    return (w.backend, w.screens, w.probe)


RACE = [Send(0.0, "conn-1", {"kind": "click", "id": "m1", "approval": SEEDED["id"]}),
        Send(1.0, "conn-2", {"kind": "text", "id": "m2", "text": "go ahead"})]


@scenario.setup
def setup(sim: Sim, config: Mapping[str, Any]) -> World:
    return build(sim, config, RACE)
