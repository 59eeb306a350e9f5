"""The Replenisher's settings, including the switches that reintroduce known bugs.

Every switch defaults to the correct design.  The simulation scenarios flip
one at a time to show that dst finds the bug it reintroduces; a production
deployment never touches them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from dst.runtime.durable import RetryPolicy

#: Turns after which a replenishment gives up: a decider that never picks a
#: finishing tool must not keep a purchase open forever.
MAX_TURNS = 30

#: Chases of an overdue supplier before the agent stops chasing.
MAX_CHASES = 3

#: The example policy of the domain: 6 attempts, 2 s first interval, x2.
PLACE_ORDER_RETRY = RetryPolicy(max_attempts=6, initial_interval=2.0, backoff=2.0)
CHASE_RETRY = RetryPolicy(max_attempts=3, initial_interval=2.0, backoff=2.0)


@dataclass(frozen=True)
class Options:
    sku: str = "SKU-1"
    safety_stock: int = 10
    #: Seconds in a day (86,400 in production and simulation; short in a real-clock test).
    day: float = 86400.0
    check_every_days: float = 7.0
    #: Stock checks after which the entity stops (once no replenishment runs).  The
    #: default, one, is a single replenishment from start to outcome; a scenario about
    #: checks that overlap a replenishment, or about years of them, raises it.
    horizon_checks: int = 1
    #: Entity log entries after which it continues as new.
    entity_log_limit: int = 40
    #: Code version of the Replenish workflow (2 targets 3x safety stock, not 2x).
    code_version: int = 1
    # -- bug switches (defaults: the correct design) --------------------------
    version_branch: bool = True  # v2 code keeps v1 behaviour for runs started on v1
    count_active: bool = True  # the stock check knows a replenishment is running
    retry: bool = True  # place_order retries under PLACE_ORDER_RETRY
    key_per_attempt: bool = False  # idempotency key changes with each attempt
    unknown_is_failure: bool = False  # an order whose outcome is unknown counts as failed
    price_cap: bool = True  # the order carries the approved price as a cap
    chase_limit: bool = True  # chase_supplier at most MAX_CHASES times per order
    trust_email: bool = False  # text in a supplier email may set the approval
    continue_as_new: bool = True  # the entity restarts itself with carried state
    carry_state: bool = True  # ... carrying all of it (promises included)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> Options:
        return cls(**data)
