"""structlog events from the code under test land in the trace, with bound context."""

from __future__ import annotations

from typing import Any

import structlog

from dst import Env, Sim

from .simkit import events, inline, one


def test_events_carry_fields_bound_with_structlog_contextvars() -> None:
    log = structlog.get_logger()

    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def worker(env: Env) -> None:
            structlog.contextvars.bind_contextvars(request="r1")
            await env.store.get("x")
            log.info("handled", status=200)
            log.warning("slow", ms=5)
            structlog.contextvars.clear_contextvars()

        sim.process("worker", worker, stores=["db"])

    told = events(one(inline(setup)))
    assert told == [("worker", "handled", {"request": "r1", "status": 200}),
                    ("worker", "slow", {"request": "r1", "ms": 5, "level": "warning"})]


def test_logging_outside_a_run_is_left_to_the_users_configuration() -> None:
    from structlog.testing import capture_logs

    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def worker(env: Env) -> None:
            await env.store.get("x")
            structlog.get_logger().info("inside")

        sim.process("worker", worker, stores=["db"])

    one(inline(setup))
    with capture_logs() as logs:
        structlog.get_logger().info("outside", n=1)
    assert logs == [{"event": "outside", "n": 1, "log_level": "info"}]
