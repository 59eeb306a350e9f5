"""A task belongs to the process that started it, whatever contextvars context it runs in.

anyio's and the MCP SDK's memory streams carry the sender's context with each
item, and the receiver starts its handler inside it (``ctx.run(tg.start_soon,
...)``); trio then copies that context into the new task.  The handler is still
the receiver's task: labelled with its name, crashed with it, and untouched by
a crash of the process whose context it carries.
"""

from __future__ import annotations

import contextvars
from typing import Any

import trio

from dst import Env, FaultPlan, Sim
from dst.errors import ProcessCrashed

from .simkit import inline, many

HANDLER_PUT = "@db.put(handled)"


def propagation(fates: dict[int, list[str]]) -> Any:
    """A client hands its context to a server, which starts a handler inside it; what
    became of the handler in each seed is appended to ``fates[seed]``."""

    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        fate = fates.setdefault(sim.seed, [])
        carried: list[contextvars.Context] = []
        sent = trio.Event()

        async def client(env: Env) -> None:
            carried.append(contextvars.copy_context())  # what a context stream sends
            sent.set()
            await env.clock.sleep(100)

        async def server(env: Env) -> None:
            async def handler() -> None:
                try:
                    # Shielded: a crash of the server reaches it only as its own task.
                    with trio.CancelScope(shield=True):
                        await env.clock.sleep(1)
                        await env.store.put("handled", 1)
                    fate.append("done")
                except ProcessCrashed:
                    fate.append("crashed")
                    raise

            await sent.wait()
            if not carried:
                return  # a restarted server: the request went to the one that crashed
            context = carried.pop()
            async with trio.open_nursery() as nursery:
                context.run(nursery.start_soon, handler)  # ctx.run(tg.start_soon, ...)

        sim.process("client", client, stores=["db"])
        sim.process("server", server, stores=["db"])
        return sim.store("db")

    return setup


def _chosen(result: Any) -> list[str]:
    return [r["enabled"][r["chosen"]] for r in result.trace().records if r["type"] == "decision"]


def _crashed(result: Any) -> list[str]:
    return [r["target"] for r in result.trace().records
            if r["type"] == "fault" and r["fault"] == "crash"]


def test_a_task_started_in_a_context_from_another_process_is_labelled_as_its_starter() -> None:
    fates: dict[int, list[str]] = {}
    (result,) = many(inline(propagation(fates)), range(1))
    assert result.verdict == "pass", result.violated
    puts = [label for label in _chosen(result) if label.endswith(HANDLER_PUT)]
    assert puts == ["server/handler" + HANDLER_PUT]
    assert fates == {0: ["done"]}


def test_it_survives_a_crash_of_the_process_whose_context_it_carries() -> None:
    fates: dict[int, list[str]] = {}
    plan = FaultPlan(max_crashes=1, crash_only=("client",), crash_weight=50.0)
    crashed_before = 0
    for result in many(inline(propagation(fates), faults=plan), range(40)):
        assert result.verdict == "pass", (result.seed, result.violated)
        chosen = _chosen(result)
        assert "server/handler" + HANDLER_PUT in chosen, result.seed
        if _crashed(result) == ["client"]:
            crash_at = chosen.index("crash:client")
            crashed_before += crash_at < chosen.index("server/handler" + HANDLER_PUT)
    assert crashed_before > 5  # the client was often dead before the handler wrote
    assert fates == {seed: ["done"] for seed in range(40)}


def test_it_dies_with_the_process_that_started_it_shield_or_no_shield() -> None:
    fates: dict[int, list[str]] = {}
    plan = FaultPlan(max_crashes=1, crash_only=("server",), crash_weight=50.0)
    ended_by_crash = 0
    for result in many(inline(propagation(fates), faults=plan), range(40)):
        fate = fates[result.seed]
        assert len(fate) <= 1, (result.seed, fate)
        fate_of_seed = fate[0] if fate else None
        chosen = _chosen(result)
        refused = [r for r in result.trace().records
                   if r["type"] == "fault" and r["fault"] == "refused"]
        if "server/handler" + HANDLER_PUT in chosen:
            assert fate_of_seed == "done", result.seed
            continue
        if _crashed(result) == ["server"] and fate_of_seed is not None:
            # The server crashed while its handler slept in a shielded scope: the
            # handler ended there, and never tried its write as a dead process's.
            assert fate_of_seed == "crashed", result.seed
            assert not any(HANDLER_PUT.lstrip("@") in r["detail"] for r in refused), result.seed
            ended_by_crash += 1
    assert ended_by_crash > 5
