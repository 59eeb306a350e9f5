"""A seed whose decisions an earlier seed took is answered with that run (``dst.runner.paths``):
its result and trace are the ones running it gives, byte for byte; a run that drew from its
seed any other way is never reused; code that keeps state between runs turns the reuse off."""

from __future__ import annotations

import gc
import json
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
import trio
from click.testing import CliRunner

from dst import Env, FaultPlan, Scenario, Sim
from dst.cli import main
from dst.explore.strategies import explore
from dst.runner.paths import MAX_KEPT, MAX_PATHS, WARMUP, MemoStats, PathMemo
from dst.runner.single import RunResult, run_seeds
from scenarios import counter

log = structlog.get_logger()

# -- scenarios with few schedules ---------------------------------------------------------

lost = Scenario("memo_lost", doc="two tasks read a counter, yield, write it plus one")


@dataclass
class Tally:
    value: int = 0
    done: int = 0


async def _increment(env: Env, tally: Tally, draw: bool) -> None:
    value = tally.value
    if draw:
        env.rng.random()  # drawn, not used: the decisions stay the same
    await trio.sleep(0)
    tally.value = value + 1
    tally.done += 1


@lost.setup
def _lost_setup(sim: Sim, config: dict[str, Any]) -> Tally:
    tally = Tally()
    draw = bool(config.get("draw", False))
    if config.get("read_seed", False):
        assert sim.seed >= 0

    async def main(env: Env) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_increment, env, tally, draw)
            nursery.start_soon(_increment, env, tally, draw)

    sim.process("counter", main)
    return tally


@lost.invariant("NoLostIncrement")
def _no_lost_increment(tally: Tally) -> bool | str:
    return tally.value >= tally.done or f"counter is {tally.value} after {tally.done}"


charge = Scenario("memo_charge", doc="a shop retries a charge over a lossy link",
                  faults=FaultPlan(max_drops=1))


@dataclass
class Ledger:
    charges: list[str] = field(default_factory=list)


async def _payments(env: Env, ledger: Ledger) -> None:
    while True:
        msg = await env.net.recv()
        ledger.charges.append(str(msg.body))
        await env.net.send(msg.source, msg.body)


async def _shop(env: Env) -> None:
    for _ in range(3):
        await env.net.send("payments", "order-1")
        with trio.move_on_after(2.0):
            await env.net.recv()
            return


@charge.setup
def _charge_setup(sim: Sim, config: dict[str, Any]) -> Ledger:
    ledger = Ledger()
    sim.process("payments", lambda env: _payments(env, ledger), crashable=False)
    sim.process("shop", _shop, crashable=False)
    return ledger


@charge.invariant("ChargedOnce")
def _charged_once(ledger: Ledger) -> bool | str:
    return ledger.charges.count("order-1") <= 1 or "charged twice"


#: Runs of ``leaky`` so far in this process: a module global the code under test keeps.
LEAKED = [0]
leaky = Scenario("memo_leaky", doc="tells how many runs came before it")


@leaky.setup
def _leaky_setup(sim: Sim, config: dict[str, Any]) -> None:
    LEAKED[0] += 1
    told = LEAKED[0]

    async def main(env: Env) -> None:
        await trio.sleep(0)
        log.info("runs so far", n=told)

    sim.process("p", main)


#: Runs of ``drifting`` so far in this process: its story changes after the 8th.
DRIFTED = [0]
drifting = Scenario("memo_drifting", doc="a cache that fills after eight runs")


@drifting.setup
def _drifting_setup(sim: Sim, config: dict[str, Any]) -> None:
    DRIFTED[0] += 1
    phase = "cold" if DRIFTED[0] <= 8 else "warm"

    async def main(env: Env) -> None:
        await trio.sleep(0)
        log.info("cache", phase=phase)

    sim.process("p", main)


# -- helpers ------------------------------------------------------------------------------


def outcomes(scenario: Scenario, seeds: int, reuse: bool = True, strategy: Any = None,
             **config: Any) -> tuple[list[tuple[Any, ...]], MemoStats | None]:
    """Every seed's result, as the reports and trace files see it, and the memo's account."""
    got: list[tuple[Any, ...]] = []

    def keep(r: RunResult) -> None:
        got.append((r.seed, r.verdict, r.violated, r.steps, r.virtual_time, r.ended,
                    r.sim.seed, r.trace().text()))

    cfg = {**scenario.default_config(), **config}
    extra = {} if strategy is None else {"strategy": strategy}
    stats = run_seeds(scenario, cfg, range(seeds), keep, reuse=reuse, **extra)
    return got, stats


def reused_seeds(scenario: Scenario, seeds: int) -> set[int]:
    reused: set[int] = set()
    run_seeds(scenario, scenario.default_config(), range(seeds),
              lambda r: reused.add(r.seed) if r.reused else None, reuse=True)
    return reused


# -- what is reused is what running gives -------------------------------------------------


def test_a_reused_seed_has_the_result_and_trace_running_it_gives() -> None:
    for scenario in (lost, charge):
        every, none = outcomes(scenario, 400, reuse=False)
        reusing, stats = outcomes(scenario, 400)
        assert none is None
        assert reusing == every, scenario.name
        assert stats is not None and stats.disagreement is None
        # Few schedules, each run once recorded and again at each doubling of the seeds that
        # took it (at most 9 times in 400 seeds); the rest reused.
        assert stats.reused == 400 - stats.ran and stats.ran <= 10 * stats.paths
        assert stats.reused > 300


def test_a_schedule_stands_for_others_only_once_a_second_seed_confirmed_it() -> None:
    reused = reused_seeds(lost, 200)
    firsts: dict[str, list[int]] = {}

    def keep(r: RunResult) -> None:
        key = repr([rec for rec in r.sim.records if rec[0] == "decision"])
        firsts.setdefault(key, []).append(r.seed)

    run_seeds(lost, lost.default_config(), range(200), keep, reuse=False)
    assert len(firsts) > 1
    for seeds in firsts.values():
        # The first of each schedule ran, and so did the 1st, 2nd, 4th, 8th... to take it
        # again (each compared with the first); every other one was answered with it.
        ran = {seeds[0]} | {seeds[k] for k in range(1, len(seeds)) if k & (k - 1) == 0}
        assert not reused & ran
        assert set(seeds) - ran <= reused


def test_a_run_that_draws_from_its_seed_is_never_reused() -> None:
    every, _ = outcomes(lost, 150, reuse=False, draw=True)
    reusing, stats = outcomes(lost, 150, draw=True)
    assert reusing == every
    assert stats is not None and (stats.reused, stats.paths) == (0, 0)


def test_a_setup_that_reads_the_seed_is_never_reused() -> None:
    every, _ = outcomes(lost, 150, reuse=False, read_seed=True)
    reusing, stats = outcomes(lost, 150, read_seed=True)
    assert reusing == every
    assert stats is not None and (stats.reused, stats.paths) == (0, 0)


def test_state_kept_between_runs_stops_the_reuse_and_every_seed_runs() -> None:
    LEAKED[0] = 0
    every, _ = outcomes(leaky, 40, reuse=False)
    LEAKED[0] = 0
    reusing, stats = outcomes(leaky, 40)
    assert reusing == every
    assert stats is not None and stats.reused == 0 and not stats.on
    assert stats.disagreement is not None
    assert "took the same decisions but their records differ" in stats.disagreement
    assert "--check-determinism" in stats.disagreement


def test_state_that_changes_after_many_runs_is_caught_by_a_later_check() -> None:
    DRIFTED[0] = 0
    got, stats = outcomes(drifting, 300)
    assert stats is not None and stats.paths == 1
    # One schedule: its seeds 1, 2, 4, ..., 64 ran (runs 2 to 8, all cold) and matched seed
    # 0's; seed 128 was the 9th run, warm, and told apart.  Every later seed ran.
    assert stats.disagreed_at == 128 and not stats.on
    assert stats.disagreement is not None and "records differ" in stats.disagreement
    assert stats.reused == 128 - 8
    assert all('"phase":"warm"' in text for *_, text in got[128:])


def test_a_scenario_of_many_schedules_gives_it_up_and_runs_every_seed() -> None:
    every, _ = outcomes(counter.scenario, 3 * WARMUP, reuse=False)
    reusing, stats = outcomes(counter.scenario, 3 * WARMUP)
    assert reusing == every
    assert stats is not None and not stats.on and stats.disagreement is None


def test_seeds_run_through_the_api_all_run_unless_reuse_is_asked() -> None:
    ran: list[int] = []
    original = lost._setup
    assert original is not None

    def counted(sim: Sim, config: dict[str, Any]) -> Any:
        ran.append(1)
        return original(sim, config)

    lost.setup(counted)
    try:
        assert run_seeds(lost, lost.default_config(), range(100), lambda r: None) is None
        assert len(ran) == 100
        stats = run_seeds(lost, lost.default_config(), range(100), lambda r: None,
                          reuse=True)
        assert stats is not None and len(ran) == 100 + stats.ran < 200
    finally:
        lost.setup(original)


def test_only_the_plain_random_walk_is_reused() -> None:
    how = explore("pct:d=2,k=20", lost, lost.default_config())
    every, _ = outcomes(lost, 60, reuse=False, strategy=how.strategy)
    pct, stats = outcomes(lost, 60, strategy=how.strategy)
    assert pct == every and stats is None


# -- dst run ------------------------------------------------------------------------------


LOST_FILE = """
import trio
from dst import Scenario

scenario = Scenario("lost", doc="two tasks read a counter, yield, write it plus one")


@scenario.setup
def setup(sim, config):
    tally = {"value": 0, "done": 0}

    async def increment():
        value = tally["value"]
        await trio.sleep(0)
        tally["value"] = value + 1
        tally["done"] += 1

    async def main(env):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(increment)
            nursery.start_soon(increment)

    sim.process("counter", main)
    return tally


@scenario.invariant("NoLostIncrement")
def no_lost_increment(tally):
    return tally["value"] >= tally["done"] or "an increment was lost"
"""


def dst_run(tmp_path: Path, *args: str, out: str = "out") -> Any:
    (tmp_path / "lost.py").write_text(LOST_FILE, encoding="utf-8")
    return CliRunner().invoke(main, ["run", str(tmp_path / "lost.py"), *args, "--workers",
                                     "1", "--no-shrink", "--out", str(tmp_path / out)])


def run_json(tmp_path: Path, *args: str, out: str) -> dict[str, Any]:
    result = dst_run(tmp_path, *args, "--json", out=out)
    assert result.exit_code == 1, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def test_dst_run_reuses_across_its_chunks_and_every_seed_runs_them_all(
        tmp_path: Path) -> None:
    reusing = run_json(tmp_path, "--seeds", "1000", out="a")
    every = run_json(tmp_path, "--seeds", "1000", "--every-seed", out="b")
    assert every["reused"] == 0
    # One worker keeps its schedules from chunk to chunk (200 seeds each): the few it meets
    # run once each and again at each doubling of the seeds that took them (6 schedules,
    # under 10 runs each in 1,000 seeds), not once more in every chunk.
    assert reusing["reused"] >= 1000 - 60
    for key in ("runs", "failed", "by_invariant"):
        assert reusing[key] == every[key]
    assert [f["seed"] for f in reusing["failures"]] == [f["seed"] for f in every["failures"]]
    assert Path(reusing["failures"][0]["trace"]).read_bytes() == \
        Path(every["failures"][0]["trace"]).read_bytes()


def test_dst_run_says_how_many_seeds_an_earlier_run_stood_for(tmp_path: Path) -> None:
    result = dst_run(tmp_path, "--seeds", "300")
    assert result.exit_code == 1
    [line] = [x for x in result.stdout.splitlines() if "earlier seed" in x]
    assert line.endswith("seeds took the decisions of an earlier seed, whose run "
                         "(confirmed by a second) stood for theirs (--every-seed runs each)")


LEAKY_FILE = """
import structlog
import trio
from dst import Scenario

scenario = Scenario("leaky", doc="tells how many runs came before it in its process")
RUNS = [0]


@scenario.setup
def setup(sim, config):
    RUNS[0] += 1
    told = RUNS[0]

    async def main(env):
        await trio.sleep(0)
        structlog.get_logger().info("runs so far", n=told)

    sim.process("p", main)
"""


def test_dst_run_tells_two_runs_of_one_schedule_that_differ_as_nondeterminism(
        tmp_path: Path) -> None:
    (tmp_path / "leaky.py").write_text(LEAKY_FILE, encoding="utf-8")
    result = CliRunner().invoke(main, ["run", str(tmp_path / "leaky.py"), "--seeds", "50",
                                       "--workers", "1", "--out", str(tmp_path / "out")])
    assert result.exit_code == 3, result.output
    [line] = [x for x in result.stdout.splitlines() if x.startswith("NONDETERMINISTIC")]
    assert line.startswith("NONDETERMINISTIC seed 1: seeds 0 and 1 took the same decisions "
                           "but their records differ from record ")
    assert "earlier seed" not in result.stdout  # nothing was reused


def test_a_chunk_run_alone_keeps_its_own_schedules_and_tells_a_disagreement(
        tmp_path: Path) -> None:
    """What a Dask worker runs: one chunk, with a memo of its own."""
    from dst.runner.bulk import run_chunk

    (tmp_path / "leaky.py").write_text(LEAKY_FILE, encoding="utf-8")
    told = [o for o in run_chunk(str(tmp_path / "leaky.py"), {}, list(range(20)))
            if o.nondeterminism]
    assert [o.seed for o in told] == [1]
    (tmp_path / "lost.py").write_text(LOST_FILE, encoding="utf-8")
    outcomes = run_chunk(str(tmp_path / "lost.py"), {}, list(range(200)))
    assert sum(o.reused for o in outcomes) > 150
    assert not any(o.nondeterminism for o in outcomes)
    every = run_chunk(str(tmp_path / "lost.py"), {}, list(range(200)), reuse=False)
    assert [(o.seed, o.verdict, o.steps, o.trace_text) for o in outcomes] == \
        [(o.seed, o.verdict, o.steps, o.trace_text) for o in every]


# -- what a recorded run keeps ------------------------------------------------------------

#: The worlds ``hoard``'s setup built that are still alive somewhere.
HOARDS: weakref.WeakSet[Hoard] = weakref.WeakSet()
hoard = Scenario("memo_hoard", doc="a setup that builds a large world")


class Hoard:
    """A world a setup built: a large fixture the processes and checks read."""

    def __init__(self) -> None:
        self.blob = bytearray(1_000_000)
        self.value = 0


@hoard.setup
def _hoard_setup(sim: Sim, config: dict[str, Any]) -> Hoard:
    world = Hoard()
    HOARDS.add(world)

    async def bump(env: Env) -> None:
        value = world.value
        await trio.sleep(0)
        world.value = value + 1

    sim.process("a", bump)
    sim.process("b", bump)
    return world


@hoard.invariant("Small")
def _small(world: Hoard) -> bool:
    return world.value <= 2 and len(world.blob) == 1_000_000


def test_a_recorded_run_keeps_its_story_not_the_world_its_setup_built() -> None:
    # A memo keeps a run per schedule for as long as its pass lasts (up to ``MAX_PATHS``):
    # what it keeps must be the run's records, not a large world built once per run.
    memo = PathMemo()
    every, _ = outcomes(hoard, 200, reuse=False)
    got: list[tuple[Any, ...]] = []
    run_seeds(hoard, hoard.default_config(), range(200),
              lambda r: got.append((r.seed, r.verdict, r.steps, r.trace().text())), reuse=memo)
    assert got == [(seed, verdict, steps, text)
                   for seed, verdict, _v, steps, _t, _e, _s, text in every]
    assert memo.stats.paths > 0 and memo.stats.reused > 100
    gc.collect()
    assert len(HOARDS) == 0


marathon = Scenario("memo_marathon", doc="most runs are short; the rest take thousands of steps")


@marathon.setup
def _marathon_setup(sim: Sim, config: dict[str, Any]) -> None:
    sim.store("s")

    async def main(env: Env) -> None:
        if sim.choose("length", ["short", "long"], [9.0, 1.0]) == "long":
            for i in range(6):
                sim.choose(f"tail{i}", ["a", "b", "c", "d"])
            for i in range(5000):
                await env.store.put("k", i)

    sim.process("p", main, stores=["s"])


def test_schedules_of_thousands_of_steps_stop_the_recording_before_memory_runs_out() -> None:
    # Each long schedule holds over 10,000 records and questions: the memo stops (every
    # later seed runs) before it holds ``MAX_KEPT``, long before ``MAX_PATHS`` schedules.
    every, _ = outcomes(marathon, 500, reuse=False)
    reusing, stats = outcomes(marathon, 500)
    assert reusing == every
    assert stats is not None and not stats.on and stats.disagreement is None
    assert 0 < stats.paths <= MAX_KEPT // 10_000 + 2 < MAX_PATHS
    assert stats.reused > 0


def test_the_reports_of_a_run_that_told_nondeterminism_do_not_say_it_passed(
        tmp_path: Path) -> None:
    (tmp_path / "leaky.py").write_text(LEAKY_FILE, encoding="utf-8")
    junit, md = tmp_path / "r.xml", tmp_path / "r.md"
    result = CliRunner().invoke(main, ["run", str(tmp_path / "leaky.py"), "--seeds", "50",
                                       "--workers", "1", "--out", str(tmp_path / "out"),
                                       "--junit", str(junit), "--summary-md", str(md)])
    assert result.exit_code == 3, result.output
    xml = junit.read_text(encoding="utf-8")
    assert 'failures="1"' in xml and "nondeterministic" in xml
    assert "seeds 0 and 1 took the same decisions" in xml
    assert md.read_text(encoding="utf-8").startswith(
        "### dst run leaky: 1 seed did not repeat itself")
