"""Approval scenarios: how fast dst finds each planted bug, and how fast it runs.

Seeds to first failure: for each planted bug of the approval scenarios, 20
disjoint ranges of seeds (range i starts at i * 1000) are searched from their
start until the bug's first violation; the median of those 20 counts is the
figure (goal: at most 50).  Throughput: seeds/s of each approval scenario with
its default (passing) config, beside ``counter`` (the kernel's smallest
scenario) measured in alternating chunks of the same run, so the ratio survives
a slower or busier machine.

Run: ``.venv/bin/python benchmarks/bench_approval.py [--ranges 20] [--seeds 2000]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

from dst import Env, Scenario, Sim
from dst.registry import load
from dst.runner.single import RunResult, run_seeds
from scenarios.approval import SEEDED, seed_card

SCENARIOS = ["approval", "approval_params", "approval_surface", "approval_disclosure"]
#: Seeds per range; a range with no failure counts as this many (a lower bound).
RANGE = 1000


def seeds_to_first_failure(name: str, config: dict[str, Any], wanted: set[str], start: int) -> int:
    scenario = load(name)
    hits: list[int] = []

    class Found(Exception):
        pass

    def note(r: RunResult) -> None:
        if wanted & set(r.violated):
            hits.append(r.seed)
            raise Found

    for chunk in range(start, start + RANGE, 25):
        try:
            run_seeds(scenario, config, range(chunk, chunk + 25), note)
        except Found:
            return hits[0] - start + 1
    return RANGE


def throughput(name: str, seeds: int, start: int = 0) -> float:
    scenario = load(name)
    began = time.perf_counter()
    run_seeds(scenario, scenario.default_config(), range(start, start + seeds), lambda r: None)
    return seeds / (time.perf_counter() - began)


def throughput_ratio(name: str, seeds: int, chunk: int = 100) -> tuple[float, float, float]:
    """Median ratio of ``name``'s seeds/s to ``counter``'s, measured in alternating chunks.

    A shared machine speeds up and slows down within seconds; alternating the two
    scenarios chunk by chunk and taking the median ratio cancels most of that.
    Also returns the best seeds/s seen for each.
    """
    ratios, best, best_base = [], 0.0, 0.0
    for start in range(0, seeds, chunk):
        before = throughput("counter", chunk, start)
        rate = throughput(name, chunk, start)
        after = throughput("counter", chunk, start)
        ratios.append(rate / ((before + after) / 2))
        best, best_base = max(best, rate), max(best_base, before, after)
    return statistics.median(ratios), best, best_base


#: The kernel's share: the choice points of an ``approval`` run (faults off) with none of the
#: runtime's logic: a recovery scan, a task per message, a restore scan, a model call, a read,
#: a tool call, an outcome write and an answer, for a click and a typed message.
skeleton = Scenario("approval_skeleton", doc="approval's choice points without its logic")


@skeleton.setup
def _skeleton(sim: Sim, config: Mapping[str, Any]) -> None:
    db = sim.store("agent-db")
    seed_card(db, {})
    sim.service("tickets", lambda op, req: {"count": 12})
    sim.service("llm", lambda op, req: {"tool": "approve", "approval": SEEDED["id"]})

    async def turn(env: Env, body: Any) -> None:
        await env.store.scan("conv/c1/hist/")
        if body["kind"] == "text":
            await env.services.call("llm", "decide", {"text": "go ahead", "pending": ["a-m0"]})
        await env.store.get("conv/c1/approval/a-m0")
        await env.services.call("tickets", "create_tickets", {"approval": "a-m0", "params": {}})
        await env.store.put(f"conv/c1/hist/outcome/a-m0/{body['id']}", {"result": "done"})
        await env.net.send(body["conn"], {"kind": "answer", "text": "Done."})

    async def agent(env: Env) -> None:
        await env.store.scan("conv/")
        async with trio.open_nursery() as nursery:
            while True:
                nursery.start_soon(turn, env, (await env.net.recv()).body)

    def user(conn: str, at: float, kind: str) -> Callable[[Env], Awaitable[None]]:
        async def main(env: Env) -> None:
            if at:
                await env.clock.sleep(at)
            await env.net.send("agent", {"kind": kind, "id": conn, "conn": conn})
            while True:
                await env.net.recv()
        return main

    sim.process("agent", agent, stores=["agent-db"])
    sim.process("conn-1", user("conn-1", 0.0, "click"), crashable=False)
    sim.process("conn-2", user("conn-2", 1.0, "text"), crashable=False)


def kernel_share(seeds: int, chunk: int = 100) -> float:
    """Median ratio of the skeleton's time per seed to ``approval``'s (faults off, good model)."""
    approval = load("approval")
    quiet = {**approval.default_config(), "crashes": 0, "drops": 0, "dups": 0, "llm": "happy"}
    ratios = []
    for start in range(0, seeds, chunk):
        span = range(start, start + chunk)
        began = time.perf_counter()
        run_seeds(skeleton, {}, span, lambda r: None)
        bare = time.perf_counter() - began
        began = time.perf_counter()
        run_seeds(approval, quiet, span, lambda r: None)
        ratios.append(bare / (time.perf_counter() - began))
    return statistics.median(ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranges", type=int, default=20)
    parser.add_argument("--seeds", type=int, default=2000, help="seeds for the throughput run")
    args = parser.parse_args()
    print(f"seeds to first failure (median over {args.ranges} disjoint ranges of {RANGE})")
    for name in SCENARIOS:
        scenario = load(name)
        for bug in scenario.planted_bugs:
            config = {**scenario.default_config(), **bug.config}
            counts = [seeds_to_first_failure(name, config, set(bug.breaks), i * RANGE)
                      for i in range(args.ranges)]
            setting = " ".join(f"{k}={v}" for k, v in bug.config.items())
            print(f"  {name:<20} {setting:<45} median {statistics.median(counts):>5}"
                  f"  max {max(counts):>4}  ({', '.join(bug.breaks)})")
    for name in SCENARIOS:
        ratio, best, base = throughput_ratio(name, args.seeds)
        print(f"throughput: {name:<20} {best:,.0f} seeds/s at best, counter {base:,.0f} "
              f"(median ratio {ratio:.2f}) on one core")
    print(f"kernel share: the same choice points without the runtime's logic take "
          f"{kernel_share(args.seeds):.0%} of an approval run's time (faults off)")


if __name__ == "__main__":
    main()
