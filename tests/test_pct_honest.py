"""``--strategy pct`` is PCT, or says in one line that it is not.

PCT once counted every message in flight as an actor of its own, and handed
every run with fewer than five contested steps per actor to the random walk
without a word: on the shipped ``approval`` and ``ping`` scenarios a pct run
failed the same seeds with the same traces as ``random`` while its summary said
``under pct:d=5``.  Now the actors are processes, PCT's schedules are its own
on every shipped planted bug (and it still finds them), and where PCT has
nothing to order (one process) the run says ``pct fell back to random: ...`` on
stderr and in ``--json``, and only then schedules as ``random`` does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from dst.cli import main
from dst.explore.strategies import explore
from dst.registry import load
from dst.runner.single import RunResult, run_seeds

FELL_BACK = "pct fell back to random: "


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def cli_run(scenario: str, switches: dict[str, str], strategy: str, seeds: int,
            out: Path) -> tuple[Result, dict[str, Any]]:
    """``dst run`` as a user types it, keeping the trace of every failing seed."""
    args = ["run", scenario, "--seeds", str(seeds), "--strategy", strategy, "--out", str(out),
            "--keep-traces", "all", "--no-shrink", "--json"]
    for key, value in switches.items():
        args += ["-c", f"{key}={value}"]
    result = invoke(*args)
    assert result.exit_code in (0, 1), result.output
    return result, json.loads(result.stdout)


def failing_bodies(doc: dict[str, Any]) -> dict[int, list[str]]:
    """Failing seed -> its kept trace without the header line."""
    return {f["seed"]: Path(f["trace"]).read_text().splitlines()[1:] for f in doc["failures"]}


def bodies(name: str, switches: dict[str, str], spec: str, seeds: range) -> list[list[str]]:
    scenario = load(name)
    config = scenario.config(switches)
    how = explore(spec, scenario, config)
    out: list[RunResult] = []
    run_seeds(scenario, config, seeds, out.append, strategy=how.strategy, plan=how.plan)
    return [r.trace().record_lines()[1:] for r in out]


def planted_bugs() -> list[tuple[str, dict[str, Any], list[str]]]:
    listed = invoke("list", "--json")
    assert listed.exit_code == 0, listed.output
    scenarios = json.loads(listed.stdout)["scenarios"]
    return [(s["name"], bug["config"], bug["breaks"]) for s in scenarios
            for bug in s["planted_bugs"]]


def switch_text(config: dict[str, Any]) -> dict[str, str]:
    return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in config.items()}


# The two shipped races pct used to hand to the random walk in silence.
@pytest.mark.parametrize(("scenario", "switches", "invariant"), [
    ("approval", {"spend_mode": "before"}, "AtMostOnce"),
    ("ping", {"dedup": "false"}, "AtMostOnce"),
])
def test_pct_schedules_its_own_way_and_still_finds_the_planted_bug(
        scenario: str, switches: dict[str, str], invariant: str, tmp_path: Path) -> None:
    pct, pct_doc = cli_run(scenario, switches, "pct", 60, tmp_path / "pct")
    _, walk_doc = cli_run(scenario, switches, "random", 60, tmp_path / "random")

    # Not the random walk under another name: other failing seeds, other traces.
    pct_failing, walk_failing = failing_bodies(pct_doc), failing_bodies(walk_doc)
    assert set(pct_failing) != set(walk_failing)
    for seed in set(pct_failing) & set(walk_failing):
        assert pct_failing[seed] != walk_failing[seed], seed
    # Seed for seed, passing or failing, the trace bodies differ.
    for seed, (a, b) in enumerate(zip(bodies(scenario, switches, "pct", range(10)),
                                      bodies(scenario, switches, "random", range(10)),
                                      strict=True)):
        assert a != b, f"{scenario} seed {seed}: pct ran exactly as random"
    # PCT still finds the planted bug, under its own name, with nothing to confess.
    assert pct.exit_code == 1 and invariant in pct_doc["by_invariant"]
    assert pct_doc["strategy"] == "pct:d=5"
    assert pct_doc["pct_fallback"] is None
    assert FELL_BACK not in pct.stderr


def test_pct_is_pct_on_every_shipped_planted_bug() -> None:
    """Real PCT on every planted bug: with processes as actors, or, where one process's
    tasks are all that ever compete (``agent_pydantic_ai``'s asyncio tasks), with tasks as
    actors, as the fallback line tells the user to ask for."""
    for name, config, _ in planted_bugs():
        scenario = load(name)
        checked = scenario.config(switch_text(config))
        spec = "pct"
        how = explore(spec, scenario, checked)
        if how.fallback is not None and "pct:actors=task" in how.fallback:
            spec = "pct:actors=task"
            how = explore(spec, scenario, checked)
        assert how.fallback is None, (name, config, how.fallback)
        assert bodies(name, switch_text(config), spec, range(1)) != \
            bodies(name, switch_text(config), "random", range(1)), (name, config)
        out: list[RunResult] = []
        run_seeds(scenario, checked, [0], out.append, strategy=how.strategy, plan=how.plan)
        assert out[0].strategy.startswith("pct:d=5,k="), (name, config)


ONE_PROCESS = '''
from typing import Any

import trio

from dst import Env, Scenario, Sim

scenario = Scenario("one_shop", doc="two tasks of one process count sales")
scenario.switch("atomic", True, doc="count with compare-and-set")
scenario.planted_bug({"atomic": False}, breaks=["NoLostSale"], doc="read-then-put loses a sale")


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> dict[str, Any]:
    world: dict[str, Any] = {"sales": 0, "db": sim.store("db")}

    async def till(env: Env) -> None:
        for _ in range(3):
            while True:
                value = await env.store.get("sales") or 0
                if not config["atomic"]:
                    await env.store.put("sales", value + 1)
                    break
                if await env.store.cas("sales", value or None, value + 1):
                    break
            world["sales"] += 1

    async def main(env: Env) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(till, env, name="till-1")
            nursery.start_soon(till, env, name="till-2")

    sim.process("shop", main, stores=["db"])
    return world


@scenario.invariant("NoLostSale")
def no_lost_sale(world: dict[str, Any]) -> bool | str:
    stored = world["db"].peek("sales") or 0
    return stored >= world["sales"] or f"{stored} sales stored, {world['sales']} made"
'''


def test_pct_with_nothing_to_order_says_it_fell_back(tmp_path: Path) -> None:
    """One process: no two processes are ever ready at once, so PCT cannot be PCT."""
    path = tmp_path / "one_shop.py"
    path.write_text(ONE_PROCESS)
    switches = {"atomic": "false"}
    pct, pct_doc = cli_run(str(path), switches, "pct", 20, tmp_path / "pct")
    _, walk_doc = cli_run(str(path), switches, "random", 20, tmp_path / "random")

    lines = [line for line in pct.stderr.splitlines() if line.startswith(FELL_BACK)]
    assert len(lines) == 1
    assert pct_doc["pct_fallback"] == lines[0]
    assert "no two processes were ever ready at once" in lines[0]
    assert pct_doc["strategy"] == "pct:d=5"  # the run key is still the spec asked for
    # And it is exactly the random walk, saying so.
    assert pct.exit_code == 1 and "NoLostSale" in pct_doc["by_invariant"]
    assert failing_bodies(pct_doc) == failing_bodies(walk_doc)

    # The human summary says it too.
    human = invoke("run", str(path), "-c", "atomic=false", "--seeds", "5", "--strategy", "pct",
                   "--out", str(tmp_path / "human"), "--no-shrink")
    assert human.stderr.count(FELL_BACK) == 1

    # Tasks as actors give PCT something to order there, and then it is PCT.
    tasks, tasks_doc = cli_run(str(path), switches, "pct:actors=task", 20, tmp_path / "tasks")
    assert tasks_doc["pct_fallback"] is None and FELL_BACK not in tasks.stderr
    assert "NoLostSale" in tasks_doc["by_invariant"]
    assert failing_bodies(tasks_doc) != failing_bodies(walk_doc)
