"""The world's courier: delivers what the world says later, until the agent acknowledges it.

A real webhook or mail relay retries until the receiver confirms; this is that,
on the simulated network (so messages may be dropped, duplicated or reordered,
and are lost when the agent is down).  The courier never crashes: it is part
of the world, not of the system under test.  It blocks (no timer) when nothing
is pending, so a finished run reaches quiescence.
"""

from __future__ import annotations

import trio

from dst.env import Env

from .world import DAY, World

#: Delay before a message is sent again when no acknowledgement came.
RESEND_AFTER = DAY / 4
#: Sends before the courier gives up on a message (a livelock guard).
MAX_SENDS = 12


async def courier(env: Env, world: World) -> None:
    async def acks() -> None:
        while True:
            msg = await env.net.recv()
            mid = msg.body.get("ack") if isinstance(msg.body, dict) else None
            for out in world.outbox:
                if out.mid == mid and not out.acked:
                    out.acked = True
                    world.wake.set()  # its resend timer is void: re-arm without it

    async with trio.open_nursery() as nursery:
        nursery.start_soon(acks)
        while True:
            now = trio.current_time()
            for out in list(world.outbox):
                if out.acked or out.due > now:
                    continue
                if out.effect is not None:
                    out.effect()
                    out.effect = None
                out.sends += 1
                out.due = now + RESEND_AFTER
                if out.sends >= MAX_SENDS:
                    out.acked = True
                await env.net.send(world.agent, out.body)
            if world.wake.is_set():
                world.wake = trio.Event()
            wake = world.wake
            world.outbox = [o for o in world.outbox if not o.acked]
            pending = [o.due for o in world.outbox]
            if not pending:
                await wake.wait()
            else:
                with trio.move_on_after(max(0.0, min(pending) - trio.current_time())):
                    await wake.wait()
