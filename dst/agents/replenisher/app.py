"""The Replenisher as a process: a durable worker running the SKU entity and its replenishments."""

from __future__ import annotations

from typing import Any

from dst.env import Env, Json
from dst.runtime.durable import Context, Worker, WorkflowType

from .entity import sku_agent
from .options import Options
from .process import replenish


def workflow_types(o: Options) -> list[WorkflowType]:
    async def entity_fn(ctx: Context) -> Json:
        return await sku_agent(ctx, o)

    async def process_fn(ctx: Context) -> Json:
        return await replenish(ctx, o)

    return [WorkflowType("SkuAgent", entity_fn, version=1),
            WorkflowType("Replenish", process_fn, version=o.code_version)]


def entity_id(sku: str) -> str:
    return f"agent-{sku}"


async def run_replenisher(env: Env, o: Options, *, durable: bool = True,
                          check_inputs: bool = True, exit_when_idle: bool = False,
                          **_: Any) -> None:
    """Run (or resume) the SKU's entity and whatever replenishment it has running."""
    worker = Worker(env, workflow_types(o), durable=durable, check_inputs=check_inputs)
    await worker.run([(entity_id(o.sku), "SkuAgent", {"sku": o.sku})],
                     exit_when_idle=exit_when_idle)
