"""dst beside a peer: the same two small workloads for dst and for detangle, in one run.

Usage (detangle needs its own interpreter; any Python 3.11+ with both installed)::

    python3.12 -m venv /tmp/v312peers
    /tmp/v312peers/bin/pip install detangle && /tmp/v312peers/bin/pip install -e .
    /tmp/v312peers/bin/python benchmarks/bench_peers.py [--seeds 2000] [--rounds 7]
        [--drop 0.2] [--detangle-strategy auto] [--no-cli] [--profile N] [--json]

detangle (PyPI) explores the interleavings of unmodified asyncio programs on a
loop of its own (``SimLoop``); it is the fastest Python peer of dst's.  Each
workload is written the way each tool's own documentation writes it:

``lost update``
    two tasks each read a shared counter, yield, write counter+1.  dst: a
    scenario whose one process runs two trio tasks in a nursery, ``trio.sleep(0)``
    between the read and the write, an invariant ("value >= increments done")
    checked after every step; the choice at the checkpoint is dst's preemption
    (the shipped ``FaultPlan``, ``preemptions=2``).  detangle: the example of its
    own docstring, ``asyncio.gather`` of two tasks with ``asyncio.sleep(0)`` and
    an ``assert`` at the end.
``retried charge``
    a shop sends a charge to a payments server, waits for the ack with a 2 s
    timeout and sends it again on a timeout (3 attempts); the server applies
    every charge it receives.  dst: two processes over ``env.net`` with
    ``FaultPlan(max_drops=1)`` (at most one message of a run lost, chosen by the
    scheduler), ``trio.move_on_after``, an invariant "charged at most once".
    detangle: two ``Mailbox`` es on two simulated hosts (``detangle.network()``,
    ``detangle.spawn(..., host=)``), its network's own loss model
    ``net={"drop": p}`` (every message lost with probability ``p``, no budget:
    ``--drop``, 0.2 by default, at which both tools fail about the same share of
    seeds), ``asyncio.timeout``, an ``assert`` at the end.  Both ledgers live in
    the server's memory, so the choices are the messages, timers and faults.

A "seed" is one run: for dst a seed of ``dst.runner.single.run_seeds`` (in
chunks of ``dst.runner.bulk.CHUNK`` seeds, one ``trio.run`` each, as ``dst run``
does), for detangle run index ``i`` of ``detangle.explore(fn, seed=0)``, run
with the loop ``explore`` runs (``strategy.start(i)``, ``detangle.execute``,
``strategy.finish``) so that a failing run does not stop the pass: both sides
give every seed's verdict and count the failing ones.  As ``dst run`` does, a
dst seed whose decisions an earlier seed of the pass took (and a second
confirmed) is answered with that run, not run again (``dst.runner.paths``): the
row "the same, --every-seed" runs every seed, and its ratio is printed too.
detangle's strategy is its default (``auto``: FIFO first, then PCT and random
walks in turn), dst's its default (a random walk).  Then, once, each tool's
documented entry point searches the same seeds and stops at the first failure
(``dst.testing.check_seeds``, ``detangle.explore``, with shrinking): the seeds it
ran and its first line.

Also measured in the same rounds: dst's shipped ``counter`` scenario (2 worker
tasks x 7 compare-and-set increments, its default config) in-process; bare trio,
one ``trio.run`` per seed running the same two workers over a dict store that
checkpoints at each call (no dst, no logging); and the CLI, ``dst run counter
--seeds N --workers 1 --json`` in a child process, its JSON ``seconds`` (and the
child's CPU, start-up included).

Every row runs once per round, rounds alternate which side goes first, and each
pass is timed in CPU seconds of the process (``time.process_time``; a shared
2-core machine makes wall time noisy).  A row's seeds/s is the median over the
rounds with the lowest and highest beside it; a ratio is the median of the
per-round ratios (paired, so a slow moment of the host hits both sides).  The
per-seed CPU median is over every seed of every round (a dst seed that opens a
chunk also pays for starting its ``trio.run``).  ``--profile N`` runs N seeds of
dst's lost update under cProfile and prints the top functions.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import pstats
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
import trio

from dst import Env, FaultPlan, Scenario, Sim
from dst.runner.bulk import CHUNK
from dst.runner.paths import PathMemo
from dst.runner.single import RunResult, run_seeds
from dst.testing import check_seeds
from scenarios import counter

try:
    # Not a dependency of dst (CI type-checks this file without it).
    import detangle  # type: ignore[import-not-found,unused-ignore]
    from detangle.strategies import (  # type: ignore[import-not-found,unused-ignore]
        make_strategy,
    )
except ImportError:  # pragma: no cover - said once, plainly
    sys.exit("bench_peers.py needs detangle: pip install detangle (Python 3.10+), "
             "then run it with that interpreter")

log = structlog.get_logger()

#: Seconds the shop waits for an ack, and the sends of one charge.
ACK_TIMEOUT = 2.0
ATTEMPTS = 3


# -- workload 1, lost update: dst -----------------------------------------------------------

lost_update = Scenario("lost_update", doc="two tasks read a counter, yield, write it plus one")


@dataclass
class Tally:
    value: int = 0
    done: int = 0  # increments that finished


async def increment(tally: Tally, who: str) -> None:
    value = tally.value
    log.info("read counter", who=who, value=value)
    await trio.sleep(0)  # another task may run here: dst's preemption chooses
    tally.value = value + 1
    tally.done += 1
    log.info("incremented", who=who, to=value + 1)


async def two_increments(env: Env, tally: Tally) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(increment, tally, "t1", name="t1")
        nursery.start_soon(increment, tally, "t2", name="t2")


@lost_update.setup
def _lost_update_setup(sim: Sim, config: dict[str, Any]) -> Tally:
    tally = Tally()
    sim.process("counter", lambda env: two_increments(env, tally))
    return tally


@lost_update.invariant("NoLostIncrement")
def _no_lost_increment(tally: Tally) -> bool | str:
    return tally.value >= tally.done or \
        f"counter is {tally.value} after {tally.done} increments"


# -- workload 1, lost update: detangle (its own docstring's example) ---------------------------


async def detangle_lost_update() -> None:
    counter = {"value": 0}

    async def incr() -> None:
        current = counter["value"]
        await asyncio.sleep(0)  # e.g. a database round-trip
        counter["value"] = current + 1

    await asyncio.gather(incr(), incr())
    assert counter["value"] == 2, f"counter is {counter['value']} after 2 increments"


# -- workload 2, retried charge over a lossy link: dst ---------------------------------------

retried_charge = Scenario("retried_charge", doc="a shop retries a charge over a lossy link",
                          faults=FaultPlan(max_drops=1))


@dataclass
class Ledger:
    charges: list[str] = field(default_factory=list)


async def payments(env: Env, ledger: Ledger) -> None:
    while True:
        msg = await env.net.recv()
        ledger.charges.append(str(msg.body))  # applied every time it arrives
        log.info("charged", order=msg.body)
        await env.net.send(msg.source, msg.body)


async def shop(env: Env) -> None:
    for attempt in range(1, ATTEMPTS + 1):
        await env.net.send("payments", "order-1")
        log.info("sent charge", attempt=attempt)
        with trio.move_on_after(ACK_TIMEOUT):
            await env.net.recv()
            log.info("acknowledged")
            return
        log.info("timed out", attempt=attempt)


@retried_charge.setup
def _retried_charge_setup(sim: Sim, config: dict[str, Any]) -> Ledger:
    ledger = Ledger()
    sim.process("payments", lambda env: payments(env, ledger), crashable=False)
    sim.process("shop", shop, crashable=False)
    return ledger


@retried_charge.invariant("ChargedOnce")
def _charged_once(ledger: Ledger) -> bool | str:
    times = ledger.charges.count("order-1")
    return times <= 1 or f"order-1 charged {times} times"


# -- workload 2, retried charge: detangle ----------------------------------------------------


async def detangle_retried_charge() -> None:
    net = detangle.network()
    ledger: list[str] = []
    inbox = net.mailbox(7000, host="payments")
    box = net.mailbox(7001, host="shop")

    async def serve() -> None:
        while True:
            order, sender = await inbox.recv()
            ledger.append(order)  # applied every time it arrives
            detangle.note(f"charged {order}")
            inbox.send(sender, order)

    server = detangle.spawn(serve(), host="payments", name="payments")
    for attempt in range(1, ATTEMPTS + 1):
        box.send(("payments", 7000), "order-1")
        try:
            async with asyncio.timeout(ACK_TIMEOUT):
                await box.recv()
            break
        except TimeoutError:
            detangle.note(f"timed out (attempt {attempt})")
    server.cancel()
    times = ledger.count("order-1")
    assert times <= 1, f"order-1 charged {times} times"


# -- bare trio: counter's two workers, no dst ------------------------------------------------


class _DictStore:
    """counter's store calls over a dict: a checkpoint, then the dict."""

    def __init__(self) -> None:
        self.data: dict[str, int] = {}
        self.calls = 0

    async def get(self, key: str) -> int | None:
        await trio.lowlevel.checkpoint()
        self.calls += 1
        return self.data.get(key)

    async def cas(self, key: str, expected: int | None, new: int) -> bool:
        await trio.lowlevel.checkpoint()
        self.calls += 1
        if self.data.get(key) != expected:
            return False
        self.data[key] = new
        return True


async def _bare_worker(store: _DictStore, increments: int) -> None:
    for _ in range(increments):  # scenarios/counter.py's worker with cas=true
        while True:
            value = await store.get("n") or 0
            if await store.cas("n", value or None, value + 1):
                break
    await store.get("n")


async def _bare_counter(store: _DictStore) -> None:
    config = counter.scenario.default_config()
    async with trio.open_nursery() as nursery:
        for _ in range(config["workers"]):
            nursery.start_soon(_bare_worker, store, config["increments"])


# -- passes ------------------------------------------------------------------------------------


@dataclass
class Pass:
    """One timed pass over the seeds: CPU seconds, per-seed CPU, failures, steps."""

    cpu: float
    wall: float
    per_seed: list[float]
    failed: list[int]
    steps: int
    #: For the CLI row: the JSON ``seconds`` it reported.
    reported: float | None = None


def dst_pass(scenario: Scenario, seeds: int, reuse: bool = True) -> Pass:
    """dst's seeds as ``dst run`` runs them on one worker: chunks of ``CHUNK`` seeds, the
    schedules met kept from chunk to chunk (``dst.runner.paths``) unless not ``reuse``
    (``dst run --every-seed``: every seed runs)."""
    config = scenario.default_config()
    memo: PathMemo | bool = PathMemo() if reuse else False
    per_seed: list[float] = []
    failed: list[int] = []
    steps = 0
    last = 0.0

    def on_result(r: RunResult) -> None:
        nonlocal last, steps
        now = time.process_time()
        per_seed.append(now - last)
        last = now
        steps += r.steps
        if r.violated:
            failed.append(r.seed)

    wall, cpu = time.perf_counter(), time.process_time()
    for start in range(0, seeds, CHUNK):
        last = time.process_time()
        run_seeds(scenario, config, range(start, min(seeds, start + CHUNK)), on_result,
                  reuse=memo)
    return Pass(time.process_time() - cpu, time.perf_counter() - wall, per_seed, failed, steps)


def detangle_pass(fn: Callable[[], Any], config: Any, strategy: str, seeds: int) -> Pass:
    strat = make_strategy(strategy, 0)  # explore(fn, seed=0, strategy=...)'s strategy
    per_seed: list[float] = []
    failed: list[int] = []
    steps = 0
    wall, cpu = time.perf_counter(), time.process_time()
    for i in range(seeds):
        t0 = time.process_time()
        strat.start(i)  # what explore's loop does for run i
        r = detangle.execute(fn, config=config, strategy=strat)
        strat.finish(r.decisions, r.failure is not None)
        per_seed.append(time.process_time() - t0)
        steps += r.steps
        if r.failure is not None:
            failed.append(i)
    return Pass(time.process_time() - cpu, time.perf_counter() - wall, per_seed, failed, steps)


def bare_pass(seeds: int) -> Pass:
    per_seed: list[float] = []
    steps = 0
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(seeds):
        t0 = time.process_time()
        store = _DictStore()
        trio.run(_bare_counter, store)
        steps += store.calls
        per_seed.append(time.process_time() - t0)
    return Pass(time.process_time() - cpu, time.perf_counter() - wall, per_seed, [], steps)


def _dst_command() -> list[str]:
    beside = Path(sys.executable).parent / "dst"
    return [str(beside)] if beside.exists() else [sys.executable, "-m", "dst"]


def cli_pass(seeds: int) -> Pass:
    with tempfile.TemporaryDirectory() as out:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall = time.perf_counter()
        done = subprocess.run(
            [*_dst_command(), "run", "counter", "--seeds", str(seeds), "--workers", "1",
             "--json", "--out", out], capture_output=True, text=True, cwd=out, check=False)
        wall = time.perf_counter() - wall
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"dst run counter exited {done.returncode}: {done.stderr[-2000:]}")
    doc = json.loads(done.stdout)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Pass(cpu, wall, [], [], 0, reported=float(doc["seconds"]))


# -- rows and rounds ---------------------------------------------------------------------------


@dataclass
class Row:
    key: str
    name: str
    side: str  # "dst" or "detangle" or "baseline": which goes first alternates by side
    run: Callable[[int], Pass]
    passes: list[Pass] = field(default_factory=list)


def make_rows(args: argparse.Namespace) -> list[Row]:
    lossy = detangle.SimConfig(net=detangle.NetConfig(drop=args.drop))
    plain = detangle.SimConfig()
    strategy = args.detangle_strategy
    rows = [
        Row("dst_lost", "dst lost update", "dst", lambda n: dst_pass(lost_update, n)),
        Row("dst_lost_every", "  the same, --every-seed", "dst",
            lambda n: dst_pass(lost_update, n, reuse=False)),
        Row("detangle_lost", "detangle lost update", "detangle",
            lambda n: detangle_pass(detangle_lost_update, plain, strategy, n)),
        Row("dst_charge", "dst retried charge", "dst", lambda n: dst_pass(retried_charge, n)),
        Row("dst_charge_every", "  the same, --every-seed", "dst",
            lambda n: dst_pass(retried_charge, n, reuse=False)),
        Row("detangle_charge", "detangle retried charge", "detangle",
            lambda n: detangle_pass(detangle_retried_charge, lossy, strategy, n)),
        Row("dst_counter", "dst counter (in-process)", "dst",
            lambda n: dst_pass(counter.scenario, n)),
        Row("bare_counter", "bare trio counter, trio.run/seed", "baseline", bare_pass),
    ]
    if not args.no_cli:
        rows.append(Row("cli_counter", "dst run counter --workers 1", "dst", cli_pass))
    return rows


#: (row, baseline) pairs whose seeds/s ratio is reported (above 1: the row is faster).
RATIOS = [
    ("dst_lost", "detangle_lost"),
    ("dst_lost_every", "detangle_lost"),
    ("dst_charge", "detangle_charge"),
    ("dst_charge_every", "detangle_charge"),
    ("dst_counter", "bare_counter"),
    ("cli_counter", "bare_counter"),
    ("cli_counter", "dst_counter"),
    ("cli_counter_cpu", "dst_counter"),
]


def rate(p: Pass, seeds: int, *, cpu: bool = False) -> float:
    """Seeds per CPU second; for the CLI, per second of its own ``seconds`` unless ``cpu``
    (then per CPU second of the child, start-up included)."""
    if p.reported is not None and not cpu:
        return seeds / p.reported
    return seeds / p.cpu


def measure(args: argparse.Namespace) -> dict[str, Any]:
    rows = make_rows(args)
    for row in rows:  # warm-up: imports, first trio.run, caches
        row.run(min(args.seeds, CHUNK))
    for r in range(args.rounds):
        # Alternate: dst rows first in even rounds, the others first in odd ones.
        order = sorted(rows, key=lambda row: (row.side == "dst") == (r % 2 == 1))
        for row in order:
            row.passes.append(row.run(args.seeds))
    cli = next((row for row in rows if row.key == "cli_counter"), None)
    if cli is not None:  # the same passes, per CPU second of the child
        rows.append(Row("cli_counter_cpu", "  the same, per child CPU s", "dst", cli.run,
                        cli.passes))
    figures: dict[str, dict[str, Any]] = {}
    for row in rows:
        rates = [rate(p, args.seeds, cpu=row.key == "cli_counter_cpu") for p in row.passes]
        per_seed = [t for p in row.passes for t in p.per_seed]
        first = row.passes[0]
        figures[row.key] = {
            "name": row.name,
            "seeds": args.seeds,
            "rounds": len(row.passes),
            "seeds_per_s": statistics.median(rates),
            "seeds_per_s_min": min(rates),
            "seeds_per_s_max": max(rates),
            "us_per_seed_median": statistics.median(per_seed) * 1e6 if per_seed else None,
            "steps_per_seed": first.steps / args.seeds if first.steps else None,
            # Every pass runs the same seeds: the failures are the same each round.
            "failed": len(first.failed),
            "first_failure": first.failed[0] + 1 if first.failed else None,
            "same_failures_every_round": all(p.failed == first.failed for p in row.passes),
        }
        if row.key.startswith("cli_counter"):
            figures[row.key]["child_cpu_s_median"] = statistics.median(
                p.cpu for p in row.passes)
            figures[row.key]["child_wall_s_median"] = statistics.median(
                p.wall for p in row.passes)
            figures[row.key]["reported_s_median"] = statistics.median(
                p.reported or 0.0 for p in row.passes)
    by_key = {row.key: row for row in rows}
    ratios = {}
    for key, base in RATIOS:
        if key in by_key and base in by_key:
            paired = [rate(a, args.seeds, cpu=key == "cli_counter_cpu")
                      / rate(b, args.seeds, cpu=base == "cli_counter_cpu")
                      for a, b in zip(by_key[key].passes, by_key[base].passes, strict=True)]
            ratios[f"{key}/{base}"] = {"median": statistics.median(paired),
                                       "min": min(paired), "max": max(paired)}
    return {
        "seeds": args.seeds,
        "rounds": args.rounds,
        "drop": args.drop,
        "detangle_strategy": args.detangle_strategy,
        "python": sys.version.split()[0],
        "trio": trio.__version__,
        "detangle": detangle.__version__,
        "rows": figures,
        "ratios": ratios,
        "entry_points": entry_points(args),
    }


def entry_points(args: argparse.Namespace) -> dict[str, Any]:
    """Each tool's documented search, stopped at its first failure: seeds run, first line."""
    found: dict[str, Any] = {}
    lossy = detangle.SimConfig(net=detangle.NetConfig(drop=args.drop))
    cases = [("lost", lost_update, detangle_lost_update, detangle.SimConfig()),
             ("charge", retried_charge, detangle_retried_charge, lossy)]
    with tempfile.TemporaryDirectory() as out:
        for key, scenario, fn, config in cases:
            cpu = time.process_time()
            try:
                checked = check_seeds(scenario, args.seeds, out=out)
                found[f"dst_{key}"] = {"found": False, "line": str(checked),
                                       "cpu_s": time.process_time() - cpu}
            except AssertionError as err:
                line = str(err).splitlines()[0]
                ran = re.search(r"the (\d+)(?:st|nd|rd|th) seed run", line)
                runs = int(ran.group(1)) if ran else None
                found[f"dst_{key}"] = {"found": True, "seeds": runs, "line": line,
                                       "cpu_s": time.process_time() - cpu}
            cpu = time.process_time()
            try:
                stats = detangle.explore(fn, runs=args.seeds, seed=0,
                                         strategy=args.detangle_strategy, config=config,
                                         database=False)
                found[f"detangle_{key}"] = {"found": False, "line": stats.summary(),
                                            "cpu_s": time.process_time() - cpu}
            except detangle.BugFound as bug:
                report = bug.report
                found[f"detangle_{key}"] = {
                    "found": True, "seeds": report.runs, "deviations": report.deviations,
                    "line": f"after {report.runs} runs: {report.failure.headline()} "
                            f"({report.deviations} deviation(s), token {report.token})",
                    "cpu_s": time.process_time() - cpu}
    return found


def profile(seeds: int, top: int) -> str:
    """dst's per-seed loop on the lost update under cProfile: top functions."""
    dst_pass(lost_update, min(seeds, CHUNK))  # warm
    profiler = cProfile.Profile()
    profiler.enable()
    dst_pass(lost_update, seeds)
    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
    return text.getvalue()


# -- output ------------------------------------------------------------------------------------


def render(result: dict[str, Any]) -> str:
    rows = result["rows"]
    lines = [
        f"{result['seeds']} seeds a pass, {result['rounds']} rounds, sides alternating; "
        f"CPU seconds of this process (python {result['python']}, trio {result['trio']}, "
        f"detangle {result['detangle']} strategy {result['detangle_strategy']})",
        "workload 2 message loss: dst FaultPlan(max_drops=1) (the scheduler may drop one "
        f"message a run); detangle net={{'drop': {result['drop']}}} (its network model: "
        "each Mailbox message lost with that probability)",
        "",
        f"{'':34} {'seeds/s':>8} {'(min-max)':>15} {'us/seed':>8} {'steps':>6} "
        f"{'failed':>12} {'1st fail':>8}",
    ]
    for key, row in rows.items():
        spread = f"({row['seeds_per_s_min']:,.0f}-{row['seeds_per_s_max']:,.0f})"
        us = f"{row['us_per_seed_median']:.0f}" if row["us_per_seed_median"] else "-"
        steps = f"{row['steps_per_seed']:.1f}" if row["steps_per_seed"] else "-"
        if key.startswith(("dst_lost", "dst_charge", "detangle")):
            failed = f"{row['failed']} ({100 * row['failed'] / row['seeds']:.0f}%)"
            first = str(row["first_failure"] or "none")
        else:
            failed, first = "-", "-"
        lines.append(f"{row['name']:34} {row['seeds_per_s']:8,.0f} {spread:>15} {us:>8} "
                     f"{steps:>6} {failed:>12} {first:>8}")
    cli = rows.get("cli_counter")
    if cli:
        lines.append(
            f"  (dst run: its JSON seconds (wall, worker start and results database included), "
            f"median {cli['reported_s_median']:.2f} s; the child process took "
            f"{cli['child_cpu_s_median']:.2f} s CPU, {cli['child_wall_s_median']:.2f} s wall, "
            "interpreter start-up included)")
    lines.append("  steps: dst's decisions; detangle's loop steps (handles run); bare trio's "
                 "store calls")
    lines += ["", "seeds/s ratios, median of the per-round ratios (min-max)"]
    for pair, r in result["ratios"].items():
        key, base = pair.split("/")
        lines.append(f"  {rows[key]['name'] + ' / ' + rows[base]['name']:66} "
                     f"{r['median']:5.2f} ({r['min']:.2f}-{r['max']:.2f})")
    lines += ["", "documented entry points, searching the same seeds, stopped at the first failure"]
    for key, e in result["entry_points"].items():
        tool = "dst.testing.check_seeds" if key.startswith("dst") else "detangle.explore"
        lines.append(f"  {tool:24} {key.split('_', 1)[1]:7} {e['cpu_s'] * 1000:6.0f} ms CPU  "
                     f"{e['line']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=2000, help="seeds a pass of every row")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds (median counts)")
    parser.add_argument("--drop", type=float, default=0.2,
                        help="detangle's per-message loss probability for the retried charge")
    parser.add_argument("--detangle-strategy", default="auto",
                        help="auto (its default), random, pct[:depth], fifo")
    parser.add_argument("--no-cli", action="store_true", help="leave out the dst run row")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="only profile N seeds of dst's lost update and print the top")
    parser.add_argument("--top", type=int, default=10, help="functions --profile prints")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.rounds < 1 or not 0.0 <= args.drop <= 1.0:
        parser.error("--seeds and --rounds must be at least 1, --drop a probability")
    if args.profile:
        print(profile(args.profile, args.top))
        return 0
    result = measure(args)
    print(json.dumps(result, indent=2) if args.json else render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
