"""Retry policies: how often and how patiently a step tries again.

Delivery to the outside world is *at least once*: a step whose call raised
:class:`~dst.env.ServiceUnavailable` does not know whether the effect happened,
so it tries again after a delay that grows geometrically.  That is only safe
when the receiver deduplicates by the step's idempotency key, which stays the
same across attempts and across replays after a crash (see ``StepCall.key``).
The delays run on ``env.clock``, so under simulation a day of backoff costs one
scheduler decision.
"""

from __future__ import annotations

from dataclasses import dataclass

from dst.env import ServiceUnavailable


@dataclass(frozen=True)
class RetryPolicy:
    #: Attempts in all, the first included (1: never retry).
    max_attempts: int = 6
    #: Seconds before the second attempt.
    initial_interval: float = 2.0
    #: Each further delay is the previous one times this.
    backoff: float = 2.0
    #: Ceiling on one delay (``None``: no ceiling).
    max_interval: float | None = None
    #: Exceptions that mean "try again"; anything else fails the step at once.
    retry_on: tuple[type[BaseException], ...] = (ServiceUnavailable,)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts is {self.max_attempts}; it must be at least 1")
        if self.initial_interval < 0 or self.backoff < 1:
            raise ValueError("initial_interval must be >= 0 and backoff >= 1")

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        d = self.initial_interval * self.backoff ** (attempt - 1)
        return d if self.max_interval is None else min(d, self.max_interval)


#: One attempt, no retry.
NO_RETRY = RetryPolicy(max_attempts=1)
