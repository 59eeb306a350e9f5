"""Wiring the Replenisher into a simulation, and the checks every replenish scenario shares.

``build`` starts two processes: ``replenisher`` (crashable; its durable store
``agent-db`` survives crashes) running the real agent, and ``world`` (the
courier, never crashed), and registers the fakes as services.  The checks
read the world's records and the agent's durable store directly (``peek``:
no choice point), never the agent's volatile memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from dst.agents.replenisher import MAX_CHASES, MAX_TURNS, Options, run_replenisher
from dst.env import Env
from dst.sim.kernel import Sim
from dst.sim.store import SimStore

from .courier import courier
from .decider import make_decider
from .world import World, WorldConfig

OUTCOMES = ("received", "cancelled", "rejected", "given_up")

#: ``FaultPlan.slow_weight`` of the replenish scenarios: the weight of "fire the
#: next timer" while a task can run or a message can be delivered (1.0 for every
#: other option).  In this world a store write takes
#: milliseconds and the nearest timer is hours or days away, so a timer that
#: fires before runnable work is a slow-agent schedule: worth exploring, but at
#: weight 1.0 it happened at about one decision in three, so a replenishment
#: spent most of its decisions on messages resent and waits timed out while the
#: message that ends them was one step away.  When nothing else can run the
#: timer keeps weight 1.0.
BUSY_TIMER_WEIGHT = 0.1
#: ``FaultPlan.max_slow`` of the replenish scenarios: slow-agent schedules per run.
#: Five keep the planted bugs found as before timers were budgeted (an entity's
#: log outgrows its bound only after several waits timed out one step early).
SLOW_BUDGET = 5


@dataclass
class Kit:
    world: World
    db: SimStore
    options: Options
    deploy_v2_after_crash: bool = False
    #: Parsed meta records by key, with the stored text they were parsed from.
    _parsed: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    #: (store size, prefix) -> key count; a step changes the size when it adds or
    #: removes a key, and one step is one store operation.
    _counted: dict[str, tuple[int, int]] = field(default_factory=dict)

    # -- reading the agent's durable state ----------------------------------------
    # Invariants run after every step, so these avoid scanning the whole store.

    def _meta(self, key: str) -> Any:
        raw = self.db.data.get(key)
        seen = self._parsed.get(key)
        if seen is not None and seen[0] is raw:
            return seen[1]
        meta = self.db.peek(key)
        self._parsed[key] = (raw, meta)
        return meta

    def replenishments(self) -> list[tuple[str, dict[str, Any]]]:
        """``(workflow id, meta)`` of every ``Replenish``, in the order the entity started them.

        The entity names them ``<entity>.r1``, ``.r2``, ... from a logged counter,
        so they are found by probing those keys until one is missing.
        """
        out: list[tuple[str, dict[str, Any]]] = []
        n = 1
        while True:
            wf = f"{self.world.entity}.r{n}"
            meta = self._meta(f"wfmeta/{wf}")
            if not isinstance(meta, dict):
                return out
            out.append((wf, meta))
            n += 1

    def log_size(self, wf_id: str) -> int:
        prefix = f"wf/{wf_id}/"
        size = len(self.db.data)
        known = self._counted.get(prefix)
        if known is not None and known[0] == size:
            return known[1]
        count = sum(1 for k in self.db.data if k.startswith(prefix))
        self._counted[prefix] = (size, count)
        return count


def build(sim: Sim, options: Options, world_cfg: WorldConfig, *, durable: bool = True,
          check_inputs: bool = True, deploy_v2_after_crash: bool = False) -> Kit:
    world = World(sim, world_cfg, entity=f"agent-{options.sku}")
    kit = Kit(world, sim.store("agent-db"), options, deploy_v2_after_crash)
    sim.service("supplier", world.supplier)
    sim.service("manager", world.manager)
    sim.service("erp", world.erp)
    sim.service("warehouse", world.warehouse)
    # The model endpoint fails or answers late; a lost or repeated reply is the same to us.
    sim.service("decider", make_decider(sim, world_cfg.decider), suffers=("fail", "delay"))

    async def agent(env: Env) -> None:
        world.boots += 1
        o = options
        if deploy_v2_after_crash and world.boots > 1:
            o = replace(options, code_version=2)
        await run_replenisher(env, o, durable=durable, check_inputs=check_inputs)

    async def world_main(env: Env) -> None:
        await courier(env, world)

    sim.process("replenisher", agent, stores=["agent-db"])
    sim.process("world", world_main, crashable=False)
    return kit


# -- checks shared by the scenarios (each returns True or a message) -------------------

def nothing_runs_twice(kit: Kit) -> bool | str:
    """One quote request, one PO, one approval request (per price) per replenishment.

    The fakes note the first repeat as it happens (``World.repeated``).
    """
    return kit.world.repeated or True


def one_order_per_po(kit: Kit) -> bool | str:
    seen: dict[str, str] = {}
    for order in kit.world.orders:
        if order["po"] in seen:
            return f"{order['po']} ordered twice ({seen[order['po']]} and {order['id']})"
        seen[order["po"]] = order["id"]
    return True


def order_within_approval(kit: Kit) -> bool | str:
    for order in kit.world.orders:
        appr = kit.world.approvals.get(order["po"])
        if appr is None:
            return f"{order['id']} for {order['po']} placed without the manager's approval"
        if order["price"] > appr["price"] or order["qty"] > appr["qty"]:
            return (f"{order['id']}: {order['qty']} x ${order['price']:.2f} ordered, "
                    f"manager approved {appr['qty']} x ${appr['price']:.2f}")
    return True


def one_active_per_sku(kit: Kit) -> bool | str:
    running = [wf for wf, m in kit.replenishments() if m["status"] == "running"]
    return len(running) <= 1 or f"{len(running)} replenishments running at once: {running}"


def never_failed_while_ordered(kit: Kit) -> bool | str:
    held = {o["po"] for o in kit.world.orders}
    for wf, meta in kit.replenishments():
        result = meta.get("result") or {}
        if meta["status"] == "completed" and result.get("outcome") != "received" \
                and result.get("po") in held:
            return f"{wf} recorded {result['outcome']} while the supplier holds {result['po']}"
    return True


def chases_bounded(kit: Kit) -> bool | str:
    """The supplier is chased at most ``MAX_CHASES`` times per purchase order.

    A chase is counted by its idempotency key, so a chase retried or replayed
    after a crash is the same chase, as the supplier would see it.
    """
    for po, keys in kit.world.chases.items():
        if len(keys) > MAX_CHASES:
            return f"{po} chased {len(keys)} times (at most {MAX_CHASES})"
    return True


def received_only_with_goods(kit: Kit) -> bool | str:
    """A replenishment is recorded ``received`` only for goods that arrived."""
    for wf, meta in kit.replenishments():
        result = meta.get("result") or {}
        if result.get("outcome") == "received" and result.get("po") not in kit.world.delivered:
            return f"{wf} recorded received for {result.get('po')}, whose goods never came"
    return True


#: How a ``decide`` step's entry reads in canonical JSON (a cheap test before decoding).
_DECIDE = '"name":"decide"'


def turns_logged(kit: Kit) -> dict[str, int]:
    """``decide`` steps in each workflow's durable log: one per turn it took.

    The turns a replenishment reports come from its loop counter, which cannot
    pass ``MAX_TURNS``; the log is what a crash and replay could have stretched
    (a replay that appended turns instead of reusing the logged ones).  Empty
    when the log is not durable (``durable=false``).  One pass over the store;
    only entries whose text names a ``decide`` step are decoded.
    """
    counts: dict[str, int] = {}
    for key, raw in kit.db.data.items():
        if type(raw) is not str or _DECIDE not in raw or not key.startswith("wf/"):
            continue
        entry = kit.db.view(key)
        if isinstance(entry, dict) and entry.get("name") == "decide" and "/s/" in key:
            wf = key.split("/", 2)[1]
            counts[wf] = counts.get(wf, 0) + 1
    return counts


def every_replenishment_ends(kit: Kit) -> bool | str:
    """At the end: each replenishment has an outcome within ``MAX_TURNS`` turns.

    A replenishment stopped by the non-determinism error (new code replaying an
    old log) is excused: stopped loudly is the correct behaviour, never a silent
    wrong replay.
    """
    logged: dict[str, int] | None = None
    for wf, meta in kit.replenishments():
        if meta["status"] == "stopped" and meta.get("reason") == "nondeterminism":
            continue
        result = meta.get("result") or {}
        if meta["status"] != "completed" or result.get("outcome") not in OUTCOMES:
            return f"{wf} ended {meta['status']} without an outcome ({meta.get('error')})"
        if logged is None:
            logged = turns_logged(kit)
        turns = max(logged.get(wf, 0), int(result.get("turns", 0)))
        if turns > MAX_TURNS:
            return f"{wf} took {turns} turns, more than {MAX_TURNS}"
    return True


def stock_at_least_safety(kit: Kit) -> bool | str:
    """At the end: when the supplier delivered the last replenishment's order, stock is at
    or above safety stock.

    Only the last one counts: an entity that lives for months replenishes many
    times, and when its last replenishment legitimately ends without goods
    (cancelled after its approval waits ran out, rejected, given up) the stock
    is whatever the demand left, however many earlier orders arrived.
    """
    runs = kit.replenishments()
    if not runs:
        return True
    last_po = (runs[-1][1].get("result") or {}).get("po")
    if last_po not in kit.world.delivered:
        return True
    if kit.world.on_hand < kit.options.safety_stock:
        return (f"stock is {kit.world.on_hand} after {last_po} was delivered "
                f"({kit.world.delivered[last_po]} units), below safety stock "
                f"{kit.options.safety_stock}")
    return True


# -- scenario plumbing --------------------------------------------------------------

def fault_switches(scenario: Any, crashes: int = 1, drops: int = 1, dups: int = 1) -> None:
    """The fault budget switches every replenish scenario has."""
    scenario.switch("crashes", crashes, choices=[0, 1, 2, 3], doc="agent crash budget per run")
    scenario.switch("drops", drops, choices=[0, 1, 2], doc="message drop budget per run")
    scenario.switch("dups", dups, choices=[0, 1, 2], doc="message duplicate budget per run")


def fault_plan(crash_weight: float = 0.1, services: Mapping[str, Any] | None = None) -> Any:
    """The replenish scenarios' plan: budgets from the switches, ``services`` as given."""
    from dst import FaultPlan

    def plan(c: Mapping[str, Any]) -> FaultPlan:
        return FaultPlan(max_crashes=c["crashes"], crash_weight=crash_weight,
                         max_drops=c["drops"], max_dups=c["dups"],
                         max_slow=SLOW_BUDGET, slow_weight=BUSY_TIMER_WEIGHT,
                         services=dict(services or {}))

    return plan


def not_given_up(kit: Kit) -> bool | str:
    """At the end: no replenishment gave up, and each one received had exactly one order."""
    for wf, meta in kit.replenishments():
        result = meta.get("result") or {}
        if result.get("outcome") == "given_up":
            return f"{wf} gave up ({result.get('po')})"
        if result.get("outcome") != "received":
            continue
        orders = [o for o in kit.world.orders if o["po"] == result.get("po")]
        if len(orders) != 1:
            return f"{wf} received {result.get('po')} with {len(orders)} orders"
    return True
